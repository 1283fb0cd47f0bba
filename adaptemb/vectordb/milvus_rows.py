"""Codes and queries as Milvus field values, and the search of one batch of queries by the field's type.

* ``FLOAT_VECTOR``: float32 rows (``vector_rows``: ±1 for binary, dequantised for int8, a sparse row densified).
* ``SPARSE_FLOAT_VECTOR``: a {index: value} dict of a row's non-zeros. Milvus takes non-negative sparse weights
  only, queries included, while an asymmetric query (csr's ``ProjectedQueries``) is signed. So each stored row
  carries one more entry, at index ``dim``, its *balance* ``ceiling - sum(row)`` (``ceiling``: 1 more than the
  largest row sum exported, so the entry is always there), and a signed query ``q`` is sent as ``q + c`` on every
  one of the ``dim`` indices with ``c`` at index ``dim`` (``c = -min q``): Milvus' inner product is then
  ``<q, doc> + c * ceiling``, the same shift for every document, so it ranks as ``<q, doc>``; the candidates'
  stored rows come back with the hits and their scores are recomputed here, exactly, without the balance.
* ``BINARY_VECTOR`` (binary codes on a server): packed bits; ``BINARY_OVERSAMPLING`` times ``top_k`` candidates
  by Hamming distance to the query's sign bits, rescored here by ``<query, ±1 bits>``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from adaptemb.codes import Codes, pack_signs, unpack_signs
from adaptemb.vectordb.common import BATCH_ROWS, ID_FIELD, VECTOR_NAME, batches
from adaptemb.vectordb.credentials import Credential
from adaptemb.vectordb.guard import guarded

BINARY_OVERSAMPLING = 10
"""A ``BINARY_VECTOR`` search takes this many times ``top_k`` candidates by Hamming distance, then rescores them."""
_MAX_LIMIT = 16_384  # the most hits a Milvus search returns


def packed_bytes(dim: int) -> int:
    """Bytes of ``dim`` packed bits (a ``BINARY_VECTOR`` field is ``8 *`` this wide)."""
    return (dim + 7) // 8


def balance_ceiling(codes: Codes) -> float:
    """1 more than the largest sum of a row's ``vector_rows`` values (the sparse balance, module docstring)."""
    largest = max((float(np.asarray(codes[start:stop].vector_rows().sum(axis=1)).max(initial=0.0))
                   for start, stop in batches(len(codes), BATCH_ROWS)), default=0.0)
    return largest + 1.0


def document_values(codes: Codes, sparse: bool, bits: bool, ceiling: float) -> list[Any]:
    """The field values of ``codes``: packed bits for a ``BINARY_VECTOR``, sparse dicts with the balance entry at
    index ``dim``, else float32 rows."""
    if bits:
        return [row.tobytes() for row in codes.sign_bits()]
    rows = codes.vector_rows()
    if not sparse:
        return _dense_values(rows)
    matrix = sp.csr_matrix(rows)
    balance = sp.csr_matrix((ceiling - np.asarray(matrix.sum(axis=1), np.float64)).astype(np.float32))
    return _sparse_values(sp.hstack([matrix, balance]).tocsr())


class FieldSearch:
    """One Milvus search request per batch of query rows, by the field's type: (scores, ids) of each row, best first,
    the scores adaptemb's (without the query offsets)."""

    def __init__(self, client: Any, collection: str, where: str, credential: Credential | None, top_k: int,
                 sparse: bool, bits: bool) -> None:
        self.client, self.collection, self.where, self.credential = client, collection, where, credential
        self.top_k, self.sparse, self.bits = top_k, sparse, bits

    def __call__(self, rows: np.ndarray | sp.csr_matrix) -> list[tuple[np.ndarray, np.ndarray]]:
        if self.bits:
            return self._hamming_then_rescore(np.asarray(rows.toarray() if sp.issparse(rows) else rows, np.float32))
        if self.sparse:
            return self._balanced(sp.csr_matrix(rows, dtype=np.float32))
        results = self._request(_dense_values(rows), self.top_k, {"metric_type": "IP", "params": {}}, [ID_FIELD])
        return [(np.array([hit["distance"] for hit in hits], np.float32), _ids(hits)) for hits in results]

    def _balanced(self, rows: sp.csr_matrix) -> list[tuple[np.ndarray, np.ndarray]]:
        """Sparse queries, signed ones shifted to non-negative weights (module docstring), rescored exactly."""
        dim = rows.shape[1]
        shifts = _shifts(rows)
        sent = [row if shift == 0 else _shifted(row.toarray()[0], shift) for row, shift in zip(rows, shifts, strict=True)]
        params = {"metric_type": "IP", "params": {"drop_ratio_search": 0.0}}
        results = self._request(_sparse_values(sp.vstack(sent).tocsr() if sent else rows), self.top_k, params,
                                [VECTOR_NAME])
        found = []
        for row, hits in zip(rows, results, strict=True):
            query = row.toarray()[0].astype(np.float64)
            scores = np.array([sum(query[int(i)] * float(v) for i, v in hit["entity"][VECTOR_NAME].items() if int(i) < dim)
                               for hit in hits], np.float64)
            best = np.argsort(-scores, kind="stable")
            found.append((scores[best].astype(np.float32), _ids(hits)[best]))
        return found

    def _hamming_then_rescore(self, rows: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Candidates by Hamming distance to each row's sign bits, rescored by ``<row, ±1 bits>``."""
        limit = min(_MAX_LIMIT, self.top_k * BINARY_OVERSAMPLING)
        queries = [row.tobytes() for row in pack_signs(rows)]
        results = self._request(queries, limit, {"metric_type": "HAMMING"}, [VECTOR_NAME])
        found = []
        for row, hits in zip(rows, results, strict=True):
            if not len(hits):
                found.append((np.zeros(0, np.float32), np.zeros(0, np.int64)))
                continue
            packed = np.stack([np.frombuffer(_bytes_of(hit["entity"][VECTOR_NAME]), np.uint8) for hit in hits])
            rescored = unpack_signs(packed[:, : packed_bytes(len(row))], len(row)) @ row
            best = np.argsort(-rescored, kind="stable")[: self.top_k]
            found.append((rescored[best].astype(np.float32), _ids(hits)[best]))
        return found

    def _request(self, data: list[Any], limit: int, params: dict[str, Any], fields: list[str]) -> Any:
        return guarded("milvus", self.where, self.credential, lambda: self.client.search(
            self.collection, data=data, anns_field=VECTOR_NAME, limit=limit, search_params=params, output_fields=fields))


def _shifts(rows: sp.csr_matrix) -> np.ndarray:
    """``c`` of each sparse query row: minus its smallest value over all ``dim`` indices (its implicit zeros
    included), 0 for a row without a negative value."""
    lowest = np.asarray(rows.min(axis=1).toarray()).ravel() if rows.shape[0] else np.zeros(0)
    return np.maximum(0.0, -lowest)


def _shifted(query: np.ndarray, shift: float) -> sp.csr_matrix:
    """``query + shift`` on every index, and ``shift`` at index ``dim`` (the balance entry's)."""
    row = sp.csr_matrix(np.append(query + shift, shift).astype(np.float32)[None, :])
    row.eliminate_zeros()
    return row


def _sparse_values(matrix: sp.csr_matrix) -> list[dict[int, float]]:
    matrix = sp.csr_matrix(matrix, copy=True)
    matrix.eliminate_zeros()
    return [dict(zip(matrix.indices[lo:hi].tolist(), matrix.data[lo:hi].astype(float).tolist(), strict=True))
            for lo, hi in zip(matrix.indptr[:-1], matrix.indptr[1:], strict=True)]


def _dense_values(rows: np.ndarray | sp.csr_matrix) -> list[np.ndarray]:
    dense = rows.toarray() if sp.issparse(rows) else rows
    return list(np.asarray(dense, dtype=np.float32))


def _ids(hits: Any) -> np.ndarray:
    return np.array([int(hit["id"]) for hit in hits], np.int64)


def _bytes_of(value: Any) -> bytes:
    """A ``BINARY_VECTOR`` value as Milvus returns it: bytes, or a list holding them."""
    return bytes(value[0]) if isinstance(value, list) else bytes(value)
