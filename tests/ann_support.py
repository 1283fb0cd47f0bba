"""Shared pieces of the approximate-search tests: real embeddings (the built-in data set), two fitted compressors
and their codes, computed once per process."""

from __future__ import annotations

from functools import cache

import numpy as np

import adaptemb
from adaptemb.datasets import load_dataset


@cache
def data() -> tuple[np.ndarray, np.ndarray]:
    """(corpus 8,000 x 384, queries 1,500 x 384): the built-in data set's real sentence embeddings."""
    dataset = load_dataset("default")
    return np.ascontiguousarray(dataset.corpus, np.float32), np.ascontiguousarray(dataset.queries, np.float32)


@cache
def fitted(method: str) -> tuple[adaptemb.Compressor, adaptemb.Codes]:
    """A small fit of ``method`` on half the corpus and the whole corpus encoded: csr's packed codes at 16 B, or
    svd+binary's sign codes at 32 B."""
    corpus, _ = data()
    if method == "csr":
        compressor = adaptemb.fit(corpus[:4000], "csr", hidden=256, k=16, epochs=1, value_bits=1, seed=0,
                                  progress=False)
        return compressor, compressor.encode(corpus, bytes=16)
    compressor = adaptemb.fit(corpus[:4000], "svd+binary", itq_iterations=3, seed=0)
    return compressor, compressor.encode(corpus, bytes=32)


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    """Mean share of each row of ``exact`` ids found in the same row of ``found``."""
    return float(np.mean([len(set(a.tolist()) & set(b.tolist())) / len(b) for a, b in zip(found, exact)]))
