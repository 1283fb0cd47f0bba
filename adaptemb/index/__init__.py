"""Search backends over codes: dense, sparse, binary, int8, asymmetric, and funnel (shortlist + rerank).

``build_index(doc_codes, query_kind=..., device=...)`` picks the backend from the code kinds; every
index answers ``search(query_codes, top_k) -> (scores, ids)``, exact and batched over queries.
"""

from adaptemb.devices import resolve_device
from adaptemb.index.base import Index, SearchResult, threshold_top_k
from adaptemb.index.dense import DenseIndex, faiss_gpu_available
from adaptemb.index.factory import BACKENDS, ScoreIndex, build_index
from adaptemb.index.funnel import FunnelIndex, rerank
from adaptemb.index.quantized import BinaryIndex, Int8Index
from adaptemb.index.sparse import AsymmetricIndex, SparseIndex

__all__ = [
    "BACKENDS",
    "AsymmetricIndex",
    "BinaryIndex",
    "DenseIndex",
    "FunnelIndex",
    "Index",
    "Int8Index",
    "ScoreIndex",
    "SearchResult",
    "SparseIndex",
    "build_index",
    "faiss_gpu_available",
    "rerank",
    "resolve_device",
    "threshold_top_k",
]
