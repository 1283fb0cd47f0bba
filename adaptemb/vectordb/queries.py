"""Queries for a collection ``export_codes`` wrote: query codes, or raw float queries through their compressor, as
the vectors a database searches with, and the per-query offsets that turn its dot products into adaptemb's scores.

A symmetric method's query codes are stored like documents (``Codes.vector_rows``). An asymmetric method's are
not: a composition's float query (projected and rotated) is a dense vector searched against ±1 or dequantised
document vectors, and csr's ``ProjectedQueries`` is a dense vector over the h latents, sent as a sparse vector
holding every latent, plus an offset per query the database does not know (``ProjectedQueries.query_vector_rows``).

Through a compressor (``compressor=``, raw float queries), the search first checks on a few of the queries,
encoded as documents too, that the database's dot product of these query vectors with the stored document
vectors, plus the offsets, is the compressor's own ``score``; a method that weighs documents otherwise (bsa's
cosine scoring) or a collection holding an approximate form (``compact=True``) is refused, so a database
search through the compressor ranks as ``compressor.index(codes).search(queries)`` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp

from adaptemb.codes import Codes
from adaptemb.vectordb.common import NAMES, check_vector_form

CHECK_ROWS = 8
"""Queries (also encoded as documents) the store's scores are checked on before a search through a compressor."""
CHECK_TOLERANCE = 1e-3
"""Largest difference (relative to the scores' scale) between the store's and the compressor's scores on them."""


class QueryCompressor(Protocol):
    """What a search through a compressor uses of it (``adaptemb.Compressor`` provides it)."""

    name: str

    def encode(self, x: Any, k: int | None = None) -> Codes: ...

    def encode_queries(self, x: Any, k: int | None = None) -> Codes: ...

    def score(self, query_codes: Codes, doc_codes: Codes) -> np.ndarray: ...


@dataclass(frozen=True)
class StoreQueries:
    """Queries as a database searches them."""

    codes: Codes
    """The query codes (``encode_queries`` output, or the codes given)."""
    rows: np.ndarray | sp.csr_matrix
    """One float32 vector per query: a dense (n, dim) array or a sparse (n, dim) CSR matrix."""
    offsets: np.ndarray
    """(n,) float32, added to the database's dot products to give adaptemb's scores."""


def query_rows(codes: Codes, to: str, compact: bool = False) -> tuple[np.ndarray | sp.csr_matrix, np.ndarray]:
    """(vectors, offsets) of query codes: those of a kind that queries in a form of its own (``Codes.store_query``:
    ``ProjectedQueries``' sparse rows and offsets), else the kind's vector rows (its ``compact_vector_rows`` for a
    collection stored compact) and no offset."""
    own = codes.store_query(NAMES[to])
    if own is not None:
        return own
    check_vector_form(codes, to)
    rows = codes.compact_vector_rows() if compact else codes.vector_rows()
    return rows, np.zeros(len(codes), dtype=np.float32)


def store_queries(queries: Codes | Any, to: str, *, compressor: QueryCompressor | None = None, k: int | None = None,
                  compact: bool = False) -> StoreQueries:
    """``queries`` as ``StoreQueries`` for database ``to``: query codes (``encode_queries`` output, e.g. csr's
    ``ProjectedQueries`` or a composition's float query), or raw float embeddings with ``compressor`` (the fitted
    compressor whose codes the collection holds), encoded by its ``encode_queries`` at budget ``k`` (the budget the
    documents were encoded at; default: the compressor's). Through a compressor the store's scores are checked
    first (see the module docstring); ``ValueError`` when they are not the compressor's."""
    if compressor is None:
        if not isinstance(queries, Codes):
            raise TypeError(f"queries must be query codes (from encode_queries), or raw embeddings with compressor=; "
                            f"got {type(queries).__name__}")
        return StoreQueries(queries, *query_rows(queries, to, compact))
    if isinstance(queries, Codes):
        raise TypeError("with compressor=, pass the raw float query embeddings (the compressor encodes them)")
    codes = compressor.encode_queries(queries, k=k)
    rows, offsets = query_rows(codes, to, compact)
    _check_scores(compressor, queries, codes, rows, offsets, to, k, compact)
    return StoreQueries(codes, rows, offsets)


def ranked_results(asked: StoreQueries, top_k: int,
                   hits: Iterable[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(scores, ids), each (n_queries, top_k), as ``Index.search`` returns them, from the store's hits of each of
    the ``asked`` queries in turn ((scores, ids), best first): a query's offset added to its scores, and a query
    with fewer than ``top_k`` hits padded (id -1, score -inf)."""
    scores = np.full((len(asked.codes), top_k), -np.inf, dtype=np.float32)
    ids = np.full((len(asked.codes), top_k), -1, dtype=np.int64)
    for row, (found_scores, found_ids) in enumerate(hits):
        scores[row, : len(found_ids)] = found_scores + asked.offsets[row]
        ids[row, : len(found_ids)] = found_ids
    return scores, ids


def _check_scores(compressor: QueryCompressor, queries: Any, codes: Codes, rows: np.ndarray | sp.csr_matrix,
                  offsets: np.ndarray, to: str, k: int | None, compact: bool) -> None:
    """The store's scores of the first queries against themselves encoded as documents are the compressor's."""
    sample = queries[:CHECK_ROWS]
    docs = compressor.encode(sample, k=k)
    doc_rows = docs.compact_vector_rows() if compact else docs.vector_rows()
    store = _dense(rows[: len(sample)]) @ _dense(doc_rows).T + offsets[: len(sample), None]
    own = np.asarray(compressor.score(codes[: len(sample)], docs), dtype=np.float64)
    scale = max(1.0, float(np.abs(own).max(initial=0.0)))
    gap = float(np.abs(store - own).max(initial=0.0))
    if gap > CHECK_TOLERANCE * scale:
        form = "the compact form stored (compact=True)" if compact else "the stored document vectors"
        raise ValueError(
            f"{NAMES[to]} would not rank as {compressor.name} does: its dot product of {compressor.name}'s query "
            f"vectors with {form}, plus the query offsets, differs from {compressor.name}.score by up to {gap:.3g} "
            f"(scores up to {scale:.3g}); {compressor.name} weighs documents otherwise or the stored form only "
            "approximates its codes. Search these codes with compressor.index(codes).search(queries) instead"
        )


def _dense(rows: np.ndarray | sp.csr_matrix) -> np.ndarray:
    return np.asarray(rows.toarray() if sp.issparse(rows) else rows, dtype=np.float64)
