"""Small made-up data the contract suite and tests fit on: clustered unit-norm rows, and rows set to zero."""

from __future__ import annotations

import numpy as np

Data = tuple[np.ndarray, np.ndarray]
"""Unit-norm rows and their cluster ids (``clustered_embeddings`` output)."""


def clustered_embeddings(n: int = 240, dim: int = 32, clusters: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Unit-norm float32 rows around ``clusters`` random centres, and each row's cluster id."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    labels = rng.integers(0, clusters, size=n)
    rows = centres[labels] + 0.35 * rng.standard_normal((n, dim))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows.astype(np.float32), labels


def with_zero_rows(x: np.ndarray, every: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """A copy of ``x`` with every ``every``-th row (from row 0) set to zero, and the boolean mask of those rows."""
    data = x.copy()
    zero = np.arange(len(x)) % every == 0
    data[zero] = 0
    return data, zero
