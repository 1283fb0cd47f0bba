"""How csr stores its code values, and which (k, value bits) fills a byte budget: measured once, at fit.

After training, ``fit_value_tables`` encodes a sample of the training rows at every k of ``CHOICE_K`` and fits,
for each k, a per-feature codebook of 2, 4, 8 and 16 levels (1-4 bit values: a 1-D k-means of the feature's
values among the top-k) and a per-feature range (8-bit values: 256 even steps). It then scores a held-out slice
of the fit rows, as queries, against the sample's packed codes at every (k, b) and keeps the recall@10 of the
exact float neighbours: the choice table. For each k the value bits are the fewest whose recall is within
``RECALL_TOLERANCE`` of that k's best (``ValueTables.value_bits``); ``encode(x, bytes=B)`` takes the k of the
best recall whose code fits B (``ValueTables.budget_for_bytes``).

Everything is saved with the model: ``codebooks`` (K, h, 32) float16 (the 2 + 4 + 8 + 16 codebook entries and
the 8-bit range of each k of the grid) and ``choices`` (m, 4) float32 rows (k, value bits, bytes, recall).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from adaptemb import PackedSparseCodes

CHOICE_K = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 16, 18, 20, 24, 28, 32, 40, 48, 64)
"""The k at which codebooks are fitted and the choice measured (a k between two uses the lower one's codebook)."""
CODEBOOK_BITS = (1, 2, 3, 4)
"""Value bits with a fitted per-feature codebook; 8 bits use the feature's range, 16 bits float16 values."""
MEASURED_BITS = (1, 2, 3, 4, 8, 16)
RANGE_COLUMNS = slice(30, 32)
CODEBOOK_COLUMNS = {1: slice(0, 2), 2: slice(2, 6), 3: slice(6, 14), 4: slice(14, 30)}
RECALL_TOLERANCE = 0.005
"""A k keeps the fewest value bits whose held-out recall@10 is within this of its best (sampling noise ~0.005)."""
LLOYD_ITERATIONS = 8


def fit_codebook(values: np.ndarray, features: np.ndarray, dim: int, levels: int) -> np.ndarray:
    """Per-feature 1-D k-means (Lloyd, quantile start) of the positive ``values`` of ``features``: (dim, levels)
    float32, rows ascending; a feature seen fewer than ``levels`` times takes the codebook of all values pooled."""
    keep = values > 0
    v, f = values[keep].astype(np.float64), features[keep].astype(np.int64)
    if not len(v):
        return np.tile(np.linspace(0.0, 1.0, levels, dtype=np.float32), (dim, 1))
    pooled = _lloyd(v, np.zeros(len(v), np.int64), 1, levels)[0] if dim > 1 else None
    books = _lloyd(v, f, dim, levels)
    if pooled is not None:
        books[np.bincount(f, minlength=dim) < levels] = pooled
    return books.astype(np.float32)


def _lloyd(v: np.ndarray, f: np.ndarray, dim: int, levels: int) -> np.ndarray:
    order = np.lexsort((v, f))
    v, f = v[order], f[order]
    counts = np.bincount(f, minlength=dim)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    position = np.floor((np.arange(levels) + 0.5) / levels * np.maximum(counts, 1)[:, None]).astype(np.int64)
    books = v[np.minimum(starts[:, None] + position, len(v) - 1)]
    for _ in range(LLOYD_ITERATIONS):
        found = PackedSparseCodes.nearest_levels(torch.from_numpy(v), torch.from_numpy(f), torch.from_numpy(books))
        assigned = found.numpy() + f * levels
        sums = np.bincount(assigned, weights=v, minlength=dim * levels).reshape(dim, levels)
        sizes = np.bincount(assigned, minlength=dim * levels).reshape(dim, levels)
        books = np.sort(np.where(sizes > 0, sums / np.maximum(sizes, 1), books), axis=1)
    return books


def range_codebook(values: np.ndarray, features: np.ndarray, dim: int) -> np.ndarray:
    """(dim, 2) float32: each feature's smallest and largest positive value (all values pooled where it has none)."""
    keep = values > 0
    v, f = values[keep], features[keep]
    low, high = np.full(dim, np.inf), np.full(dim, -np.inf)
    np.minimum.at(low, f, v)
    np.maximum.at(high, f, v)
    missing = ~np.isfinite(low)
    low[missing] = v.min() if len(v) else 0.0
    high[missing] = v.max() if len(v) else 1.0
    return np.stack([low, high], axis=1).astype(np.float32)


def expand_range(bounds: np.ndarray) -> np.ndarray:
    """The 256-level codebook of per-feature (low, high) ``bounds``: even steps from low to high."""
    steps = np.linspace(0.0, 1.0, 256, dtype=np.float32)
    low, high = bounds[:, :1].astype(np.float32), bounds[:, 1:].astype(np.float32)
    return (low + (high - low) * steps).astype(np.float16)


@dataclass(frozen=True)
class ValueTables:
    """The per-k codebooks and the measured choice table (see the module docstring)."""

    codebooks: torch.Tensor  # (K, h, 32) float16
    choices: torch.Tensor  # (m, 4) float32: k, value bits, bytes per vector, held-out recall@10

    @property
    def ks(self) -> np.ndarray:
        """The grid of k with codebooks, ascending."""
        return np.unique(self.choices[:, 0].numpy().astype(np.int64))

    def codebook(self, k: int, value_bits: int) -> np.ndarray | None:
        """The float16 (h, 2**b) codebook for codes of k values at ``value_bits`` (None for float16 values)."""
        if value_bits == 16:
            return None
        row = self.codebooks[int(np.searchsorted(self.ks, k, side="right")) - 1].numpy()
        if value_bits == 8:
            return expand_range(row[:, RANGE_COLUMNS])
        return np.ascontiguousarray(row[:, CODEBOOK_COLUMNS[value_bits]])

    def value_bits(self, k: int) -> int:
        """The fewest value bits whose recall at k (the grid's k at or below it) is within the tolerance of its best."""
        grid_k = self.ks[int(np.searchsorted(self.ks, k, side="right")) - 1]
        rows = self.choices[self.choices[:, 0] == grid_k].numpy()
        good = rows[rows[:, 3] >= rows[:, 3].max() - RECALL_TOLERANCE]
        return int(good[:, 1].min())

    def budget_for_bytes(self, nbytes: float, hidden: int) -> int | None:
        """The grid k of the best held-out recall whose code (at its ``value_bits``) fits ``nbytes``; None if none fits."""
        best: tuple[float, int] | None = None
        for k in self.ks:
            bits = self.value_bits(int(k))
            recall = float(self.choices[(self.choices[:, 0] == k) & (self.choices[:, 1] == bits), 3][0])
            if PackedSparseCodes.row_bytes(int(k), hidden, bits) <= nbytes and (best is None or recall > best[0]):
                best = (recall, int(k))
        return None if best is None else best[1]

    def rows(self) -> list[dict[str, float]]:
        """The choice table as rows (k, value_bits, bytes, recall@10, chosen: the k's own value bits)."""
        return [{"k": int(k), "value_bits": int(b), "bytes": int(n), "recall@10": round(float(r), 4),
                 "chosen": int(b) == self.value_bits(int(k))} for k, b, n, r in self.choices.tolist()]


def fit_value_tables(slots: Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]],
                     project: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
                     docs: torch.Tensor, queries: torch.Tensor, hidden: int) -> ValueTables:
    """Codebooks from ``docs`` (normalised training rows) and the choice table measured with ``queries``
    (normalised held-out rows): ``slots(rows, k)`` gives (values, indices) of the top-k, ``project(rows)`` the
    asymmetric query (values, offset)."""
    ks = [k for k in CHOICE_K if k <= hidden]
    values, indices = (t.numpy() for t in slots(docs, ks[-1]))
    truth = torch.topk(queries @ docs.T, min(10, len(docs)), dim=1).indices.numpy()
    weights, offset = (t.numpy() for t in project(queries))
    books, table = [], []
    for k in ks:
        row = np.zeros((hidden, 32), np.float32)
        v, f = values[:, :k].ravel(), indices[:, :k].ravel()
        for bits in CODEBOOK_BITS:
            row[:, CODEBOOK_COLUMNS[bits]] = fit_codebook(v, f, hidden, 2**bits)
        row[:, RANGE_COLUMNS] = range_codebook(v, f, hidden)
        books.append(row.astype(np.float16))
        for bits in MEASURED_BITS:
            codebook = None if bits == 16 else (expand_range(books[-1][:, RANGE_COLUMNS]) if bits == 8 else
                                                np.ascontiguousarray(books[-1][:, CODEBOOK_COLUMNS[bits]]))
            codes = PackedSparseCodes.from_sparse(indices[:, :k], values[:, :k], hidden, bits, codebook)
            recall = _recall(weights, offset, codes.to_csr(), truth)
            table.append([k, bits, codes.bytes_per_vector, recall])
    return ValueTables(torch.from_numpy(np.stack(books)), torch.tensor(table, dtype=torch.float32))


def _recall(weights: np.ndarray, offset: np.ndarray, docs: sp.csr_matrix, truth: np.ndarray) -> float:
    """Mean share of each query's exact top-10 among its top-10 by ``<weights, doc> + offset``."""
    scores = torch.from_numpy(np.ascontiguousarray((docs @ weights.T).T) + offset[:, None])
    found = torch.topk(scores, truth.shape[1], dim=1).indices.numpy()
    return float(np.mean([len(np.intersect1d(a, b)) for a, b in zip(found, truth)]) / truth.shape[1])
