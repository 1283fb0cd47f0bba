"""Codes into a vector database people already run: Qdrant or Milvus.

``export_codes(codes, to="qdrant" | "milvus", location=...)`` writes one row per code (id = row number,
or the ``ids`` given, plus an optional payload dict per row) into a new collection with one vector
named ``codes``, in batches of 1,000 rows; ``search_qdrant`` / ``search_milvus`` query such a
collection with query codes of the same kind and return ``(scores, ids)`` as ``Index.search`` does.

``location`` is required: a place that outlives the call (a local folder or ``.db`` file, created with
its parent folders, or a server URL), or a client you opened and keep (then it stays open). ``":memory:"``
is refused: the rows would vanish when the call returns. A client ``export_codes`` opens itself is closed
before it returns (Milvus Lite's in-process server for that file is stopped too, releasing the file's
lock), so any other process can open the collection at once.

**Qdrant** (``pip install 'adaptemb[qdrant]'``; ``location``: a local folder for the embedded mode, or an
``http(s)://`` URL; ``qdrant_client(":memory:")`` for a client to export into and search in this process).
Payload = the point's payload.

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

**Milvus** (``pip install 'adaptemb[milvus]'``; ``location``: a local file path ending in ``.db`` for
Milvus Lite, no server, or an ``http(s)://`` URI of a server). Ids are the ``INT64`` primary key ``id``;
the payload goes into dynamic fields (its keys may not be ``id`` or ``codes``). Every vector is scored by
inner product (``IP``) exhaustively, so the database ranks as adaptemb does. On a server the collection
gets the index below and is loaded (the server keeps it loaded for every client). Milvus Lite gets no
index: Lite searches an unindexed collection by brute force (exact) and opens it loaded in every process,
while an indexed one opens released in each new process until that process calls ``load_collection``; so
``MilvusClient("codes.db").search(...)`` works from a fresh process with pymilvus alone.

============================  ====================================================================
codes                         Milvus field (metric ``IP``; index on a server)
============================  ====================================================================
``sparse`` (csr)              ``SPARSE_FLOAT_VECTOR`` of the stored non-zero values
                              (``SPARSE_INVERTED_INDEX``, ``drop_ratio_build`` and
                              ``drop_ratio_search`` 0: no entry dropped, exact) [1]
``binary_sparse`` (bsa)       ``SPARSE_FLOAT_VECTOR`` of ones on the active features
                              (IP = overlap count; as above) [1]
``dense`` (svd, mrl, cllr)    ``FLOAT_VECTOR`` float32 (``FLAT``)
``binary``                    ``FLOAT_VECTOR`` of ±1 (IP = d − 2·Hamming: the Hamming ranking;
                              ``FLAT``); Milvus Lite has no ``BINARY_VECTOR`` / ``HAMMING``
``int8``                      ``FLOAT_VECTOR`` of the dequantised values ``offset + scale·code``
                              (``FLAT``): IP is adaptemb's int8 similarity, the same ranking
============================  ====================================================================

[1] Milvus Lite before 3.2.2 scores every ``SPARSE_FLOAT_VECTOR`` field by BM25, whatever metric the
index or the search names. Against such a Milvus Lite (found from the server version) sparse and
binary-sparse codes are stored densified instead: ``FLOAT_VECTOR`` of width ``dim`` (``FLAT``, IP), the
same scores at ``dim`` floats a row. ``search_milvus`` queries whichever field the collection holds.

Both databases score symmetrically (query codes against document codes, as ``Codes.similarity`` does);
an asymmetric method's default search (csr / bsa with a dense projected query) is not something a vector
database computes. A sparse index only returns documents that share a feature with the query: a query
with fewer than ``top_k`` such documents gets the rest padded (id -1, score -inf).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from adaptemb.codes import Codes

VECTOR_NAME = "codes"
ID_FIELD = "id"  # Milvus: the INT64 primary key
SUPPORTED_KINDS = ("sparse", "binary_sparse", "dense", "binary", "int8")
_SPARSE_KINDS = ("sparse", "binary_sparse")
_BATCH = 1_000
_QUERY_BATCH = 100  # Milvus: query vectors per search request
_LITE_SPARSE_IP = (3, 2, 2)  # the first Milvus Lite that scores SPARSE_FLOAT_VECTOR by IP, not BM25


def _require_qdrant() -> Any:
    try:
        from qdrant_client import QdrantClient
    except ModuleNotFoundError:
        raise ModuleNotFoundError("exporting to Qdrant needs qdrant-client: pip install 'adaptemb[qdrant]'") from None
    return QdrantClient


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


_MILVUS_SERVER_SCHEMES = ("http://", "https://", "tcp://", "unix:")
MEMORY_REFUSED = (
    "export_codes does not write to ':memory:': an in-memory database is gone when export_codes returns. "
    "Give a local folder (Qdrant) or .db file (Milvus Lite), or a server URL; to export into an in-memory "
    "Qdrant you search in this process, pass a client you keep: location=qdrant_client(':memory:')"
)


@dataclass(frozen=True)
class CodesExport:
    """What ``export_codes`` wrote."""

    to: str
    """``"qdrant"`` or ``"milvus"``."""
    location: str
    """The location given, or ``"a client given"`` when a client was passed."""
    collection: str
    rows: int
    kind: str
    """The codes' kind (``Codes.kind``)."""
    vector: str
    """How the codes are stored: the vector type, metric and index."""

    def __str__(self) -> str:
        return (f"wrote {self.rows:,} {self.kind} codes into {self.to} collection {self.collection!r} at "
                f"{self.location} ({self.vector})")


def qdrant_client(location: str = ":memory:") -> Any:
    """A Qdrant client: ``":memory:"``, a local folder (embedded, no server; created with its parents) or an
    ``http(s)://`` URL. Close it (``client.close()``) to release a local folder's lock for other processes."""
    client_class = _require_qdrant()
    if location == ":memory:":
        return client_class(location=":memory:")
    if location.startswith(("http://", "https://")):
        return client_class(url=location)
    return client_class(path=location)


def milvus_client(location: str) -> Any:
    """A pymilvus ``MilvusClient``: a local ``.db`` path (Milvus Lite, no server) or an ``http(s)://`` URI.

    Milvus Lite runs in this process, one server per ``.db`` path (holding the file's lock until this
    process ends or ``release_milvus_lite(location)``); its parent folders are created.
    """
    server = location.startswith(_MILVUS_SERVER_SCHEMES)
    if not server and not location.endswith(".db"):
        raise ValueError(
            f"a Milvus location is a local file path ending in .db (Milvus Lite) or a server URI "
            f"(http://host:19530); got {location!r}"
        )
    client_class = _require_milvus(lite=not server)
    if not server:
        location = str(Path(location).expanduser())
        Path(location).parent.mkdir(parents=True, exist_ok=True)
    return client_class(uri=location)


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


def export_codes(codes: Codes, *, to: str = "qdrant", location: str | Any, collection: str = "adaptemb",
                 ids: Sequence[int] | np.ndarray | None = None, payload: Sequence[Mapping[str, Any]] | None = None,
                 recreate: bool = False) -> CodesExport:
    """Write ``codes`` into a new collection of ``to`` (``"qdrant"`` or ``"milvus"``); say what was written.

    ``location`` (required) is where the database is, kept after the call: a local folder (Qdrant) or
    ``.db`` file (Milvus Lite), created with its parent folders, or a server URL (see ``qdrant_client`` /
    ``milvus_client``); a client it opens there is closed before it returns (for Milvus Lite, the
    in-process server it started is stopped as well), so another process can open the collection at once.
    Or ``location`` is a client already open, which stays open for you to search and close. ``":memory:"``
    is refused (``ValueError``): the rows would be gone on return; pass ``qdrant_client(":memory:")``
    instead. An existing collection is refused unless ``recreate`` replaces it.
    """
    exporter = _EXPORTERS.get(to)
    if exporter is None:
        raise ValueError(f"unknown vector database {to!r}; supported: {', '.join(sorted(_EXPORTERS))}")
    if isinstance(location, str):
        if location.strip() == ":memory:":
            raise ValueError(MEMORY_REFUSED)
        if not location.strip():
            raise ValueError("location is empty: give a local folder or .db file, or a server URL")
    if not isinstance(codes, Codes):
        raise TypeError(f"export_codes needs codes from encode(); got {type(codes).__name__}")
    _check_kind(codes, to)
    row_ids = _row_ids(codes, ids)
    _check_payload(codes, payload, reserved=_RESERVED_KEYS[to])
    if not isinstance(location, str):
        vector = exporter(codes, location, collection, row_ids, payload, recreate)
        return CodesExport(to, "a client given", collection, len(codes), codes.kind, vector)
    lite = to == "milvus" and not location.startswith(_MILVUS_SERVER_SCHEMES)
    already_running = lite and os.path.abspath(Path(location).expanduser()) in (_lite_servers() or {})
    client = _OPENERS[to](location)
    try:
        vector = exporter(codes, client, collection, row_ids, payload, recreate)
    finally:
        client.close()
        if lite and not already_running:  # Lite keeps the file locked until its server stops
            release_milvus_lite(location)
    return CodesExport(to, location, collection, len(codes), codes.kind, vector)


def _check_kind(codes: Codes, to: str) -> None:
    if codes.kind not in SUPPORTED_KINDS:
        raise ValueError(f"{codes.kind!r} codes have no {_NAMES[to]} vector type; supported: {', '.join(SUPPORTED_KINDS)}")


def _row_ids(codes: Codes, ids: Sequence[int] | np.ndarray | None) -> np.ndarray:
    """One distinct non-negative integer per row (the row numbers when ``ids`` is None)."""
    if ids is None:
        return np.arange(len(codes), dtype=np.int64)
    row_ids = np.asarray(ids)
    if (row_ids.shape != (len(codes),) or not np.issubdtype(row_ids.dtype, np.integer) or (row_ids < 0).any()
            or len(np.unique(row_ids)) != len(row_ids)):
        raise ValueError(f"ids must be {len(codes)} non-negative integers, one per row, all distinct")
    return row_ids


def _check_payload(codes: Codes, payload: Sequence[Mapping[str, Any]] | None, reserved: tuple[str, ...]) -> None:
    if payload is None:
        return
    if len(payload) != len(codes):
        raise ValueError(f"payload must hold one dict per row ({len(codes)}); got {len(payload)}")
    for row, item in enumerate(payload):
        if not isinstance(item, Mapping):
            raise TypeError(f"payload must hold one dict per row; row {row} is a {type(item).__name__}")
        clash = [key for key in reserved if key in item]
        if clash:
            raise ValueError(f"payload row {row} uses the reserved key {clash[0]!r} (the collection's own field)")


def _fresh_collection(exists: bool, recreate: bool, collection: str, drop: Callable[[], Any]) -> None:
    if exists:
        if not recreate:
            raise ValueError(f"collection {collection!r} already exists; pass recreate=True (--recreate) to replace it")
        drop()


def _batches(n: int, size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, n, size):
        yield start, min(start + size, n)


# -- Qdrant ------------------------------------------------------------------------------------------


def _export_qdrant(codes: Codes, client: Any, collection: str, row_ids: np.ndarray,
                   payload: Sequence[Mapping[str, Any]] | None, recreate: bool) -> str:
    from qdrant_client import models

    _fresh_collection(client.collection_exists(collection), recreate, collection,
                      lambda: client.delete_collection(collection))
    if codes.kind in _SPARSE_KINDS:
        client.create_collection(collection, vectors_config={},
                                 sparse_vectors_config={VECTOR_NAME: models.SparseVectorParams()})
        vector = "sparse vector, dot product"
    else:
        datatype = models.Datatype.UINT8 if codes.kind == "int8" else models.Datatype.FLOAT32
        client.create_collection(collection, vectors_config={
            VECTOR_NAME: models.VectorParams(size=codes.dim, distance=models.Distance.DOT, datatype=datatype)})
        vector = f"{datatype.value.lower()} vector of {codes.dim}, dot product"
    for start, stop in _batches(len(codes), _BATCH):
        points = [models.PointStruct(id=int(row_ids[start + i]), vector={VECTOR_NAME: vector},
                                     payload=None if payload is None else dict(payload[start + i]))
                  for i, vector in enumerate(_qdrant_vectors(codes[start:stop]))]
        client.upsert(collection, points=points, wait=True)
    return vector


def search_qdrant(client: Any, collection: str, query_codes: Codes, top_k: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """(scores, ids), each (n_queries, top_k), of query codes searched in a collection ``export_codes`` wrote."""
    _check_kind(query_codes, "qdrant")
    scores = np.full((len(query_codes), top_k), -np.inf, dtype=np.float32)
    ids = np.full((len(query_codes), top_k), -1, dtype=np.int64)
    for row, vector in enumerate(_qdrant_vectors(query_codes)):
        hits = client.query_points(collection, query=vector, using=VECTOR_NAME, limit=top_k).points
        scores[row, : len(hits)] = [hit.score for hit in hits]
        ids[row, : len(hits)] = [int(hit.id) for hit in hits]
    return scores, ids


def _qdrant_vectors(codes: Codes) -> Iterator[Any]:
    """One Qdrant vector per row, as ``_export_qdrant`` declared the collection."""
    from qdrant_client import models

    if codes.kind in _SPARSE_KINDS:
        matrix = codes.to_csr()  # type: ignore[attr-defined]
        for row in range(matrix.shape[0]):
            lo, hi = matrix.indptr[row], matrix.indptr[row + 1]
            yield models.SparseVector(indices=matrix.indices[lo:hi].tolist(), values=matrix.data[lo:hi].astype(float).tolist())
    elif codes.kind == "int8":
        for row in codes.to_arrays()["codes"].astype(np.int16) + 128:
            yield row.tolist()
    else:  # dense, binary (±1)
        for row in codes.to_dense():
            yield row.astype(float).tolist()


# -- Milvus ------------------------------------------------------------------------------------------


def _export_milvus(codes: Codes, client: Any, collection: str, row_ids: np.ndarray,
                   payload: Sequence[Mapping[str, Any]] | None, recreate: bool) -> str:
    if row_ids.size and int(row_ids.max()) > np.iinfo(np.int64).max:
        raise ValueError("Milvus ids are INT64: every id must be below 2**63")
    from pymilvus import DataType

    lite = _lite_version(client) is not None
    sparse = codes.kind in _SPARSE_KINDS and _scores_sparse_by_ip(client)
    _fresh_collection(client.has_collection(collection), recreate, collection,
                      lambda: client.drop_collection(collection))
    schema = client.create_schema(auto_id=False, enable_dynamic_field=True)
    schema.add_field(ID_FIELD, DataType.INT64, is_primary=True)
    index = client.prepare_index_params()
    if sparse:
        schema.add_field(VECTOR_NAME, DataType.SPARSE_FLOAT_VECTOR)
        index.add_index(VECTOR_NAME, index_type="SPARSE_INVERTED_INDEX", metric_type="IP", params={"drop_ratio_build": 0.0})
        vector = "SPARSE_FLOAT_VECTOR, IP"
    else:
        schema.add_field(VECTOR_NAME, DataType.FLOAT_VECTOR, dim=codes.dim)
        index.add_index(VECTOR_NAME, index_type="FLAT", metric_type="IP")
        vector = f"FLOAT_VECTOR of {codes.dim}, IP"
    # Milvus Lite: no index. Lite opens an indexed collection released in every new process (searches fail until
    # that process calls load_collection) but an unindexed one loaded, and searches it by brute force (exact).
    # A server keeps the index and the loaded state for all its clients. Strong consistency: a search right
    # after the export sees every row.
    client.create_collection(collection, schema=schema, index_params=None if lite else index, consistency_level="Strong")
    for start, stop in _batches(len(codes), _BATCH):
        rows = [{**({} if payload is None else payload[start + i]), ID_FIELD: int(row_ids[start + i]), VECTOR_NAME: vector}
                for i, vector in enumerate(_milvus_vectors(codes[start:stop], sparse))]
        client.insert(collection, rows)
    client.flush(collection)  # sealed segments: durable, and Milvus Lite searches them faster than its write buffer
    if lite:
        return f"{vector}, no index: Milvus Lite searches every row"
    client.load_collection(collection)  # loaded on the server, for every client
    return f"{vector}, {'SPARSE_INVERTED_INDEX' if sparse else 'FLAT'} index, loaded"


def search_milvus(client: Any, collection: str, query_codes: Codes, top_k: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """(scores, ids), each (n_queries, top_k), of query codes searched in a collection ``export_codes`` wrote."""
    from pymilvus import DataType

    _check_kind(query_codes, "milvus")
    field = next((f for f in client.describe_collection(collection)["fields"] if f["name"] == VECTOR_NAME), None)
    if field is None:
        raise ValueError(f"collection {collection!r} has no vector field {VECTOR_NAME!r}; write it with export_codes")
    sparse = field["type"] == DataType.SPARSE_FLOAT_VECTOR
    if not sparse and int(field["params"]["dim"]) != query_codes.dim:
        raise ValueError(f"query code dim {query_codes.dim} != the collection's vector dim {int(field['params']['dim'])}")
    params = {"metric_type": "IP", "params": {"drop_ratio_search": 0.0} if sparse else {}}
    scores = np.full((len(query_codes), top_k), -np.inf, dtype=np.float32)
    ids = np.full((len(query_codes), top_k), -1, dtype=np.int64)
    for start, stop in _batches(len(query_codes), _QUERY_BATCH):
        results = client.search(collection, data=_milvus_vectors(query_codes[start:stop], sparse), anns_field=VECTOR_NAME,
                                limit=top_k, search_params=params, output_fields=[ID_FIELD])
        for row, hits in enumerate(results, start):
            scores[row, : len(hits)] = [hit["distance"] for hit in hits]
            ids[row, : len(hits)] = [int(hit["id"]) for hit in hits]
    return scores, ids


def _milvus_vectors(codes: Codes, sparse: bool) -> list[Any]:
    """One Milvus vector per row: a {index: value} dict of the non-zeros, or a float32 row of ``to_dense``
    (±1 for binary, the dequantised values for int8)."""
    if sparse:
        matrix = codes.to_csr()  # type: ignore[attr-defined]
        matrix.eliminate_zeros()
        return [dict(zip(matrix.indices[lo:hi].tolist(), matrix.data[lo:hi].astype(float).tolist(), strict=True))
                for lo, hi in zip(matrix.indptr[:-1], matrix.indptr[1:], strict=True)]
    return list(codes.to_dense().astype(np.float32, copy=False))


def _lite_version(client: Any) -> tuple[int, ...] | None:
    """Milvus Lite's version (server version ``milvus_lite-X.Y.Z``); None for a Milvus server."""
    match = re.match(r"milvus_lite-(\d+)\.(\d+)(?:\.(\d+))?", str(client.get_server_version()))
    return None if match is None else tuple(int(part or 0) for part in match.groups())


def _scores_sparse_by_ip(client: Any) -> bool:
    """False for Milvus Lite before 3.2.2, which scores every SPARSE_FLOAT_VECTOR field by BM25 whatever
    metric is asked; True for a Milvus server."""
    version = _lite_version(client)
    return version is None or version >= _LITE_SPARSE_IP


_EXPORTERS: dict[str, Callable[..., str]] = {"milvus": _export_milvus, "qdrant": _export_qdrant}
_OPENERS: dict[str, Callable[[str], Any]] = {"milvus": milvus_client, "qdrant": qdrant_client}
_NAMES = {"milvus": "Milvus", "qdrant": "Qdrant"}
_RESERVED_KEYS: dict[str, tuple[str, ...]] = {"milvus": (ID_FIELD, VECTOR_NAME), "qdrant": ()}
