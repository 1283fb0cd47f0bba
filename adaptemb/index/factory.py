"""Choose the search backend from the kinds of the query and document codes; a generic fallback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from adaptemb.codes import Codes
from adaptemb.index.base import Index, SearchResult, merge_top_k, rows_per_block
from adaptemb.index.dense import DenseIndex
from adaptemb.index.quantized import BinaryIndex, Int8Index
from adaptemb.index.sparse import AsymmetricIndex, SparseIndex
from adaptemb.ranking import top_k as exact_top_k

BACKENDS: dict[tuple[str, str], type[Index]] = {
    ("dense", "dense"): DenseIndex,
    ("sparse", "sparse"): SparseIndex,
    ("binary", "binary"): BinaryIndex,
    ("int8", "int8"): Int8Index,
    ("dense", "sparse"): AsymmetricIndex,
}
"""(query kind, document kind) → the Index class that searches it."""


def build_index(docs: Codes, *, query_kind: str | None = None, device: str = "auto", **options: Any) -> Index:
    """An index over ``docs`` for queries of ``query_kind`` (default: the documents' kind).

    ``device`` is ``"auto"``, ``"cpu"`` or ``"cuda"``; ``options`` go to the backend (``query_batch``,
    ``backend``). Unsupported kind pairs raise ``ValueError`` listing the supported ones.
    """
    pair = (query_kind or docs.kind, docs.kind)
    if pair not in BACKENDS:
        known = ", ".join(f"{q}→{d}" for q, d in BACKENDS)
        raise ValueError(f"no index backend for {pair[0]} queries against {pair[1]} documents; supported: {known}")
    return BACKENDS[pair](docs, device=device, **options)


class ScoreIndex:
    """Brute-force search through any score function, e.g. ``Compressor.score``, block by block.

    The generic path for code kinds (or custom scoring) that no specialised backend covers.
    """

    backend = "score-function"

    def __init__(self, docs: Codes, score: Callable[[Codes, Codes], np.ndarray], *, query_batch: int = 512) -> None:
        self.docs, self.score, self.query_batch = docs, score, query_batch

    def __len__(self) -> int:
        return len(self.docs)

    def search(self, queries: Codes, top_k: int = 10) -> SearchResult:
        """The ``top_k`` best documents for each query under ``score``."""
        top_k = min(top_k, len(self.docs))
        block = rows_per_block(4 * self.query_batch, cap=len(self.docs))
        out_scores, out_ids = [], []
        for qs in range(0, len(queries), self.query_batch):
            q = queries[qs : qs + self.query_batch]
            scores, ids = [], []
            for start in range(0, len(self.docs), block):
                part = np.asarray(self.score(q, self.docs[start : start + block]), dtype=np.float32)
                s, i = exact_top_k(part, min(top_k, part.shape[1]))
                scores.append(s), ids.append(i + start)
            s, i = merge_top_k(scores, ids, top_k)
            out_scores.append(s), out_ids.append(i)
        return np.concatenate(out_scores), np.concatenate(out_ids)
