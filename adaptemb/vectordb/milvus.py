"""Milvus: open a client (Milvus Lite ``.db`` file or server URI), write codes as rows, search them; stop Milvus
Lite's in-process server for a file.

A kind's ``vector_rows`` become the rows' field ``codes``, scored by inner product (IP): a
``SPARSE_FLOAT_VECTOR`` for a sparse form, with one balance entry a row so that signed asymmetric queries
(csr's) rank exactly (densified into a ``FLOAT_VECTOR`` for a Milvus Lite that scores sparse fields by BM25),
else a float32 ``FLOAT_VECTOR``. Binary codes on a server are a ``BINARY_VECTOR`` of their packed bits
(``BIN_FLAT``, ``HAMMING``), searched by Hamming distance and rescored with the query; Milvus Lite refuses
``BINARY_VECTOR``, so there they are ``FLOAT_VECTOR`` of ±1, searched exactly. How each form is written and
searched: ``adaptemb.vectordb.milvus_rows``."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import SecretStr

from adaptemb.codes import Codes
from adaptemb.vectordb.common import (
    BATCH_ROWS,
    ID_FIELD,
    VECTOR_NAME,
    batches,
    fresh_collection,
    is_server,
)
from adaptemb.vectordb.credentials import Credential, check_location, resolve_credential, warn_insecure
from adaptemb.vectordb.guard import context_of, guarded, remember
from adaptemb.vectordb.milvus_rows import FieldSearch, balance_ceiling, document_values, packed_bytes
from adaptemb.vectordb.queries import QueryCompressor, ranked_results, store_queries

_QUERY_BATCH = 100  # Milvus: query vectors per search request
_LITE_SPARSE_IP = (3, 2, 2)  # the first Milvus Lite that scores SPARSE_FLOAT_VECTOR by IP, not BM25


def _require_milvus(lite: bool) -> Any:
    try:
        from pymilvus import MilvusClient

        if lite:
            import milvus_lite  # noqa: F401  pymilvus starts Milvus Lite for a .db path
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"exporting to Milvus needs pymilvus{' and milvus-lite' if lite else ''} ({error.name} is missing): "
            "pip install 'adaptemb[milvus]'"
        ) from None
    return MilvusClient


def milvus_client(location: str, *, api_key: SecretStr | str | None = None, api_key_env: str | None = None,
                  ca_cert: str | os.PathLike[str] | None = None) -> Any:
    """A pymilvus ``MilvusClient``: a local ``.db`` path (Milvus Lite, no server) or an ``http(s)://`` URI.

    Milvus Lite runs in this process, one server per ``.db`` path (holding the file's lock until this
    process ends or ``release_milvus_lite(location)``); its parent folders are created.

    A server URI gets pymilvus' ``token`` (an API key, or ``user:password``) from ``api_key`` (a
    ``SecretStr`` or str), else the variable ``api_key_env`` names, else ``$MILVUS_TOKEN`` if set (none: no
    token is sent). ``https`` verifies the server's certificate (gRPC's trusted roots,
    ``$GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``, or the PEM bundle ``ca_cert``). A token over plain ``http://`` or
    ``tcp://`` to another machine warns (``InsecureTransportWarning``).
    """
    check_milvus_location(location)
    return open_milvus(location, resolve_credential("milvus", location, api_key, api_key_env), ca_cert)


def check_milvus_location(location: str) -> None:
    if not is_server("milvus", location) and not location.endswith(".db"):
        raise ValueError(
            f"a Milvus location is a local file path ending in .db (Milvus Lite) or a server URI "
            f"(http://host:19530); got {location!r}"
        )


def open_milvus(location: str, credential: Credential | None, ca_cert: str | os.PathLike[str] | None) -> Any:
    server = is_server("milvus", location)
    check_milvus_location(location)
    check_location("milvus", location, ca_cert)
    client_class = _require_milvus(lite=not server)
    if not server:
        location = str(Path(location).expanduser())
        Path(location).parent.mkdir(parents=True, exist_ok=True)
        return client_class(uri=location)
    warn_insecure("milvus", location, credential)
    options: dict[str, Any] = {}
    if credential is not None:
        options["token"] = credential.secret.get_secret_value()
    if ca_cert is not None:  # one-way TLS: the server's certificate is verified against this bundle
        options["server_pem_path"] = os.fspath(ca_cert)
    client = guarded("milvus", location, credential, lambda: client_class(uri=location, **options))
    return remember(client, "milvus", location, credential)


def release_milvus_lite(location: str) -> bool:
    """Stop this process's Milvus Lite server for the ``.db`` file ``location`` (pymilvus starts one per file
    and keeps it, with the file's lock, until the process ends, even after ``client.close()``), so another
    process can open the file. Clients of that file in this process stop working. True if one was running."""
    servers = _lite_servers()
    path = os.path.abspath(Path(location).expanduser())
    if servers is None or path not in servers:
        return False
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(path)
    return True


def _lite_servers() -> dict[str, Any] | None:
    """Milvus Lite's running servers by absolute ``.db`` path (None when milvus-lite is missing or changed)."""
    try:
        from milvus_lite.server_manager import server_manager_instance
    except ImportError:
        return None
    servers = getattr(server_manager_instance, "_servers", None)
    return servers if isinstance(servers, dict) else None


def milvus_lite_running(location: str) -> bool:
    """Whether this process runs a Milvus Lite server for the ``.db`` file ``location``."""
    return os.path.abspath(Path(location).expanduser()) in (_lite_servers() or {})


def export_milvus(codes: Codes, client: Any, collection: str, row_ids: np.ndarray,
                  payload: Sequence[Mapping[str, Any]] | None, recreate: bool, compact: bool = False) -> str:
    if row_ids.size and int(row_ids.max()) > np.iinfo(np.int64).max:
        raise ValueError("Milvus ids are INT64: every id must be below 2**63")
    from pymilvus import DataType

    lite = _lite_version(client) is not None
    sparse = codes.sparse_vectors and _scores_sparse_by_ip(client)
    bits = codes.vector_quantization == "sign_bits" and not lite
    fresh_collection(client.has_collection(collection), recreate, collection,
                     lambda: client.drop_collection(collection))
    schema = client.create_schema(auto_id=False, enable_dynamic_field=True)
    schema.add_field(ID_FIELD, DataType.INT64, is_primary=True)
    index = client.prepare_index_params()
    if sparse:
        schema.add_field(VECTOR_NAME, DataType.SPARSE_FLOAT_VECTOR)
        index.add_index(VECTOR_NAME, index_type="SPARSE_INVERTED_INDEX", metric_type="IP", params={"drop_ratio_build": 0.0})
        vector = f"SPARSE_FLOAT_VECTOR of {codes.dim} + a balance entry, IP"
    elif bits:
        schema.add_field(VECTOR_NAME, DataType.BINARY_VECTOR, dim=8 * packed_bytes(codes.dim))
        index.add_index(VECTOR_NAME, index_type="BIN_FLAT", metric_type="HAMMING")
        vector = f"BINARY_VECTOR of {8 * packed_bytes(codes.dim)}, HAMMING"
    else:
        schema.add_field(VECTOR_NAME, DataType.FLOAT_VECTOR, dim=codes.dim)
        index.add_index(VECTOR_NAME, index_type="FLAT", metric_type="IP")
        vector = f"FLOAT_VECTOR of {codes.dim}, IP"
    # Milvus Lite: no index. Lite opens an indexed collection released in every new process (searches fail until
    # that process calls load_collection) but an unindexed one loaded, and searches it by brute force (exact).
    # A server keeps the index and the loaded state for all its clients. Strong consistency: a search right
    # after the export sees every row.
    client.create_collection(collection, schema=schema, index_params=None if lite else index, consistency_level="Strong")
    ceiling = balance_ceiling(codes) if sparse else 0.0
    for start, stop in batches(len(codes), BATCH_ROWS):
        values = document_values(codes[start:stop], sparse, bits, ceiling)
        rows = [{**({} if payload is None else payload[start + i]), ID_FIELD: int(row_ids[start + i]), VECTOR_NAME: value}
                for i, value in enumerate(values)]
        client.insert(collection, rows)
    client.flush(collection)  # sealed segments: durable, and Milvus Lite searches them faster than its write buffer
    if lite:
        return f"{vector}, no index: Milvus Lite searches every row"
    client.load_collection(collection)  # loaded on the server, for every client
    return f"{vector}, {'SPARSE_INVERTED_INDEX' if sparse else 'BIN_FLAT' if bits else 'FLAT'} index, loaded"


def search_milvus(client: Any, collection: str, queries: Codes | Any, top_k: int = 10, *,
                  compressor: QueryCompressor | None = None, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(scores, ids) of ``queries`` in a Milvus collection ``export_codes`` wrote, as ``Index.search`` returns them
    (``ranked_results``). ``queries``, ``compressor`` and ``k`` are those of ``store_queries``, as for
    ``search_qdrant``; the search through a compressor is refused (``ValueError``) unless Milvus' scores are the
    compressor's own. A ``BINARY_VECTOR`` collection (binary codes on a server) is searched by Hamming distance and
    its candidates rescored (the module docstring).
    """
    from pymilvus import DataType

    _, where, credential = context_of(client, "milvus")
    described = guarded("milvus", where, credential, lambda: client.describe_collection(collection))
    field = next((f for f in described["fields"] if f["name"] == VECTOR_NAME), None)
    if field is None:
        raise ValueError(f"collection {collection!r} has no vector field {VECTOR_NAME!r}; write it with export_codes")
    asked = store_queries(queries, "milvus", compressor=compressor, k=k)
    sparse, bits = field["type"] == DataType.SPARSE_FLOAT_VECTOR, field["type"] == DataType.BINARY_VECTOR
    width = asked.rows.shape[1]
    if not sparse and int(field["params"]["dim"]) != (8 * packed_bytes(width) if bits else width):
        raise ValueError(f"query code dim {width} != the collection's vector dim {int(field['params']['dim'])}: encode "
                         "the queries at the budget the documents were encoded at (k=)")
    search = FieldSearch(client, collection, where, credential, top_k, sparse, bits)
    hits = (found for start, stop in batches(len(asked.codes), _QUERY_BATCH) for found in search(asked.rows[start:stop]))
    return ranked_results(asked, top_k, hits)


def _lite_version(client: Any) -> tuple[int, ...] | None:
    """Milvus Lite's version (server version ``milvus_lite-X.Y.Z``); None for a Milvus server."""
    match = re.match(r"milvus_lite-(\d+)\.(\d+)(?:\.(\d+))?", str(client.get_server_version()))
    return None if match is None else tuple(int(part or 0) for part in match.groups())


def _scores_sparse_by_ip(client: Any) -> bool:
    """False for Milvus Lite before 3.2.2, which scores every SPARSE_FLOAT_VECTOR field by BM25 whatever
    metric is asked; True for a Milvus server."""
    version = _lite_version(client)
    return version is None or version >= _LITE_SPARSE_IP


