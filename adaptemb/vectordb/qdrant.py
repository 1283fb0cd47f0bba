"""Qdrant: open a client (embedded folder or server URL), write codes as points, search them.

A kind's ``compact_vector_rows`` become the points' vector ``codes``: a sparse vector for a sparse form, else a
dense vector of the kind's ``compact_vector_dtype`` (float32, or int8's uint8), scored by dot product."""

from __future__ import annotations

import os
import ssl
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from pydantic import SecretStr

from adaptemb.codes import Codes
from adaptemb.vectordb.common import (
    BATCH_ROWS,
    VECTOR_NAME,
    batches,
    check_vector_form,
    fresh_collection,
    is_server,
)
from adaptemb.vectordb.credentials import Credential, check_location, resolve_credential, warn_insecure
from adaptemb.vectordb.guard import context_of, guarded, remember


def _require_qdrant() -> Any:
    try:
        from qdrant_client import QdrantClient
    except ModuleNotFoundError:
        raise ModuleNotFoundError("exporting to Qdrant needs qdrant-client: pip install 'adaptemb[qdrant]'") from None
    return QdrantClient


def qdrant_client(location: str = ":memory:", *, api_key: SecretStr | str | None = None, api_key_env: str | None = None,
                  ca_cert: str | os.PathLike[str] | None = None) -> Any:
    """A Qdrant client: ``":memory:"``, a local folder (embedded, no server; created with its parents) or an
    ``http(s)://`` URL. Close it (``client.close()``) to release a local folder's lock for other processes.

    A URL gets the API key (the ``api-key`` header) from ``api_key`` (a ``SecretStr`` or str), else the
    variable ``api_key_env`` names, else ``$QDRANT_API_KEY`` if set (none: no key is sent). ``https``
    verifies the server's certificate: the public CAs (certifi), ``$SSL_CERT_FILE``, or the PEM bundle
    ``ca_cert``. A key over plain ``http://`` to another machine warns (``InsecureTransportWarning``).
    """
    return open_qdrant(location, resolve_credential("qdrant", location, api_key, api_key_env), ca_cert)


def open_qdrant(location: str, credential: Credential | None, ca_cert: str | os.PathLike[str] | None) -> Any:
    server = is_server("qdrant", location)
    check_location("qdrant", location, ca_cert)
    client_class = _require_qdrant()
    if location == ":memory:":
        return client_class(location=":memory:")
    if not server:
        return client_class(path=location)
    warn_insecure("qdrant", location, credential)
    options: dict[str, Any] = {}
    if ca_cert is not None:  # httpx verifies against this bundle (the version check would not: it is skipped)
        options.update(verify=ssl.create_default_context(cafile=os.fspath(ca_cert)), check_compatibility=False)
    with warnings.catch_warnings():  # adaptemb's InsecureTransportWarning says it (for other hosts only)
        warnings.filterwarnings("ignore", message="Api key is used with an insecure connection")
        client = guarded("qdrant", location, credential, lambda: client_class(
            url=location, api_key=None if credential is None else credential.secret.get_secret_value(), **options))
    return remember(client, "qdrant", location, credential)


def export_qdrant(codes: Codes, client: Any, collection: str, row_ids: np.ndarray,
                  payload: Sequence[Mapping[str, Any]] | None, recreate: bool) -> str:
    from qdrant_client import models

    fresh_collection(client.collection_exists(collection), recreate, collection,
                     lambda: client.delete_collection(collection))
    if codes.vector_form == "sparse":
        client.create_collection(collection, vectors_config={},
                                 sparse_vectors_config={VECTOR_NAME: models.SparseVectorParams()})
        vector = "sparse vector, dot product"
    else:
        datatype = models.Datatype(codes.compact_vector_dtype)  # the kind's smallest dense form (int8: uint8)
        client.create_collection(collection, vectors_config={
            VECTOR_NAME: models.VectorParams(size=codes.dim, distance=models.Distance.DOT, datatype=datatype)})
        vector = f"{datatype.value.lower()} vector of {codes.dim}, dot product"
    for start, stop in batches(len(codes), BATCH_ROWS):
        points = [models.PointStruct(id=int(row_ids[start + i]), vector={VECTOR_NAME: vector},
                                     payload=None if payload is None else dict(payload[start + i]))
                  for i, vector in enumerate(_qdrant_vectors(codes[start:stop]))]
        client.upsert(collection, points=points, wait=True)
    return vector


def search_qdrant(client: Any, collection: str, query_codes: Codes, top_k: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """(scores, ids), each (n_queries, top_k), of query codes searched in a collection ``export_codes`` wrote."""
    check_vector_form(query_codes, "qdrant")
    scores = np.full((len(query_codes), top_k), -np.inf, dtype=np.float32)
    ids = np.full((len(query_codes), top_k), -1, dtype=np.int64)
    _, where, credential = context_of(client, "qdrant")
    for row, vector in enumerate(_qdrant_vectors(query_codes)):
        hits = guarded("qdrant", where, credential, lambda vector=vector: client.query_points(
            collection, query=vector, using=VECTOR_NAME, limit=top_k).points)
        scores[row, : len(hits)] = [hit.score for hit in hits]
        ids[row, : len(hits)] = [int(hit.id) for hit in hits]
    return scores, ids


def _qdrant_vectors(codes: Codes) -> Iterator[Any]:
    """One Qdrant vector per row, as ``export_qdrant`` declared the collection: the kind's compact vector rows."""
    from qdrant_client import models

    rows = codes.compact_vector_rows()
    if sp.issparse(rows):
        for lo, hi in zip(rows.indptr[:-1], rows.indptr[1:], strict=True):
            yield models.SparseVector(indices=rows.indices[lo:hi].tolist(), values=rows.data[lo:hi].astype(float).tolist())
    else:
        for row in rows:
            yield row.tolist()
