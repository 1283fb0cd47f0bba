"""Codes into a vector database people already run: Qdrant (local mode, in memory, or a server).

``export_codes(codes, to="qdrant", location=...)`` writes one point per row (id = row number, or the
``ids`` given, plus an optional payload per row) into a collection with one named vector ``codes``:

============================  ====================================================================
codes                         Qdrant vector (similarity)
============================  ====================================================================
``sparse`` (csr)              sparse vector of the stored values (dot product)
``binary_sparse`` (bsa)       sparse vector of ones on the active features (dot = overlap count)
``dense`` (svd, mrl, cllr)    float32 dense vector (``Distance.DOT``)
``binary``                    dense ±1 float32 vector (dot = d − 2·Hamming: the Hamming ranking)
``int8``                      uint8 dense vector of ``code + 128``; Qdrant's dot product of these is
                              not the dequantised inner product, so its ranking is approximate
============================  ====================================================================

``search_qdrant`` queries such a collection with query codes of the same kind. The database scores
symmetrically (query codes against document codes, as ``Codes.similarity`` does); an asymmetric
method's default search (csr / bsa with a dense projected query) is not something Qdrant computes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from adaptemb.codes import Codes

VECTOR_NAME = "codes"
_BATCH = 1_000


def _require_qdrant() -> Any:
    try:
        from qdrant_client import QdrantClient
    except ModuleNotFoundError:
        raise ModuleNotFoundError("exporting to Qdrant needs qdrant-client: pip install 'adaptemb[qdrant]'") from None
    return QdrantClient


def qdrant_client(location: str = ":memory:") -> Any:
    """A Qdrant client: ``":memory:"``, a local folder (embedded, no server) or an ``http(s)://`` URL."""
    client_class = _require_qdrant()
    if location == ":memory:":
        return client_class(location=":memory:")
    if location.startswith(("http://", "https://")):
        return client_class(url=location)
    return client_class(path=location)


def export_codes(codes: Codes, *, to: str = "qdrant", location: str | Any = ":memory:", collection: str = "adaptemb",
                 ids: Sequence[int] | np.ndarray | None = None, payload: Sequence[dict[str, Any]] | None = None,
                 recreate: bool = False) -> Any:
    """Write ``codes`` into a new collection and return the client. ``location`` may be a client already open."""
    if to != "qdrant":
        raise ValueError(f"unknown vector database {to!r}; supported: qdrant")
    if not isinstance(codes, Codes):
        raise TypeError(f"export_codes needs codes from encode(); got {type(codes).__name__}")
    row_ids = np.arange(len(codes)) if ids is None else np.asarray(ids)
    if row_ids.shape != (len(codes),) or not np.issubdtype(row_ids.dtype, np.integer) or (row_ids < 0).any():
        raise ValueError(f"ids must be {len(codes)} non-negative integers, one per row")
    if payload is not None and len(payload) != len(codes):
        raise ValueError(f"payload must hold one dict per row ({len(codes)}); got {len(payload)}")
    client = qdrant_client(location) if isinstance(location, str) else location
    if client.collection_exists(collection):
        if not recreate:
            raise ValueError(f"collection {collection!r} already exists; pass recreate=True (--recreate) to replace it")
        client.delete_collection(collection)
    _create_collection(client, collection, codes)
    from qdrant_client import models

    for start in range(0, len(codes), _BATCH):
        stop = min(start + _BATCH, len(codes))
        vectors = _vectors(codes[start:stop])
        points = [models.PointStruct(id=int(row_ids[start + i]), vector={VECTOR_NAME: vector},
                                     payload=None if payload is None else payload[start + i])
                  for i, vector in enumerate(vectors)]
        client.upsert(collection, points=points, wait=True)
    return client


def search_qdrant(client: Any, collection: str, query_codes: Codes, top_k: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """(scores, ids), each (n_queries, top_k), of query codes searched in a collection ``export_codes`` wrote."""
    scores = np.full((len(query_codes), top_k), -np.inf, dtype=np.float32)
    ids = np.full((len(query_codes), top_k), -1, dtype=np.int64)
    for row, vector in enumerate(_vectors(query_codes)):
        hits = client.query_points(collection, query=vector, using=VECTOR_NAME, limit=top_k).points
        scores[row, : len(hits)] = [hit.score for hit in hits]
        ids[row, : len(hits)] = [int(hit.id) for hit in hits]
    return scores, ids


def _create_collection(client: Any, collection: str, codes: Codes) -> None:
    from qdrant_client import models

    if codes.kind in ("sparse", "binary_sparse"):
        client.create_collection(collection, vectors_config={},
                                 sparse_vectors_config={VECTOR_NAME: models.SparseVectorParams()})
        return
    width = {"dense": codes.dim, "binary": codes.dim, "int8": codes.dim}.get(codes.kind)
    if width is None:
        raise ValueError(f"{codes.kind!r} codes have no Qdrant vector type; supported: sparse, binary_sparse, dense, binary, int8")
    datatype = models.Datatype.UINT8 if codes.kind == "int8" else models.Datatype.FLOAT32
    client.create_collection(collection, vectors_config={
        VECTOR_NAME: models.VectorParams(size=width, distance=models.Distance.DOT, datatype=datatype)})


def _vectors(codes: Codes) -> Iterator[Any]:
    """One Qdrant vector per row, as ``_create_collection`` declared it."""
    from qdrant_client import models

    if codes.kind in ("sparse", "binary_sparse"):
        matrix = codes.to_csr()  # type: ignore[attr-defined]
        for row in range(matrix.shape[0]):
            lo, hi = matrix.indptr[row], matrix.indptr[row + 1]
            yield models.SparseVector(indices=matrix.indices[lo:hi].tolist(), values=matrix.data[lo:hi].astype(float).tolist())
    elif codes.kind == "int8":
        for row in codes.to_arrays()["codes"].astype(np.int16) + 128:
            yield row.tolist()
    elif codes.kind in ("dense", "binary"):
        for row in codes.to_dense():
            yield row.astype(float).tolist()
    else:
        raise ValueError(f"{codes.kind!r} codes have no Qdrant vector type; supported: sparse, binary_sparse, dense, binary, int8")
