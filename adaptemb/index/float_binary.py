"""Search of float queries against sign-bit documents: ``<q, ±1 doc>``, the asymmetric score of binary codes.

A query keeps its float values (e.g. a projected and rotated embedding, ``adaptemb.compose``) and each document
stands for its vector of ±1 (``BinaryCodes.to_dense()``). faiss scores this exactly as product quantisation: the
packed bytes are the codes of ``ceil(d / 8)`` sub-quantisers of 8 dims whose 256 centroids are every ±1 pattern
of 8 bits (most significant bit first, as ``np.packbits`` packs), searched by faiss' ``IndexPQ`` in the
inner-product metric, one lookup table per query. Padding bits of the last byte meet zero query values.
"""

from __future__ import annotations

import faiss
import numpy as np

from adaptemb.codes import BinaryCodes, Codes, DenseCodes
from adaptemb.index.base import Index, SearchResult

_PATTERNS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float32) * 2 - 1
"""(256, 8): the ±1 vector each byte value stands for, most significant bit first."""


def sign_table_index(dim: int) -> faiss.IndexPQ:
    """An empty, trained faiss ``IndexPQ`` whose codes are packed sign bits of ``dim`` dims (padded to bytes)."""
    width = (dim + 7) // 8
    index = faiss.IndexPQ(8 * width, width, 8, faiss.METRIC_INNER_PRODUCT)
    faiss.copy_array_to_vector(np.tile(_PATTERNS, (width, 1)).ravel(), index.pq.centroids)
    index.is_trained = True
    return index


class FloatBinaryIndex(Index):
    """Exact search of dense float queries against ``BinaryCodes`` by ``<q, ±1 doc>`` (faiss, CPU)."""

    name = "float-binary"
    pairs = (("dense", "binary"),)

    def __init__(self, docs: Codes, *, device: str = "cpu", query_batch: int = 512, query_kind: str | None = None) -> None:
        super().__init__(docs, device="cpu", query_batch=query_batch, query_kind=query_kind)
        assert isinstance(docs, BinaryCodes)
        self._faiss = sign_table_index(docs.dim)
        self._faiss.add_sa_codes(np.ascontiguousarray(docs.packed))

    @property
    def backend(self) -> str:
        return "faiss-pq-signs"

    def _search_batch(self, queries: Codes, top_k: int) -> SearchResult:
        assert isinstance(queries, DenseCodes)
        padded = np.zeros((len(queries), self._faiss.d), dtype=np.float32)
        padded[:, : self.dim] = queries.values
        scores, ids = self._faiss.search(padded, top_k)
        return scores.astype(np.float32, copy=False), ids.astype(np.int64)
