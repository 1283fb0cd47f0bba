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
import time
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
from adaptemb.vectordb.engine_index import (
    BITS_FIELD,
    ENGINE_INDEX_TYPES,
    SPARSE_FIELD,
    EngineIndex,
    EngineIndexType,
    exact_milvus_index,
    milvus_field,
    milvus_request,
    milvus_search_params,
    resolve_index,
)
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
                  payload: Sequence[Mapping[str, Any]] | None, recreate: bool, compact: bool = False,
                  index: EngineIndex | str | None = None) -> str:
    if row_ids.size and int(row_ids.max()) > np.iinfo(np.int64).max:
        raise ValueError("Milvus ids are INT64: every id must be below 2**63")
    lite = _lite_version(client) is not None
    vector_type = milvus_field(codes, server=not lite, sparse_ip=_scores_sparse_by_ip(client))
    # Milvus Lite gets no index unless one is asked for: Lite opens an indexed collection released in every new
    # process (searches fail until that process calls load_collection; search_milvus does) but an unindexed one
    # loaded, and searches it by brute force (exact). A server keeps the index and the loaded state for all its
    # clients, and gets the exact index of the field when none is asked for.
    resolved = (resolve_index("milvus", vector_type, index, len(codes), codes.kind, local=lite,
                              server_vector_type=milvus_field(codes, server=True)) if index is not None
                else None if lite else exact_milvus_index(vector_type))
    fresh_collection(client.has_collection(collection), recreate, collection,
                     lambda: client.drop_collection(collection))
    schema, vector = _schema(client, codes, vector_type)
    index_params = None
    if resolved is not None:
        index_params = client.prepare_index_params()
        index_params.add_index(VECTOR_NAME, **milvus_request(resolved, lite=lite))
    # Strong consistency: a search right after the export sees every row.
    client.create_collection(collection, schema=schema, index_params=index_params, consistency_level="Strong")
    sparse, bits = vector_type == SPARSE_FIELD, vector_type == BITS_FIELD
    ceiling = balance_ceiling(codes) if sparse else 0.0
    for start, stop in batches(len(codes), BATCH_ROWS):
        values = document_values(codes[start:stop], sparse, bits, ceiling)
        rows = [{**({} if payload is None else payload[start + i]), ID_FIELD: int(row_ids[start + i]), VECTOR_NAME: value}
                for i, value in enumerate(values)]
        client.insert(collection, rows)
    client.flush(collection)  # sealed segments: durable, and Milvus Lite searches them faster than its write buffer
    if resolved is None:
        return f"{vector}, no index: Milvus Lite searches every row"
    _settle_index(client, collection)
    exact = " (Milvus Lite scores sparse fields exactly)" if lite and resolved.type.local == "exact" else ""
    return f"{vector}, {resolved.describe()} index{exact}, loaded"


INDEX_WAIT_S = 600.0
"""The longest an export waits for the engine to index every row it wrote."""


def _settle_index(client: Any, collection: str) -> None:
    """Wait until the index covers every row written (``describe_index``: no pending rows), then release and load
    the collection, so searches run on the index: a server indexes sealed segments in the background and searches
    the rest by brute force, and Milvus Lite builds a segment's index synchronously only on ``load_collection``
    (after a flush it does so in the background, searching every row until then; measured: recall 1.0 at
    ``nprobe=1`` of 205 cells right after the flush, 0.04 after 5 s)."""
    deadline = time.monotonic() + INDEX_WAIT_S
    name = client.list_indexes(collection, field_name=VECTOR_NAME)[0]
    while time.monotonic() < deadline:
        described = client.describe_index(collection, name)
        if int(described.get("pending_index_rows", 0)) == 0 and int(described.get("indexed_rows", 0)) >= int(
                described.get("total_rows", 0)):
            break
        time.sleep(0.5)
    client.release_collection(collection)
    _load_when_written(client, collection, deadline)  # loaded on the server, for every client


TRANSIENT_LOAD_ERROR = "Resource temporarily unavailable"
"""What Milvus Lite's load says when its background index build still holds the index file it reports done (EAGAIN
from faiss' read_index; seen once on a busy 2-core machine, right after describe_index showed no pending rows)."""


def _load_when_written(client: Any, collection: str, deadline: float) -> None:
    """``load_collection``, tried again every half second until ``deadline`` while it fails with
    ``TRANSIENT_LOAD_ERROR``; any other error, or that one past the deadline, is raised."""
    while True:
        try:
            client.load_collection(collection)
            return
        except Exception as err:  # pymilvus raises MilvusException; only EAGAIN on the index file is retried
            if TRANSIENT_LOAD_ERROR not in str(err) or time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def _schema(client: Any, codes: Codes, vector_type: str) -> tuple[Any, str]:
    """The collection's schema (the INT64 primary key ``id``, the vector field ``codes``, dynamic fields for the
    payload) and how the vector is stored, in words."""
    from pymilvus import DataType

    schema = client.create_schema(auto_id=False, enable_dynamic_field=True)
    schema.add_field(ID_FIELD, DataType.INT64, is_primary=True)
    if vector_type == SPARSE_FIELD:
        schema.add_field(VECTOR_NAME, DataType.SPARSE_FLOAT_VECTOR)
        return schema, f"SPARSE_FLOAT_VECTOR of {codes.dim} + a balance entry, IP"
    if vector_type == BITS_FIELD:
        schema.add_field(VECTOR_NAME, DataType.BINARY_VECTOR, dim=8 * packed_bytes(codes.dim))
        return schema, f"BINARY_VECTOR of {8 * packed_bytes(codes.dim)}, HAMMING"
    schema.add_field(VECTOR_NAME, DataType.FLOAT_VECTOR, dim=codes.dim)
    return schema, f"FLOAT_VECTOR of {codes.dim}, IP"


def search_milvus(client: Any, collection: str, queries: Codes | Any, top_k: int = 10, *,
                  compressor: QueryCompressor | None = None, k: int | None = None,
                  search_params: Mapping[str, Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(scores, ids) of ``queries`` in a Milvus collection ``export_codes`` wrote, as ``Index.search`` returns them
    (``ranked_results``). ``queries``, ``compressor`` and ``k`` are those of ``store_queries``, as for
    ``search_qdrant``; the search through a compressor is refused (``ValueError``) unless Milvus' scores are the
    compressor's own. A ``BINARY_VECTOR`` collection (binary codes on a server) is searched by Hamming distance and
    its candidates rescored (the module docstring). ``search_params`` override the search defaults of the
    collection's index type (``ENGINE_INDEX_TYPES``: ``nprobe``, ``ef``, ``drop_ratio_search``, ...); a collection
    with an index that this process has not loaded (Milvus Lite, another process's export) is loaded first.
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
    index_type = _loaded_index(client, collection, where, credential)
    milvus_search_params(index_type, search_params, top_k)  # unknown parameters refused before any request
    search = FieldSearch(client, collection, where, credential, top_k, sparse, bits, (index_type, search_params))
    hits = (found for start, stop in batches(len(asked.codes), _QUERY_BATCH) for found in search(asked.rows[start:stop]))
    return ranked_results(asked, top_k, hits)


def _loaded_index(client: Any, collection: str, where: str, credential: Credential | None) -> EngineIndexType | None:
    """The index type of the collection's vector field (None: no index, or one adaptemb does not know), the
    collection loaded first if it has an index and is not loaded."""
    names = guarded("milvus", where, credential, lambda: client.list_indexes(collection, field_name=VECTOR_NAME))
    if not names:
        return None
    state = guarded("milvus", where, credential, lambda: client.get_load_state(collection))
    if str(state.get("state")) != "Loaded":
        guarded("milvus", where, credential, lambda: client.load_collection(collection))
    described = guarded("milvus", where, credential, lambda: client.describe_index(collection, names[0]))
    return ENGINE_INDEX_TYPES["milvus"].get(str(described.get("index_type", "")).upper())


def _lite_version(client: Any) -> tuple[int, ...] | None:
    """Milvus Lite's version (server version ``milvus_lite-X.Y.Z``); None for a Milvus server."""
    match = re.match(r"milvus_lite-(\d+)\.(\d+)(?:\.(\d+))?", str(client.get_server_version()))
    return None if match is None else tuple(int(part or 0) for part in match.groups())


def _scores_sparse_by_ip(client: Any) -> bool:
    """False for Milvus Lite before 3.2.2, which scores every SPARSE_FLOAT_VECTOR field by BM25 whatever
    metric is asked; True for a Milvus server."""
    version = _lite_version(client)
    return version is None or version >= _LITE_SPARSE_IP


