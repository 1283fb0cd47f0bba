"""Clients' errors made safe and clear: a refused or missing credential raises ``CredentialError``, an
unreachable server ``ServerUnreachableError``, and an error whose text shows the credential is re-raised
without it. Clients adaptemb opened are remembered with their server and credential, so that errors of later
calls (``search_*``) name the server."""

from __future__ import annotations

import json
import ssl
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from adaptemb.errors import AdaptembError
from adaptemb.vectordb.common import (
    DEFAULT_KEY_ENV,
    KEY_WORD,
    NAMES,
    CredentialError,
    ServerUnreachableError,
    VectorDBError,
    with_article,
)
from adaptemb.vectordb.credentials import Credential

_T = TypeVar("_T")


_CLIENT_CONTEXT: weakref.WeakKeyDictionary[Any, tuple[str, str, Credential | None]] = weakref.WeakKeyDictionary()
"""Clients opened by ``qdrant_client`` / ``milvus_client`` on a server: (database, location, credential),
so that ``search_*`` errors name the server and never show the credential."""


def remember(client: Any, to: str, location: str, credential: Credential | None) -> Any:
    try:
        _CLIENT_CONTEXT[client] = (to, location, credential)
    except TypeError:  # not weak-referenceable: its errors are translated without the context
        pass
    return client


GIVEN = "a client given"


def _server(to: str, location: str) -> str:
    """``the Qdrant server at URL`` (``the Qdrant server of a client given`` when adaptemb did not open it)."""
    return f"the {NAMES[to]} server {'of' if location == GIVEN else 'at'} {location}"


def context_of(client: Any, to: str) -> tuple[str, str, Credential | None]:
    try:
        return _CLIENT_CONTEXT.get(client) or (to, GIVEN, None)
    except TypeError:
        return to, GIVEN, None


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


def _refused(to: str, location: str, credential: Credential | None, why: str, forbidden: bool) -> CredentialError:
    word, default = KEY_WORD[to], DEFAULT_KEY_ENV[to]
    if credential is None and location == GIVEN:  # built elsewhere: whether it holds a credential is unknown
        return CredentialError(f"{_server(to, location)} refused its request ({why}): the client holds a wrong "
                               f"{word}, one without this permission, or none")
    if credential is None:
        form = " (an API key, or user:password)" if to == "milvus" else ""
        return CredentialError(f"{_server(to, location)} wants {with_article(word)}{form} and none was sent ({why}): "
                               f"set ${default}, or name the variable that holds it with --api-key-env "
                               "(api_key_env= in Python)")
    if forbidden:
        return CredentialError(f"{_server(to, location)} accepted no request with the "
                               f"{credential.describe()} ({why}): the {word} lacks the permission this needs "
                               "(a read-only key?), or is not valid for this server")
    return CredentialError(f"{_server(to, location)} refused the {credential.describe()} ({why}): "
                           f"check the {word}, or name another variable with --api-key-env (api_key_env= in Python)")


def _translate(error: BaseException, to: str, location: str, credential: Credential | None) -> BaseException | None:
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


def guarded(to: str, location: str, credential: Credential | None, action: Callable[[], _T]) -> _T:
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

