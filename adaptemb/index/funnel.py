"""Funnel search: shortlist with compressed codes, rerank the shortlist with full float or int8 vectors.

Examples: Matryoshka adaptive retrieval (shortlist with a short prefix, rerank with all dims) and binary
rescoring (shortlist by Hamming distance, rerank with float queries against int8 documents).
"""

from __future__ import annotations

import numpy as np

from adaptemb.codes import Codes
from adaptemb.index.base import Index, SearchResult
from adaptemb.ranking import merge_top_k

_RERANK_QUERY_BLOCK = 256


def rerank(queries: np.ndarray, docs: np.ndarray | Codes, candidates: np.ndarray, top_k: int) -> SearchResult:
    """Rescore each query's ``candidates`` (q, S) by ``<query, doc>`` and keep the best ``top_k``.

    ``docs`` holds the rerank store: float vectors (n, d), or codes whose ``to_dense()`` stands for
    vectors in the queries' space (for example int8 ``QuantizedCodes``). Ties go to the lower id.
    """
    queries = np.asarray(queries, dtype=np.float32)
    if candidates.shape[0] != len(queries):
        raise ValueError(f"{candidates.shape[0]} candidate rows for {len(queries)} queries")
    dim = docs.shape[1] if isinstance(docs, np.ndarray) else docs.dim
    if dim != queries.shape[1]:
        raise ValueError(f"rerank vectors have dim {dim}, the rerank queries {queries.shape[1]}")
    scores = np.empty(candidates.shape, dtype=np.float32)
    for start in range(0, len(queries), _RERANK_QUERY_BLOCK):
        block = candidates[start : start + _RERANK_QUERY_BLOCK]
        flat = block.reshape(-1)
        rows = docs[flat] if isinstance(docs, np.ndarray) else docs[flat].to_dense()
        rows = np.asarray(rows, dtype=np.float32).reshape(*block.shape, -1)
        scores[start : start + len(block)] = np.einsum("qd,qsd->qs", queries[start : start + len(block)], rows)
    return merge_top_k([scores], [candidates], min(top_k, candidates.shape[1]))


class FunnelIndex:
    """A first-stage ``Index`` over compressed codes plus a rerank store of better vectors."""

    def __init__(self, first: Index, rerank_docs: np.ndarray | Codes, *, shortlist: int = 100) -> None:
        if len(rerank_docs) != len(first):
            raise ValueError(f"rerank store has {len(rerank_docs)} rows, the index {len(first)}")
        if shortlist < 1:
            raise ValueError(f"shortlist must be >= 1; got {shortlist}")
        self.first = first
        self.rerank_docs = rerank_docs
        self.shortlist = shortlist

    def __len__(self) -> int:
        return len(self.first)

    def search(self, query_codes: Codes, rerank_queries: np.ndarray, top_k: int = 10) -> SearchResult:
        """Shortlist ``max(shortlist, top_k)`` with ``query_codes``, rerank with ``rerank_queries`` (q, d)."""
        _, candidates = self.first.search(query_codes, max(self.shortlist, top_k))
        return rerank(rerank_queries, self.rerank_docs, candidates, top_k)
