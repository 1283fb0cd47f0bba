"""The funnel's second stage: the approximate search's shortlist rescored with better vectors of the same documents.

The store is in the caller's id order (row ``i`` is document ``i``), either

* float vectors: an array, or a ``.npy`` file of float16/float32 vectors opened memory-mapped (only the shortlisted
  rows are read), scored by ``<raw query, vector>``; or
* codes of the same compressor at a larger budget (e.g. 16 B to route, 64 B to rerank): queries are encoded at that
  budget and scored by the compressor's ``score``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from adaptemb.ann.checks import check_own_codes
from adaptemb.codes import Codes
from adaptemb.errors import InvalidConfigError
from adaptemb.ranking import TopK

BLOCK = 256
"""Queries rescored at a time (bounds the gathered rows: BLOCK x shortlist x dims)."""


class RerankStore:
    """Rescores candidates (caller ids) with the stored vectors or codes."""

    def __init__(self, source: Codes | np.ndarray | Path, compressor: Any, n: int) -> None:
        self.path = source if isinstance(source, Path) else None
        self.store: Codes | np.ndarray = open_vectors(source) if isinstance(source, Path) else source
        if isinstance(self.store, np.ndarray) and (self.store.ndim != 2 or self.store.dtype.kind != "f"):
            raise InvalidConfigError(f"rerank vectors must be a 2-D float array; got {self.store.dtype} {self.store.shape}")
        if len(self.store) < n:
            raise InvalidConfigError(f"the rerank store has {len(self.store):,} rows; the index has ids up to {n - 1:,}")
        self.compressor = compressor
        self.budget = compressor.query_budget(self.store) if isinstance(self.store, Codes) else None
        if isinstance(self.store, Codes):
            check_own_codes(compressor, self.store, self.budget, "the rerank codes")

    @property
    def kind(self) -> str:
        return "codes" if isinstance(self.store, Codes) else "vectors"

    def rescore(self, raw: np.ndarray, candidates: np.ndarray, k: int) -> TopK:
        """The ``k`` best of each query's ``candidates`` (caller ids, -1 for none) rescored against ``raw`` float
        query embeddings: score descending, then id ascending."""
        if len(self.store) <= int(candidates.max(initial=-1)):
            raise InvalidConfigError(f"the rerank store has {len(self.store):,} rows; the index returned id "
                                     f"{int(candidates.max())} (add rows to the store before adding them to the index)")
        scores = self._scores(raw, np.maximum(candidates, 0))
        scores[candidates < 0] = -np.inf
        order = np.lexsort((np.where(candidates < 0, np.iinfo(np.int64).max, candidates), -scores), axis=1)[:, :k]
        return np.take_along_axis(scores, order, axis=1), np.take_along_axis(candidates, order, axis=1)

    def _scores(self, raw: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """(queries, shortlist) float32 scores of each query against its candidates."""
        if isinstance(self.store, np.ndarray):
            if raw.shape[1] != self.store.shape[1]:
                raise InvalidConfigError(f"rerank vectors have {self.store.shape[1]} dimensions, the queries {raw.shape[1]}")
            store = self.store
            return _inner_products(raw, candidates, lambda ids: np.asarray(store[ids], dtype=np.float32))
        queries = self.compressor.encode_queries(raw, k=self.budget)
        return _code_scores(queries, candidates, self.store, self.compressor.score)


def _inner_products(queries: np.ndarray, candidates: np.ndarray, rows: Any) -> np.ndarray:
    """``<queries[i], rows(candidates[i])[j]>`` (queries, shortlist), ``BLOCK`` queries at a time."""
    out = np.empty(candidates.shape, np.float32)
    for start in range(0, len(queries), BLOCK):
        block = candidates[start : start + BLOCK]
        vectors = np.asarray(rows(block.ravel()), dtype=np.float32).reshape(*block.shape, -1)
        out[start : start + len(block)] = np.einsum("qd,qsd->qs", np.asarray(queries[start : start + len(block)],
                                                                              np.float32), vectors)
    return out


CODE_BLOCK = 16
"""Queries rescored at a time against the codes: the compressor scores each block against the union of its
candidates (every kind through its own ``score``), so a block wastes (block - 1) x shortlist scores per query."""


def _code_scores(queries: Codes, candidates: np.ndarray, codes: Codes, score: Any) -> np.ndarray:
    """(queries, shortlist) scores of each query against its candidates' codes, by the compressor's ``score``."""
    out = np.empty(candidates.shape, np.float32)
    for start in range(0, len(candidates), CODE_BLOCK):
        block = candidates[start : start + CODE_BLOCK]
        rows, where = np.unique(block, return_inverse=True)
        scores = np.asarray(score(queries[start : start + len(block)], codes[rows]), np.float32)
        out[start : start + len(block)] = np.take_along_axis(scores, where.reshape(block.shape), axis=1)
    return out


def open_vectors(path: Path) -> np.ndarray:
    """A ``.npy`` file of float16/float32 vectors, memory-mapped read-only; a missing or foreign file is one error."""
    if not path.is_file():
        raise InvalidConfigError(f"rerank vectors file {path} does not exist")
    try:
        vectors = np.load(path, mmap_mode="r")
    except (ValueError, OSError) as err:
        raise InvalidConfigError(f"{path} is not a .npy array file ({err})") from None
    if vectors.ndim != 2 or vectors.dtype not in (np.float16, np.float32):
        raise InvalidConfigError(f"{path} must hold a 2-D float16 or float32 array; got {vectors.dtype} {vectors.shape}")
    return vectors
