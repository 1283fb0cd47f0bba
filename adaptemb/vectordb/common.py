"""What the vector-database modules share: the stores' names, the field names, the errors, and the checks and
batching of an export that do not depend on the store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from adaptemb.codes import Codes
from adaptemb.errors import AdaptembError, AdaptembWarning

VECTOR_NAME = "codes"
ID_FIELD = "id"  # Milvus: the INT64 primary key
BATCH_ROWS = 1_000  # rows a request writes
NAMES = {"milvus": "Milvus", "qdrant": "Qdrant"}
DEFAULT_KEY_ENV = {"qdrant": "QDRANT_API_KEY", "milvus": "MILVUS_TOKEN"}
"""The environment variable a server URL's credential is read from when none is named."""
KEY_WORD = {"qdrant": "API key", "milvus": "token"}
_MILVUS_SERVER_SCHEMES = ("http://", "https://", "tcp://", "unix:")


class VectorDBError(AdaptembError, RuntimeError):
    """A request to a vector database server failed (the message never holds the credential)."""


class CredentialError(VectorDBError, PermissionError):
    """The server refused the credential sent, or wants one and none was sent."""


class ServerUnreachableError(VectorDBError, ConnectionError):
    """The server could not be reached, or its TLS certificate could not be verified."""


class InsecureTransportWarning(AdaptembWarning):
    """A credential is about to travel unencrypted (plain ``http://`` to a host that is not this machine)."""


def with_article(word: str) -> str:
    return f"{'an' if word[0] in 'AEIOU' else 'a'} {word}"


def is_server(to: str, location: str) -> bool:
    schemes = _MILVUS_SERVER_SCHEMES if to == "milvus" else ("http://", "https://")
    return location.startswith(schemes)


def vector_kinds() -> tuple[str, ...]:
    """The registered code kinds a vector database holds: those declaring a ``Codes.vector_form``, sorted."""
    return tuple(kind for kind in Codes.known_kinds() if Codes.for_kind(kind).vector_form)


def check_vector_form(codes: Codes, to: str) -> None:
    if not codes.vector_form:
        raise ValueError(f"{codes.kind!r} codes have no {NAMES[to]} vector type; supported: {', '.join(vector_kinds())}")


def fresh_collection(exists: bool, recreate: bool, collection: str, drop: Callable[[], Any]) -> None:
    if exists:
        if not recreate:
            raise ValueError(f"collection {collection!r} already exists; pass recreate=True (--recreate) to replace it")
        drop()


def batches(n: int, size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, n, size):
        yield start, min(start + size, n)
