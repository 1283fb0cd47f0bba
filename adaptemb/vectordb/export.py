"""``export_codes``: write codes into a new Qdrant or Milvus collection, checking the location, the codes and
their ids and payload first, and closing a client it opened itself."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import SecretStr

from adaptemb.codes import Codes
from adaptemb.vectordb.common import ID_FIELD, VECTOR_NAME, check_vector_form, is_server
from adaptemb.vectordb.credentials import Credential, check_location, resolve_credential
from adaptemb.vectordb.engine_index import EngineIndex
from adaptemb.vectordb.guard import GIVEN, context_of, guarded
from adaptemb.vectordb.milvus import (
    check_milvus_location,
    export_milvus,
    milvus_lite_running,
    open_milvus,
    release_milvus_lite,
)
from adaptemb.vectordb.qdrant import export_qdrant, open_qdrant

VectorDB = Literal["qdrant", "milvus"]
"""The vector databases ``export_codes`` writes into."""

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
    credentials: str = ""
    """Which credential was sent, never its value (``API key from $QDRANT_API_KEY``); empty when none was."""

    def __str__(self) -> str:
        sent = f"; {self.credentials}" if self.credentials else ""
        return (f"wrote {self.rows:,} {self.kind} codes into {self.to} collection {self.collection!r} at "
                f"{self.location} ({self.vector}{sent})")


def export_codes(codes: Codes, *, to: VectorDB = "qdrant", location: str | Any, collection: str = "adaptemb",
                 ids: Sequence[int] | np.ndarray | None = None, payload: Sequence[Mapping[str, Any]] | None = None,
                 recreate: bool = False, api_key: SecretStr | str | None = None, api_key_env: str | None = None,
                 ca_cert: str | os.PathLike[str] | None = None, compact: bool = False,
                 index: EngineIndex | str | None = None) -> CodesExport:
    """Write ``codes`` into a new collection of ``to`` (``"qdrant"`` or ``"milvus"``); say what was written.

    ``location`` (required) is where the database is, kept after the call: a local folder (Qdrant) or
    ``.db`` file (Milvus Lite), created with its parent folders, or a server URL (see ``qdrant_client`` /
    ``milvus_client``); a client it opens there is closed before it returns (for Milvus Lite, the
    in-process server it started is stopped as well), so another process can open the collection at once.
    Or ``location`` is a client already open, which stays open for you to search and close. ``":memory:"``
    is refused (``ValueError``): the rows would be gone on return; pass ``qdrant_client(":memory:")``
    instead. An existing collection is refused unless ``recreate`` replaces it.

    A server URL is sent the credential from ``api_key`` (a ``pydantic.SecretStr`` or str), else from the
    environment variable ``api_key_env`` names, else from ``$QDRANT_API_KEY`` / ``$MILVUS_TOKEN`` when set;
    ``ca_cert`` is a PEM CA bundle for an ``https`` server whose certificate public CAs do not sign. A
    refused or missing credential raises ``CredentialError``, an unreachable server (or a certificate that
    does not verify) ``ServerUnreachableError``; no message shows the credential.

    Each kind is stored so that the database's dot product is adaptemb's score (see the package docstring);
    ``compact=True`` stores a kind's smaller approximate form instead (Qdrant: int8 codes as uint8 ``code + 128``),
    which a search through the compressor refuses. Search the collection with ``search_qdrant`` /
    ``search_milvus``: query codes, or raw float queries through the compressor (``compressor=``).

    ``index`` asks for the engine's own index (``adaptemb.vectordb.engine_index``): an ``EngineIndex`` (type and
    build parameters), an index type's name (``"BIN_IVF_FLAT"``, ``"HNSW"``, ...), or ``"approximate"`` (the
    engine's approximate index for the codes' vector type); it must fit the vector type the kind is stored as
    (``ValueError`` naming those that fit). None: a Milvus server gets an exact index, Milvus Lite none, Qdrant its
    defaults.
    """
    exporter = _EXPORTERS.get(to)
    if exporter is None:
        raise ValueError(f"unknown vector database {to!r}; supported: {', '.join(sorted(_EXPORTERS))}")
    if compact and to != "qdrant":
        raise ValueError(f"compact=True applies to Qdrant (int8 codes as uint8); {to} stores every kind exactly")
    credential = _checked_credential(to, location, api_key, api_key_env, ca_cert)
    if not isinstance(codes, Codes):
        raise TypeError(f"export_codes needs codes from encode(); got {type(codes).__name__}")
    check_vector_form(codes, to)
    row_ids = _row_ids(codes, ids)
    _check_payload(codes, payload, reserved=_RESERVED_KEYS[to])
    if not isinstance(location, str):
        _, where, given_credential = context_of(location, to)
        vector = guarded(to, where, given_credential,
                         lambda: exporter(codes, location, collection, row_ids, payload, recreate, compact, index))
        return CodesExport(to, GIVEN, collection, len(codes), codes.kind, vector)
    local = not is_server(to, location)
    lite = to == "milvus" and local
    new_store = local and not os.path.lexists(location)
    already_running = lite and milvus_lite_running(location)
    client = _OPENERS[to](location, credential, ca_cert)
    try:
        vector = guarded(to, location, credential,
                         lambda: exporter(codes, client, collection, row_ids, payload, recreate, compact, index))
    except BaseException:
        _close(client, location, lite and not already_running)
        if new_store:  # a refused or failed export leaves no half-written store behind
            _remove(Path(location))
        raise
    _close(client, location, lite and not already_running)
    return CodesExport(to, location, collection, len(codes), codes.kind, vector,
                       "" if credential is None else credential.describe())


def _close(client: Any, location: str, release_lite: bool) -> None:
    client.close()
    if release_lite:  # Lite keeps the file locked until its server stops
        release_milvus_lite(location)


def _remove(path: Path) -> None:
    """Delete a store this export created (Milvus Lite: a file or folder; Qdrant: a folder)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _checked_credential(to: str, location: str | Any, api_key: SecretStr | str | None, api_key_env: str | None,
                        ca_cert: str | os.PathLike[str] | None) -> Credential | None:
    """The credential to send to ``location`` (a location string or a client given), once the location is checked."""
    if not isinstance(location, str):
        if ca_cert is not None:
            raise ValueError("ca_cert applies to a server URL location; a client given brings its own TLS settings")
        return resolve_credential(to, None, api_key, api_key_env)
    if location.strip() == ":memory:":
        raise ValueError(MEMORY_REFUSED)
    if not location.strip():
        raise ValueError("location is empty: give a local folder or .db file, or a server URL")
    if to == "milvus":
        check_milvus_location(location)
    check_location(to, location, ca_cert)
    return resolve_credential(to, location, api_key, api_key_env)


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


_EXPORTERS: dict[str, Callable[..., str]] = {"milvus": export_milvus, "qdrant": export_qdrant}
_OPENERS: dict[str, Callable[[str, Credential | None, str | os.PathLike[str] | None], Any]] = {
    "milvus": open_milvus, "qdrant": open_qdrant}
_RESERVED_KEYS: dict[str, tuple[str, ...]] = {"milvus": (ID_FIELD, VECTOR_NAME), "qdrant": ()}
