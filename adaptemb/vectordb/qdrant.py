"""Qdrant: open a client (embedded folder or server URL), write codes as points, search them.

A kind's ``vector_rows`` become the points' vector ``codes``, scored by dot product: a sparse vector for a sparse
form, else a float32 dense vector whose dot product with the query is adaptemb's score. Binary codes (±1) get
Qdrant's binary quantisation and int8 codes (dequantised) its int8 scalar quantisation: a server keeps that
1-bit / 1-byte form in RAM, the float32 vectors on disk, and rescores the quantised search's candidates with
them (the embedded local mode keeps no quantised form and searches the vectors exactly). With ``compact=True``
the points hold the kind's ``compact_vector_rows`` in its ``compact_vector_dtype`` instead (int8: uint8
``code + 128``, whose dot product only approximates the dequantised one)."""

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
    fresh_collection,
    is_server,
)
from adaptemb.vectordb.credentials import Credential, check_location, resolve_credential, warn_insecure
from adaptemb.vectordb.guard import context_of, guarded, remember
from adaptemb.vectordb.queries import QueryCompressor, ranked_results, store_queries


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


QUANTIZED_OVERSAMPLING = 4.0
"""A quantised collection's search takes this many times ``top_k`` candidates from the quantised vectors and
rescores them with the float32 ones (Qdrant's ``oversampling``; a server only: local mode searches exactly)."""


def _quantization(quantization: str | None) -> Any:
    """The quantisation Qdrant keeps of a kind's float32 vectors in RAM, by the kind's ``vector_quantization``: 1 bit
    for sign bits (the float query against the bits, Qdrant's asymmetric 8-bit query encoding), int8 for int8
    levels; None for other kinds."""
    from qdrant_client import models

    configs = {
        "sign_bits": lambda: models.BinaryQuantization(binary=models.BinaryQuantizationConfig(
            always_ram=True, query_encoding=models.BinaryQuantizationQueryEncoding.SCALAR8BITS)),
        "int8_scalar": lambda: models.ScalarQuantization(scalar=models.ScalarQuantizationConfig(
            type=models.ScalarType.INT8, always_ram=True)),
    }
    return configs[quantization]() if quantization in configs else None


_QUANTIZATION_NAMES = {"sign_bits": "binary", "int8_scalar": "int8 scalar"}


def export_qdrant(codes: Codes, client: Any, collection: str, row_ids: np.ndarray,
                  payload: Sequence[Mapping[str, Any]] | None, recreate: bool, compact: bool = False) -> str:
    from qdrant_client import models

    fresh_collection(client.collection_exists(collection), recreate, collection,
                     lambda: client.delete_collection(collection))
    if codes.sparse_vectors:
        client.create_collection(collection, vectors_config={},
                                 sparse_vectors_config={VECTOR_NAME: models.SparseVectorParams()})
        vector = "sparse vector, dot product"
    else:
        datatype = models.Datatype(codes.compact_vector_dtype if compact else "float32")
        quantization = None if compact else _quantization(codes.vector_quantization)
        with warnings.catch_warnings():  # the quantised form's RAM placement: always_ram, on_disk (older servers)
            warnings.simplefilter("ignore", DeprecationWarning)
            client.create_collection(collection, vectors_config={VECTOR_NAME: models.VectorParams(
                size=codes.dim, distance=models.Distance.DOT, datatype=datatype, on_disk=True if quantization is not None else None,
                quantization_config=quantization)})
        vector = f"{datatype.value.lower()} vector of {codes.dim}, dot product"
        if quantization is not None:
            vector += f", {_QUANTIZATION_NAMES[str(codes.vector_quantization)]} quantisation in RAM (rescored)"
    for start, stop in batches(len(codes), BATCH_ROWS):
        rows = codes[start:stop]
        vectors = _qdrant_vectors(rows.compact_vector_rows() if compact else rows.vector_rows())
        points = [models.PointStruct(id=int(row_ids[start + i]), vector={VECTOR_NAME: vector},
                                     payload=None if payload is None else dict(payload[start + i]))
                  for i, vector in enumerate(vectors)]
        client.upsert(collection, points=points, wait=True)
    return vector


def search_qdrant(client: Any, collection: str, queries: Codes | Any, top_k: int = 10, *,
                  compressor: QueryCompressor | None = None, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(scores, ids) of ``queries`` in a Qdrant collection ``export_codes`` wrote, as ``Index.search`` returns them
    (``ranked_results``). ``queries``, ``compressor`` and ``k`` are those of ``store_queries``: query codes, or raw
    float embeddings that the fitted ``compressor`` encodes at budget ``k`` (the documents' budget), the search
    refused (``ValueError``) unless Qdrant's scores are the compressor's own. A quantised collection (binary, int8)
    is searched with rescoring, ``QUANTIZED_OVERSAMPLING`` times ``top_k`` candidates.
    """
    _, where, credential = context_of(client, "qdrant")
    # the stored layout matters to a search through a compressor (checked) and to query codes with a compact form
    layout_matters = compressor is not None or (isinstance(queries, Codes) and queries.compact_vector_dtype != "float32")
    compact = layout_matters and _stored_compact(client, collection, where, credential)
    asked = store_queries(queries, "qdrant", compressor=compressor, k=k, compact=compact)
    search_params = None
    if not sp.issparse(asked.rows):  # a dense vector: rescore a quantised collection's candidates (others ignore it)
        from qdrant_client import models

        search_params = models.SearchParams(quantization=models.QuantizationSearchParams(
            rescore=True, oversampling=QUANTIZED_OVERSAMPLING))

    def hits() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for vector in _qdrant_vectors(asked.rows):
            with warnings.catch_warnings():  # local mode searches exactly: the rescoring parameters do not apply there
                warnings.filterwarnings("ignore", message="Local mode performs exact")
                points = guarded("qdrant", where, credential, lambda vector=vector: client.query_points(
                    collection, query=vector, using=VECTOR_NAME, limit=top_k, search_params=search_params).points)
            yield np.array([point.score for point in points], np.float64), np.array([int(point.id) for point in points])

    return ranked_results(asked, top_k, hits())


def _stored_compact(client: Any, collection: str, where: str, credential: Credential | None) -> bool:
    """Whether the collection's dense vectors are a compact form (``compact=True``: not float32)."""
    info = guarded("qdrant", where, credential, lambda: client.get_collection(collection))
    params = info.config.params.vectors
    dense = params.get(VECTOR_NAME) if isinstance(params, dict) else None
    return dense is not None and dense.datatype is not None and dense.datatype.value.lower() != "float32"


def _qdrant_vectors(rows: np.ndarray | sp.csr_matrix) -> Iterator[Any]:
    """One Qdrant vector per row: a sparse vector of a sparse row's non-zeros, else the dense row."""
    from qdrant_client import models

    if sp.issparse(rows):
        rows = sp.csr_matrix(rows)
        for lo, hi in zip(rows.indptr[:-1], rows.indptr[1:], strict=True):
            yield models.SparseVector(indices=rows.indices[lo:hi].tolist(), values=rows.data[lo:hi].astype(float).tolist())
    else:
        for row in rows:
            yield row.tolist()
