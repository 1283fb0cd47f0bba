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

**Credentials** (a server URL only). The Qdrant API key comes from ``$QDRANT_API_KEY`` and the Milvus token
from ``$MILVUS_TOKEN`` (an API key, or ``user:password``; pymilvus itself reads no token variable), or from
the variable ``api_key_env`` names, or from ``api_key`` (a ``pydantic.SecretStr`` or a string, wrapped at
once). The key is held as a ``SecretStr``: it is in no ``repr``, message or ``CodesExport``, and an error
the client raises that shows it is re-raised without it. A server that refuses the key (or wants one)
raises ``CredentialError``; one that cannot be reached (or whose TLS certificate does not verify) raises
``ServerUnreachableError``. ``https`` locations verify the server's certificate (httpx and gRPC defaults,
never turned off): against the public CAs, ``$SSL_CERT_FILE`` (Qdrant) / ``$GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``
(Milvus), or the PEM file ``ca_cert`` names. A key sent over plain ``http://`` (or ``tcp://``) to a host
that is not this machine draws an ``InsecureTransportWarning``: it travels unencrypted.

Both databases score symmetrically (query codes against document codes, as ``Codes.similarity`` does);
an asymmetric method's default search (csr / bsa with a dense projected query) is not something a vector
database computes. A sparse index only returns documents that share a feature with the query: a query
with fewer than ``top_k`` such documents gets the rest padded (id -1, score -inf).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import ssl
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import numpy as np
from pydantic import SecretStr

from adaptemb.codes import Codes
from adaptemb.errors import AdaptembError, AdaptembWarning

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


DEFAULT_KEY_ENV = {"qdrant": "QDRANT_API_KEY", "milvus": "MILVUS_TOKEN"}
"""The environment variable a server URL's credential is read from when none is named."""
_KEY_WORD = {"qdrant": "API key", "milvus": "token"}
_MASK = "**********"
_T = TypeVar("_T")


class VectorDBError(AdaptembError, RuntimeError):
    """A request to a vector database server failed (the message never holds the credential)."""


class CredentialError(VectorDBError, PermissionError):
    """The server refused the credential sent, or wants one and none was sent."""


class ServerUnreachableError(VectorDBError, ConnectionError):
    """The server could not be reached, or its TLS certificate could not be verified."""


class InsecureTransportWarning(AdaptembWarning):
    """A credential is about to travel unencrypted (plain ``http://`` to a host that is not this machine)."""


@dataclass(frozen=True, repr=False)
class _Credential:
    """A credential and where it came from; its repr and str are masked."""

    secret: SecretStr
    source: str
    """Where it came from, for messages: ``$QDRANT_API_KEY``, ``the api_key given``, ..."""
    word: str
    """``API key`` (Qdrant) or ``token`` (Milvus)."""

    def __repr__(self) -> str:
        return f"<{self.word} from {self.source}: {_MASK}>"

    __str__ = __repr__

    def describe(self) -> str:
        return f"{self.word} from {self.source}"

    def fragments(self) -> list[str]:
        """Forms of the secret a message could show: itself, base64 (gRPC's authorization header) and, for
        ``user:password``, the password."""
        value = self.secret.get_secret_value()
        found = {value, base64.b64encode(value.encode()).decode()}
        if ":" in value and len(value.split(":", 1)[1]) >= 4:
            found.add(value.split(":", 1)[1])
        return sorted(found, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        for fragment in self.fragments():
            text = text.replace(fragment, _MASK)
        return text

    def shown_in(self, text: str) -> bool:
        return any(fragment in text for fragment in self.fragments())


def _a(word: str) -> str:
    return f"{'an' if word[0] in 'AEIOU' else 'a'} {word}"


def _env_name_shown(name: str) -> str | None:
    """``$NAME`` when ``name`` looks like a conventional variable name (upper case), else None: a value
    passed by mistake where a name belongs (the key itself) is never repeated."""
    return f"${name}" if re.fullmatch(r"[A-Z_][A-Z0-9_]{0,63}", name) else None


def _is_server(to: str, location: str) -> bool:
    schemes = _MILVUS_SERVER_SCHEMES if to == "milvus" else ("http://", "https://")
    return location.startswith(schemes)


def _resolve_credential(to: str, location: str | None, api_key: SecretStr | str | None,
                        api_key_env: str | None) -> _Credential | None:
    """The credential for a server ``location`` (None when none is configured). An explicit ``api_key`` or
    ``api_key_env`` for a location that is not a server is refused; the default variable is then ignored."""
    word = _KEY_WORD[to]
    if api_key is not None and api_key_env is not None:
        raise ValueError(f"give the {word} either as api_key or through api_key_env, not both")
    server = location is not None and _is_server(to, location)
    if not server and (api_key is not None or api_key_env is not None):
        where = "a client given" if location is None else repr(location)
        raise ValueError(f"{_a(word)} is only sent to a server URL; {where} is not one (a client given brings its "
                         f"own credentials, a local database has none): drop --api-key-env / api_key / api_key_env")
    if not server:
        return None
    if api_key is not None:
        if hasattr(api_key, "get_secret_value"):
            value = str(api_key.get_secret_value())
        elif isinstance(api_key, str):
            value = api_key
        else:
            raise TypeError(f"api_key must be a pydantic SecretStr or a str; got {type(api_key).__name__}")
        if not value.strip():
            raise ValueError(f"the {word} given as api_key is empty")
        return _Credential(SecretStr(value.strip()), "the api_key given", word)
    name = api_key_env if api_key_env is not None else DEFAULT_KEY_ENV[to]
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError("--api-key-env / api_key_env takes the NAME of an environment variable that holds the "
                         f"{word}, not the {word} itself; the value given is not a variable name (not shown)")
    value = os.environ.get(name, "").strip()
    shown = _env_name_shown(name)
    if not value:
        if api_key_env is None:
            return None  # no credential configured: fine for a server without authentication
        which = (f"{shown} (named by --api-key-env / api_key_env)" if shown else
                 "named by --api-key-env / api_key_env (its name is not shown: it is not an upper-case variable name; "
                 f"pass the name of a variable that holds the {word}, not the {word} itself)")
        raise ValueError(f"the environment variable {which} is not set or is empty: it should hold the "
                         f"{_NAMES[to]} {word}")
    return _Credential(SecretStr(value), shown or "the variable named by --api-key-env / api_key_env", word)


def _check_location(to: str, location: str, ca_cert: str | os.PathLike[str] | None) -> None:
    """Refuse credentials written into a server URL, and a CA bundle that is missing or for a location
    without TLS."""
    parts = urlsplit(location)
    if _is_server(to, location) and "@" in parts.netloc:
        shown = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()
        raise ValueError(f"the location {shown!r} carries credentials before '@' (not shown): a location is shown "
                         f"in output and logs; put the {_KEY_WORD[to]} in ${DEFAULT_KEY_ENV[to]} (or the variable "
                         "--api-key-env / api_key_env names) and give the URL without it")
    if ca_cert is not None:
        if parts.scheme != "https":
            raise ValueError(f"ca_cert / --ca-cert verifies an https:// server; {location!r} is not one")
        if not Path(ca_cert).is_file():
            raise FileNotFoundError(2, "CA bundle (--ca-cert / ca_cert) not found", os.fspath(ca_cert))


def _warn_insecure(to: str, location: str, credential: _Credential | None) -> None:
    """Warn when a credential is about to travel unencrypted to a host that is not this machine."""
    parts = urlsplit(location)
    if credential is None or parts.scheme not in ("http", "tcp"):
        return
    host = (parts.hostname or "").lower()
    try:
        local = ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = host == "localhost" or host.endswith(".localhost")
    if not local:
        warnings.warn(f"the {_NAMES[to]} {credential.describe()} is sent unencrypted to {host} ({parts.scheme}://): "
                      "anyone on the network path can read it; use an https:// location",
                      InsecureTransportWarning, stacklevel=4)


_CLIENT_CONTEXT: weakref.WeakKeyDictionary[Any, tuple[str, str, _Credential | None]] = weakref.WeakKeyDictionary()
"""Clients opened by ``qdrant_client`` / ``milvus_client`` on a server: (database, location, credential),
so that ``search_*`` errors name the server and never show the credential."""


def _remember(client: Any, to: str, location: str, credential: _Credential | None) -> Any:
    try:
        _CLIENT_CONTEXT[client] = (to, location, credential)
    except TypeError:  # not weak-referenceable: its errors are translated without the context
        pass
    return client


_GIVEN = "a client given"


def _server(to: str, location: str) -> str:
    """``the Qdrant server at URL`` (``the Qdrant server of a client given`` when adaptemb did not open it)."""
    return f"the {_NAMES[to]} server {'of' if location == _GIVEN else 'at'} {location}"


def _context_of(client: Any, to: str) -> tuple[str, str, _Credential | None]:
    try:
        return _CLIENT_CONTEXT.get(client) or (to, _GIVEN, None)
    except TypeError:
        return to, _GIVEN, None


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo = [error]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo.extend(e for e in (current.__cause__, current.__context__, getattr(current, "source", None))
                    if isinstance(e, BaseException))


def _text(error: BaseException) -> str:
    """Everything an error could print: its str, repr and arguments."""
    return " ".join([str(error), repr(error), *map(repr, getattr(error, "args", ()))])


def _detail(error: BaseException) -> str:
    """The most telling line of a client's error: the innermost non-empty message."""
    for current in _chain(error):
        details = getattr(current, "details", None)
        if callable(details) and _grpc_code(current):  # a gRPC error: its status and details, one line
            said = details()
            return f"{_grpc_code(current)}: {str(said).splitlines()[0] if said else ''}"
        status = _status_code(current)
        if status is not None:  # a Qdrant error response: its status and the server's error message
            reason = getattr(current, "reason_phrase", "") or ""
            try:
                said = json.loads(getattr(current, "content", b"") or b"null")["status"]["error"]
            except (ValueError, KeyError, TypeError):
                said = ""
            return f"HTTP {status} {reason}".strip() + (f": {said}" if said else "")
        if type(current).__name__ == "MilvusException" and getattr(current, "message", None):
            return f"{str(current.message).splitlines()[0]} (code {getattr(current, 'code', '?')})"
        source = getattr(current, "source", None)
        if isinstance(source, BaseException) and str(source):
            return f"{type(source).__name__}: {source}"
        if str(current):
            return f"{type(current).__name__}: {str(current).splitlines()[0]}"
    return type(error).__name__


def _status_code(error: BaseException) -> int | None:
    """The HTTP status of a Qdrant error response."""
    status = getattr(error, "status_code", None)
    return status if isinstance(status, int) else None


def _grpc_code(error: BaseException) -> str | None:
    code = getattr(error, "code", None)
    try:
        code = code() if callable(code) else code
    except Exception:  # noqa: BLE001  an error object of a client that breaks when asked: no code
        return None
    name = getattr(code, "name", None)
    return name if isinstance(name, str) else None


_MILVUS_AUTH_CODES = (1401, 1402, 1800)  # Milvus: privilege not authenticated / not permitted, need authenticate
_MILVUS_PERMISSION_DENIED = 3  # the legacy ErrorCode.PermissionDenied (MilvusException.compatible_code)
_MILVUS_CONNECT_FAILED = 2  # pymilvus' Status.CONNECT_FAILED


def _refused(to: str, location: str, credential: _Credential | None, why: str, forbidden: bool) -> CredentialError:
    word, default = _KEY_WORD[to], DEFAULT_KEY_ENV[to]
    if credential is None and location == _GIVEN:  # built elsewhere: whether it holds a credential is unknown
        return CredentialError(f"{_server(to, location)} refused its request ({why}): the client holds a wrong "
                               f"{word}, one without this permission, or none")
    if credential is None:
        form = " (an API key, or user:password)" if to == "milvus" else ""
        return CredentialError(f"{_server(to, location)} wants {_a(word)}{form} and none was sent ({why}): "
                               f"set ${default}, or name the variable that holds it with --api-key-env "
                               "(api_key_env= in Python)")
    if forbidden:
        return CredentialError(f"{_server(to, location)} accepted no request with the "
                               f"{credential.describe()} ({why}): the {word} lacks the permission this needs "
                               "(a read-only key?), or is not valid for this server")
    return CredentialError(f"{_server(to, location)} refused the {credential.describe()} ({why}): "
                           f"check the {word}, or name another variable with --api-key-env (api_key_env= in Python)")


def _translate(error: BaseException, to: str, location: str, credential: _Credential | None) -> BaseException | None:
    """The error to raise instead of a client's ``error`` (None: raise it as it is): a refused or missing
    credential and an unreachable server get their own message; any error whose text shows the credential
    is re-raised with it masked."""
    if isinstance(error, AdaptembError):
        return None
    chain = list(_chain(error))
    scrub = credential.scrub if credential is not None else (lambda text: text)
    detail = scrub(_detail(error))
    for current in chain:
        status = _status_code(current)
        if status in (401, 403):
            return _refused(to, location, credential, f"HTTP {status} {'Unauthorized' if status == 401 else 'Forbidden'}",
                            forbidden=status == 403 and credential is not None)
        grpc_code = _grpc_code(current)
        code = getattr(current, "code", None) if type(current).__name__ == "MilvusException" else None
        compatible = getattr(current, "compatible_code", None) if code is not None else None
        if grpc_code in ("UNAUTHENTICATED", "PERMISSION_DENIED") or code in _MILVUS_AUTH_CODES \
                or compatible == _MILVUS_PERMISSION_DENIED:
            return _refused(to, location, credential, scrub(_detail(current) if grpc_code else f"{code}: {_detail(current)}"),
                            forbidden=grpc_code == "PERMISSION_DENIED" or code == 1402)
    tls = "CERTIFICATE_VERIFY_FAILED" in detail or any(isinstance(e, ssl.SSLError) for e in chain)
    unreachable = tls or any(
        type(e).__module__.startswith("httpx") and type(e).__name__ in ("ConnectError", "ConnectTimeout", "ReadTimeout",
                                                                         "RemoteProtocolError", "ReadError", "WriteError")
        or _grpc_code(e) == "UNAVAILABLE"
        or (type(e).__name__ == "MilvusException" and getattr(e, "code", None) == _MILVUS_CONNECT_FAILED)
        for e in chain)
    if unreachable:
        hint = ""
        if tls:
            hint = ("; its TLS certificate was not verified against the trusted CAs: give the CA bundle that signed it "
                    "with --ca-cert PATH (ca_cert= in Python)")
        elif location.startswith("https://") and to == "milvus":
            hint = ("; over https a certificate that does not verify fails the same way: give its CA bundle with "
                    "--ca-cert PATH (ca_cert= in Python)")
        return ServerUnreachableError(f"could not reach {_server(to, location)} ({detail}){hint}")
    if credential is not None and any(credential.shown_in(_text(e)) for e in chain):
        return VectorDBError(f"{_server(to, location)} failed ({detail})")
    return None


def _guarded(to: str, location: str, credential: _Credential | None, action: Callable[[], _T]) -> _T:
    """``action()``, its client's errors translated (see ``_translate``). The translation is raised after the
    ``except`` block: it chains nothing, so the original, which may show the credential, is neither printed
    with a traceback nor reachable from the error raised."""
    try:
        return action()
    except Exception as error:
        translated = _translate(error, to, location, credential)
        if translated is None:
            raise
    raise translated


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


def qdrant_client(location: str = ":memory:", *, api_key: SecretStr | str | None = None, api_key_env: str | None = None,
                  ca_cert: str | os.PathLike[str] | None = None) -> Any:
    """A Qdrant client: ``":memory:"``, a local folder (embedded, no server; created with its parents) or an
    ``http(s)://`` URL. Close it (``client.close()``) to release a local folder's lock for other processes.

    A URL gets the API key (the ``api-key`` header) from ``api_key`` (a ``SecretStr`` or str), else the
    variable ``api_key_env`` names, else ``$QDRANT_API_KEY`` if set (none: no key is sent). ``https``
    verifies the server's certificate: the public CAs (certifi), ``$SSL_CERT_FILE``, or the PEM bundle
    ``ca_cert``. A key over plain ``http://`` to another machine warns (``InsecureTransportWarning``).
    """
    return _open_qdrant(location, _resolve_credential("qdrant", location, api_key, api_key_env), ca_cert)


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
    _check_milvus_location(location)
    return _open_milvus(location, _resolve_credential("milvus", location, api_key, api_key_env), ca_cert)


def _open_qdrant(location: str, credential: _Credential | None, ca_cert: str | os.PathLike[str] | None) -> Any:
    server = _is_server("qdrant", location)
    _check_location("qdrant", location, ca_cert)
    client_class = _require_qdrant()
    if location == ":memory:":
        return client_class(location=":memory:")
    if not server:
        return client_class(path=location)
    _warn_insecure("qdrant", location, credential)
    options: dict[str, Any] = {}
    if ca_cert is not None:  # httpx verifies against this bundle (the version check would not: it is skipped)
        options.update(verify=ssl.create_default_context(cafile=os.fspath(ca_cert)), check_compatibility=False)
    with warnings.catch_warnings():  # adaptemb's InsecureTransportWarning says it (for other hosts only)
        warnings.filterwarnings("ignore", message="Api key is used with an insecure connection")
        client = _guarded("qdrant", location, credential, lambda: client_class(
            url=location, api_key=None if credential is None else credential.secret.get_secret_value(), **options))
    return _remember(client, "qdrant", location, credential)


def _check_milvus_location(location: str) -> None:
    if not _is_server("milvus", location) and not location.endswith(".db"):
        raise ValueError(
            f"a Milvus location is a local file path ending in .db (Milvus Lite) or a server URI "
            f"(http://host:19530); got {location!r}"
        )


def _open_milvus(location: str, credential: _Credential | None, ca_cert: str | os.PathLike[str] | None) -> Any:
    server = _is_server("milvus", location)
    _check_milvus_location(location)
    _check_location("milvus", location, ca_cert)
    client_class = _require_milvus(lite=not server)
    if not server:
        location = str(Path(location).expanduser())
        Path(location).parent.mkdir(parents=True, exist_ok=True)
        return client_class(uri=location)
    _warn_insecure("milvus", location, credential)
    options: dict[str, Any] = {}
    if credential is not None:
        options["token"] = credential.secret.get_secret_value()
    if ca_cert is not None:  # one-way TLS: the server's certificate is verified against this bundle
        options["server_pem_path"] = os.fspath(ca_cert)
    client = _guarded("milvus", location, credential, lambda: client_class(uri=location, **options))
    return _remember(client, "milvus", location, credential)


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
                 recreate: bool = False, api_key: SecretStr | str | None = None, api_key_env: str | None = None,
                 ca_cert: str | os.PathLike[str] | None = None) -> CodesExport:
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
    """
    exporter = _EXPORTERS.get(to)
    if exporter is None:
        raise ValueError(f"unknown vector database {to!r}; supported: {', '.join(sorted(_EXPORTERS))}")
    if isinstance(location, str):
        if location.strip() == ":memory:":
            raise ValueError(MEMORY_REFUSED)
        if not location.strip():
            raise ValueError("location is empty: give a local folder or .db file, or a server URL")
        if to == "milvus":
            _check_milvus_location(location)
        _check_location(to, location, ca_cert)
        credential = _resolve_credential(to, location, api_key, api_key_env)
    else:
        if ca_cert is not None:
            raise ValueError("ca_cert applies to a server URL location; a client given brings its own TLS settings")
        credential = _resolve_credential(to, None, api_key, api_key_env)
    if not isinstance(codes, Codes):
        raise TypeError(f"export_codes needs codes from encode(); got {type(codes).__name__}")
    _check_kind(codes, to)
    row_ids = _row_ids(codes, ids)
    _check_payload(codes, payload, reserved=_RESERVED_KEYS[to])
    if not isinstance(location, str):
        _, where, given_credential = _context_of(location, to)
        vector = _guarded(to, where, given_credential,
                          lambda: exporter(codes, location, collection, row_ids, payload, recreate))
        return CodesExport(to, _GIVEN, collection, len(codes), codes.kind, vector)
    lite = to == "milvus" and not _is_server(to, location)
    already_running = lite and os.path.abspath(Path(location).expanduser()) in (_lite_servers() or {})
    client = _OPENERS[to](location, credential, ca_cert)
    try:
        vector = _guarded(to, location, credential,
                          lambda: exporter(codes, client, collection, row_ids, payload, recreate))
    finally:
        client.close()
        if lite and not already_running:  # Lite keeps the file locked until its server stops
            release_milvus_lite(location)
    return CodesExport(to, location, collection, len(codes), codes.kind, vector,
                       "" if credential is None else credential.describe())


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
    _, where, credential = _context_of(client, "qdrant")
    for row, vector in enumerate(_qdrant_vectors(query_codes)):
        hits = _guarded("qdrant", where, credential, lambda vector=vector: client.query_points(
            collection, query=vector, using=VECTOR_NAME, limit=top_k).points)
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
    _, where, credential = _context_of(client, "milvus")
    described = _guarded("milvus", where, credential, lambda: client.describe_collection(collection))
    field = next((f for f in described["fields"] if f["name"] == VECTOR_NAME), None)
    if field is None:
        raise ValueError(f"collection {collection!r} has no vector field {VECTOR_NAME!r}; write it with export_codes")
    sparse = field["type"] == DataType.SPARSE_FLOAT_VECTOR
    if not sparse and int(field["params"]["dim"]) != query_codes.dim:
        raise ValueError(f"query code dim {query_codes.dim} != the collection's vector dim {int(field['params']['dim'])}")
    params = {"metric_type": "IP", "params": {"drop_ratio_search": 0.0} if sparse else {}}
    scores = np.full((len(query_codes), top_k), -np.inf, dtype=np.float32)
    ids = np.full((len(query_codes), top_k), -1, dtype=np.int64)
    for start, stop in _batches(len(query_codes), _QUERY_BATCH):
        data = _milvus_vectors(query_codes[start:stop], sparse)
        results = _guarded("milvus", where, credential, lambda data=data: client.search(
            collection, data=data, anns_field=VECTOR_NAME, limit=top_k, search_params=params, output_fields=[ID_FIELD]))
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
_OPENERS: dict[str, Callable[[str, _Credential | None, str | os.PathLike[str] | None], Any]] = {
    "milvus": _open_milvus, "qdrant": _open_qdrant}
_NAMES = {"milvus": "Milvus", "qdrant": "Qdrant"}
_RESERVED_KEYS: dict[str, tuple[str, ...]] = {"milvus": (ID_FIELD, VECTOR_NAME), "qdrant": ()}
