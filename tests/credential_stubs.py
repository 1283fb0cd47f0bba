"""Stand-ins and helpers the vector-store credential tests share: a local Qdrant REST stand-in that checks the
``api-key`` header on every call, the secrets the tests use, and the check that a secret never shows."""

from __future__ import annotations

import base64
import importlib.util
import json
import re
import threading
import traceback
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from adaptemb.codes import DenseCodes

needs_qdrant = pytest.mark.skipif(importlib.util.find_spec("qdrant_client") is None, reason="needs qdrant-client")
needs_milvus = pytest.mark.skipif(importlib.util.find_spec("pymilvus") is None, reason="needs pymilvus")
KEY = "qk-3f9a1c7e-never-print-me"
TOKEN = "svc_user:pw-8d2b7c-never-print-me"
CREDENTIAL_VARIABLES = ("QDRANT_API_KEY", "MILVUS_TOKEN", "SSL_CERT_FILE", "SSL_CERT_DIR")
"""What the machine running the tests may set and a test must not see: each test sets what it needs."""
runner = CliRunner()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No credential of the machine running the tests leaks in (autouse where imported); a test sets what it needs."""
    for name in CREDENTIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def rows(n: int = 6, dim: int = 4) -> DenseCodes:
    return DenseCodes(np.random.default_rng(0).standard_normal((n, dim)).astype(np.float32))


def never_shows(secret: str, *texts: str) -> None:
    """Neither the secret nor its base64 form (gRPC's authorization header) nor a password part appears."""
    forms = {secret, base64.b64encode(secret.encode()).decode()}
    if ":" in secret:
        forms.add(secret.split(":", 1)[1])
    for text in texts:
        for form in forms:
            assert form not in text, f"the secret shows in: {text[:500]}"


def error_text(error: BaseException) -> str:
    """All a user or a log could see of an error: message, repr, the whole formatted traceback (with any
    chained error) and the chained errors themselves."""
    return "\n".join([str(error), repr(error), *traceback.format_exception(error),
                      repr(error.__cause__), repr(error.__context__)])


# -- a Qdrant stand-in -----------------------------------------------------------------------------------


class QdrantStub(ThreadingHTTPServer):
    """The REST endpoints qdrant-client calls for export_codes / count / search_qdrant (found by running the
    client against this stub and logging the paths): GET / (version, open as on Qdrant),
    GET /collections/{c}/exists, PUT and DELETE /collections/{c}, PUT /collections/{c}/points,
    POST /collections/{c}/points/count and /points/query. Every other request needs the ``api-key`` header
    equal to ``key`` (401 otherwise); ``echo_key`` makes it answer 500 with the header in the body, as a
    careless proxy might."""

    daemon_threads = True

    def __init__(self, key: str | None) -> None:
        super().__init__(("127.0.0.1", 0), QdrantHandler)
        self.key = key
        self.read_only_key: str | None = None
        self.echo_key = False
        self.seen: list[tuple[str, str, str | None]] = []
        self.collections: dict[str, dict[int, list[float]]] = {}

    @property
    def url(self) -> str:
        scheme = "https" if hasattr(self.socket, "context") else "http"
        return f"{scheme}://127.0.0.1:{self.server_port}"


class QdrantHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: QdrantStub

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def ok(self, result: Any) -> None:
        self.reply(200, {"result": result, "status": "ok", "time": 0.0})

    def handle_any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        path = self.path.split("?")[0]
        sent = self.headers.get("api-key")
        self.server.seen.append((self.command, path, sent))
        if path == "/":
            return self.reply(200, {"title": "qdrant - vector search engine", "version": "1.20.0"})
        if self.server.echo_key:
            return self.reply(500, {"status": {"error": f"upstream rejected headers api-key={sent}"}})
        if self.server.read_only_key is not None and sent == self.server.read_only_key:
            if self.command in ("PUT", "DELETE"):  # Qdrant's read-only keys: 403 on writes
                return self.reply(403, {"status": {"error": "Forbidden: Write access denied"}})
        elif self.server.key is not None and sent != self.server.key:
            return self.reply(401, {"status": {"error": "Must provide an API key or an Authorization bearer token"}})
        match = re.fullmatch(r"/collections/([^/]+)(/.*)?", path)
        if match is None:
            return self.reply(404, {"status": {"error": "not found"}})
        name, rest = match.group(1), match.group(2) or ""
        collections = self.server.collections
        if rest == "/exists":
            return self.ok({"exists": name in collections})
        if rest == "" and self.command == "PUT":
            collections[name] = {}
            return self.ok(True)
        if rest == "" and self.command == "DELETE":
            collections.pop(name, None)
            return self.ok(True)
        if rest == "/points" and self.command == "PUT":
            for point in body["points"]:
                collections[name][int(point["id"])] = point["vector"]["codes"]
            return self.ok({"operation_id": 0, "status": "completed"})
        if rest == "/points/count":
            return self.ok({"count": len(collections[name])})
        if rest == "/points/query":
            query = np.asarray(body["query"]["nearest"])
            scored = sorted(((float(query @ np.asarray(v)), i) for i, v in collections[name].items()), reverse=True)
            return self.ok({"points": [{"id": i, "version": 0, "score": s} for s, i in scored[: body["limit"]]]})
        return self.reply(404, {"status": {"error": "not found"}})

    do_GET = do_PUT = do_POST = do_DELETE = handle_any


def serve(server: ThreadingHTTPServer) -> Iterator[Any]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()

def checked_headers(stub: QdrantStub, key: str) -> None:
    """Every request but the open version check carried the key."""
    calls = [(method, path, sent) for method, path, sent in stub.seen if path != "/"]
    assert calls and all(sent == key for _, _, sent in calls), calls

