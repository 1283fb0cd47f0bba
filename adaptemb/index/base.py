"""The Index base class, device resolution and the top-k helpers every backend shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch

from adaptemb.codes import Codes
from adaptemb.devices import resolve_device
from adaptemb.ranking import top_k as exact_top_k

SearchResult = tuple[np.ndarray, np.ndarray]
"""(scores, ids), each (n_queries, top_k), best first; scores are the code kind's similarity."""

SCORE_BUFFER_BYTES = 256 * 2**20
"""Upper bound on the float32 score buffer one query block may hold (memory-bounded search)."""


def rows_per_block(row_bytes: int, cap: int) -> int:
    """How many rows of ``row_bytes`` fit in ``SCORE_BUFFER_BYTES`` (at least 1, at most ``cap``)."""
    return int(max(1, min(cap, SCORE_BUFFER_BYTES // max(row_bytes, 1))))


class Index(ABC):
    """Exact search of query codes against document codes, batched over queries.

    A backend declares ``name`` (how saved indexes refer to it) and ``pairs``: the (query kind,
    document kind) pairs it serves. Backends are registered with ``registry.add_index(Backend)`` from
    a plugin's ``register_index_backends`` hook; ``Compressor.index`` looks them up by kind pair.
    Subclasses implement ``_search_batch`` for one batch of at most ``query_batch`` queries; options
    they take must be JSON values or numpy arrays (``options()`` / ``arrays()``, what ``save`` writes).
    """

    name: ClassVar[str]
    pairs: ClassVar[tuple[tuple[str, str], ...]]

    def __init__(self, docs: Codes, *, device: str = "cpu", query_batch: int = 512, query_kind: str | None = None) -> None:
        if not any(docs.kind == doc_kind for _, doc_kind in self.pairs):
            served = ", ".join(sorted({d for _, d in self.pairs}))
            raise TypeError(f"{type(self).__name__} indexes {served} codes; got {docs.kind}")
        if len(docs) == 0:
            raise ValueError("cannot index zero documents")
        if query_batch < 1:
            raise ValueError(f"query_batch must be >= 1; got {query_batch}")
        self.device = str(resolve_device(device))
        self.dim = docs.dim
        self.doc_kind = docs.kind
        self.query_batch = query_batch
        self.docs = docs
        self._n = len(docs)
        if query_kind is not None and query_kind not in self.query_kinds:
            raise ValueError(f"{type(self).__name__} serves {' or '.join(self.query_kinds)} queries for {docs.kind} documents; "
                             f"got query_kind={query_kind!r}")
        self.query_kind = query_kind
        """The query kind the index was built for (a backend may prepare for it), or None."""

    def __len__(self) -> int:
        return self._n

    @property
    def backend(self) -> str:
        """A short name of the engine that answers searches, e.g. ``"faiss-cpu"``."""
        return "numpy"

    @property
    def query_kinds(self) -> tuple[str, ...]:
        """The query code kinds this index accepts for its documents."""
        return tuple(q for q, d in self.pairs if d == self.doc_kind)

    def options(self) -> dict[str, Any]:
        """JSON-ready construction options (besides the documents) that ``save`` records."""
        return {}

    def arrays(self) -> dict[str, np.ndarray]:
        """Array options (for example per-document weights) that ``save`` records."""
        return {}

    def search(self, queries: Codes, top_k: int = 10) -> SearchResult:
        """The ``top_k`` best documents for each query (``top_k`` is capped at the index size)."""
        if queries.kind not in self.query_kinds:
            raise TypeError(
                f"{type(self).__name__} takes {' or '.join(self.query_kinds)} query codes for {self.doc_kind} "
                f"documents; got {queries.kind}"
            )
        if queries.dim != self.dim:
            raise ValueError(f"query code dim {queries.dim} != document code dim {self.dim}")
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise ValueError(f"top_k must be an integer >= 1; got {top_k!r}")
        top_k = min(int(top_k), self._n)
        if len(queries) == 0:
            return np.zeros((0, top_k), np.float32), np.zeros((0, top_k), np.int64)
        parts = [self._search_batch(queries[s : s + self.query_batch], top_k) for s in range(0, len(queries), self.query_batch)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    @abstractmethod
    def _search_batch(self, queries: Codes, top_k: int) -> SearchResult:
        """Search one batch of queries; ``top_k`` is already capped at ``len(self)``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self._n}, dim={self.dim}, device={self.device!r}, backend={self.backend!r})"


def merge_top_k(scores: list[np.ndarray], ids: list[np.ndarray], k: int) -> SearchResult:
    """Merge per-block (scores, ids) lists into the overall top ``k``; ties go to the lower id."""
    all_scores, all_ids = np.concatenate(scores, axis=1), np.concatenate(ids, axis=1)
    return sort_candidates(all_scores, all_ids, k)


def sort_candidates(scores: np.ndarray, ids: np.ndarray, k: int) -> SearchResult:
    """Order each row's candidates by score (desc) then id (asc) and keep the first ``k``."""
    order = np.lexsort((ids, -scores), axis=1)[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1).astype(np.int64)


def threshold_top_k(scores: np.ndarray, k: int, chunk: int = 1024) -> SearchResult:
    """Exact top-``k`` of each row of a wide (b, n) score matrix, much faster than a full partition.

    Each row is cut into chunks of ``chunk`` columns. The k-th largest chunk maximum is a lower bound on
    the row's k-th best score, so only chunks whose maximum reaches it can hold top-k entries; only
    those few chunks are scanned and their candidates sorted exactly. Ties go to the lower column id,
    as in ``adaptemb.ranking.top_k``.
    """
    b, n = scores.shape
    if n // chunk < 4 * k:
        return exact_top_k(scores, k)
    whole = n // chunk * chunk
    blocks = scores[:, :whole].reshape(b, -1, chunk)
    maxima = blocks.max(axis=2)
    if whole < n:  # the ragged tail is one more (shorter) chunk
        maxima = np.concatenate([maxima, scores[:, whole:].max(axis=1, keepdims=True)], axis=1)
    bound = np.partition(maxima, maxima.shape[1] - k, axis=1)[:, maxima.shape[1] - k]
    rows, chunks = np.nonzero(maxima >= bound[:, None])
    if len(rows) * chunk > n * b // 8:  # flat rows (e.g. many zeros): the filter does not pay off
        return exact_top_k(scores, k)
    full = chunks < blocks.shape[1]
    picked = blocks[rows[full], chunks[full]]  # (m, chunk)
    hit_r, hit_c = np.nonzero(picked >= bound[rows[full]][:, None])
    cand_rows = [rows[full][hit_r]]
    cand_cols = [chunks[full][hit_r] * chunk + hit_c]
    for r in rows[~full]:
        tail = np.flatnonzero(scores[r, whole:] >= bound[r]) + whole
        cand_rows.append(np.full(len(tail), r)), cand_cols.append(tail)
    cand_r, cand_c = np.concatenate(cand_rows), np.concatenate(cand_cols)
    cand = scores[cand_r, cand_c]
    order = np.lexsort((cand_c, -cand, cand_r))
    counts = np.bincount(cand_r, minlength=b)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pick = order[starts[:, None] + np.arange(k)]
    return cand[pick], cand_c[pick].astype(np.int64)


def torch_top_k(scores: torch.Tensor, k: int) -> SearchResult:
    """Top-``k`` of a torch score matrix on its device, returned as numpy (scores float32, ids int64)."""
    values, ids = torch.topk(scores, k, dim=1)
    return values.float().cpu().numpy(), ids.cpu().numpy().astype(np.int64)


def torch_blockwise_top_k(
    n: int, k: int, block_scores: Callable[[int, int], torch.Tensor], block_rows: int
) -> SearchResult:
    """Top-``k`` over ``n`` documents scored block by block on a torch device, merged on the device."""
    block_rows = max(block_rows, k)
    best_values: torch.Tensor | None = None
    best_ids: torch.Tensor | None = None
    for start in range(0, n, block_rows):
        scores = block_scores(start, min(start + block_rows, n))
        values, ids = torch.topk(scores, min(k, scores.shape[1]), dim=1)
        ids = ids + start
        if best_values is not None:
            values, pos = torch.topk(torch.cat([best_values, values], dim=1), k, dim=1)
            ids = torch.gather(torch.cat([best_ids, ids], dim=1), 1, pos)
        best_values, best_ids = values, ids
    assert best_values is not None and best_ids is not None
    return best_values.float().cpu().numpy(), best_ids.cpu().numpy().astype(np.int64)
