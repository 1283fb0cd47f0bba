"""Search backends over codes: dense, sparse (posting lists), binary, int8; funnel (shortlist + rerank);
brute force through a score function as the fallback.

``Compressor.index(doc_codes)`` is the way in: it picks the backend registered for the compressor's
(query kind, document kind) and returns a ``CompressedIndex`` that takes raw query embeddings or query
codes. ``adaptemb.build_index(doc_codes, query_kind=...)`` builds a backend from the code kinds alone.
Every index answers ``search(queries, top_k) -> (scores, ids)``, exact and batched over queries.
"""

from adaptemb.index.base import Index, SearchResult
from adaptemb.index.brute import ScoreIndex
from adaptemb.index.dense import DenseIndex, faiss_gpu_available
from adaptemb.index.funnel import FunnelIndex, rerank
from adaptemb.index.quantized import BinaryIndex, Int8Index
from adaptemb.index.sparse import SparseIndex
from adaptemb.ranking import threshold_top_k

__all__ = [
    "BinaryIndex",
    "DenseIndex",
    "FunnelIndex",
    "Index",
    "Int8Index",
    "ScoreIndex",
    "SearchResult",
    "SparseIndex",
    "faiss_gpu_available",
    "rerank",
    "threshold_top_k",
]
