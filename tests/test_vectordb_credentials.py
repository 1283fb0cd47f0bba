"""Credentials for remote vector stores: the Qdrant API key and the Milvus token come from the environment
(or a ``SecretStr`` in Python), reach the server, and never show in output, logs, reprs or errors.

Qdrant is a local stand-in server (``http.server`` on 127.0.0.1, a random port, plain or TLS) that answers
the REST calls qdrant-client makes for export / count / search and checks the ``api-key`` header on every
one. Milvus is a gRPC stand-in (pymilvus' own service stubs) that checks the ``authorization`` metadata
(base64 of the token) on every call, plus a test double of the client class for what is sent."""

from __future__ import annotations

import base64
import datetime
import importlib.util
import ipaddress
import json
import logging
import re
import threading
import traceback
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from adaptemb.cli import app
from adaptemb.codes import DenseCodes
from adaptemb.serialization import save_codes
from adaptemb.vectordb import (
    CodesExport,
    CredentialError,
    InsecureTransportWarning,
    ServerUnreachableError,
    VectorDBError,
    credentials,
    export_codes,
    guard,
    milvus_client,
    qdrant_client,
    search_qdrant,
)
from adaptemb.vectordb import milvus as milvus_store
from adaptemb.vectordb import qdrant as qdrant_store

needs_qdrant = pytest.mark.skipif(importlib.util.find_spec("qdrant_client") is None, reason="needs qdrant-client")
needs_milvus = pytest.mark.skipif(importlib.util.find_spec("pymilvus") is None, reason="needs pymilvus")
# qdrant-client checks the server version from a background thread, which may run after a test's stub is gone
pytestmark = pytest.mark.filterwarnings("ignore:Failed to obtain server version:UserWarning")
KEY = "qk-3f9a1c7e-never-print-me"
TOKEN = "svc_user:pw-8d2b7c-never-print-me"
runner = CliRunner()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No credential of the machine running the tests leaks in; a test sets what it needs."""
    for name in ("QDRANT_API_KEY", "MILVUS_TOKEN", "SSL_CERT_FILE", "SSL_CERT_DIR"):
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


@pytest.fixture
def qdrant() -> Iterator[QdrantStub]:
    yield from serve(QdrantStub(KEY))


def checked_headers(stub: QdrantStub, key: str) -> None:
    """Every request but the open version check carried the key."""
    calls = [(method, path, sent) for method, path, sent in stub.seen if path != "/"]
    assert calls and all(sent == key for _, _, sent in calls), calls


# -- Qdrant: where the key comes from, and that it arrives -------------------------------------------


@needs_qdrant
def test_key_from_qdrant_api_key_reaches_the_server(qdrant: QdrantStub, monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("QDRANT_API_KEY", KEY)
    caplog.set_level(logging.DEBUG)
    codes = rows()
    result = export_codes(codes, location=qdrant.url)
    assert result.credentials == "API key from $QDRANT_API_KEY"
    assert str(result) == (f"wrote 6 dense codes into qdrant collection 'adaptemb' at {qdrant.url} "
                           "(float32 vector of 4, dot product; API key from $QDRANT_API_KEY)")
    assert [p for _, p, _ in qdrant.seen if p != "/"] == ["/collections/adaptemb/exists", "/collections/adaptemb",
                                                          "/collections/adaptemb/points"]
    checked_headers(qdrant, KEY)
    client = qdrant_client(qdrant.url)  # the same variable, for the client helper
    assert client.count("adaptemb").count == 6
    scores, ids = search_qdrant(client, "adaptemb", codes[:2], 3)
    exact = codes[:2].similarity(codes)
    np.testing.assert_array_equal(ids[:, 0], exact.argmax(axis=1))
    np.testing.assert_allclose(scores[:, 0], exact.max(axis=1), rtol=1e-5)
    client.close()
    checked_headers(qdrant, KEY)
    never_shows(KEY, str(result), repr(result), caplog.text)


@needs_qdrant
@pytest.mark.parametrize("how", ["api_key_env", "secret", "str"])
def test_key_from_a_named_variable_or_given_in_python(how: str, qdrant: QdrantStub,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QDRANT_API_KEY", "the-default-variable-is-not-used")
    monkeypatch.setenv("PROD_QDRANT_KEY", KEY)
    given = {"api_key_env": {"api_key_env": "PROD_QDRANT_KEY"}, "secret": {"api_key": SecretStr(KEY)},
             "str": {"api_key": KEY}}[how]
    result = export_codes(rows(), location=qdrant.url, **given)
    assert result.credentials == ("API key from $PROD_QDRANT_KEY" if how == "api_key_env"
                                  else "API key from the api_key given")
    checked_headers(qdrant, KEY)
    never_shows(KEY, str(result), repr(result))


@needs_qdrant
def test_no_key_configured_sends_none(qdrant: QdrantStub) -> None:
    qdrant.key = None  # a server without authentication
    assert export_codes(rows(), location=qdrant.url).credentials == ""
    assert all(sent is None for _, _, sent in qdrant.seen)


# -- Qdrant: refused, missing and echoed keys --------------------------------------------------------


@needs_qdrant
def test_wrong_key_is_a_clear_error_without_the_key(qdrant: QdrantStub, monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    wrong = "qk-wrong-0000-never-print-me"
    monkeypatch.setenv("QDRANT_API_KEY", wrong)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(CredentialError) as refused:
        export_codes(rows(), location=qdrant.url)
    assert str(refused.value) == (
        f"the Qdrant server at {qdrant.url} refused the API key from $QDRANT_API_KEY (HTTP 401 Unauthorized): "
        "check the API key, or name another variable with --api-key-env (api_key_env= in Python)")
    assert isinstance(refused.value, PermissionError) and refused.value.__context__ is None
    assert wrong in [sent for _, _, sent in qdrant.seen]  # it was sent, and is shown nowhere
    never_shows(wrong, error_text(refused.value), caplog.text)


@needs_qdrant
def test_missing_key_says_where_to_put_it(qdrant: QdrantStub) -> None:
    with pytest.raises(CredentialError) as refused:
        export_codes(rows(), location=qdrant.url)
    assert str(refused.value) == (
        f"the Qdrant server at {qdrant.url} wants an API key and none was sent (HTTP 401 Unauthorized): set "
        "$QDRANT_API_KEY, or name the variable that holds it with --api-key-env (api_key_env= in Python)")


@needs_qdrant
def test_read_only_key_cannot_write(qdrant: QdrantStub, monkeypatch: pytest.MonkeyPatch) -> None:
    qdrant.read_only_key = "qk-read-only-never-print-me"
    monkeypatch.setenv("QDRANT_API_KEY", qdrant.read_only_key)
    with pytest.raises(CredentialError) as forbidden:
        export_codes(rows(), location=qdrant.url)
    assert str(forbidden.value) == (
        f"the Qdrant server at {qdrant.url} accepted no request with the API key from $QDRANT_API_KEY (HTTP 403 "
        "Forbidden): the API key lacks the permission this needs (a read-only key?), or is not valid for this server")
    never_shows(qdrant.read_only_key, error_text(forbidden.value))


@needs_qdrant
def test_a_client_opened_elsewhere_gets_a_clear_message_too(qdrant: QdrantStub) -> None:
    from qdrant_client import QdrantClient

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # qdrant-client's own: "Api key is used with an insecure connection."
        client = QdrantClient(url=qdrant.url, api_key="wrong-" + KEY)  # not through adaptemb: no credential known
    with pytest.raises(CredentialError) as refused, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        export_codes(rows(), location=client)
    assert str(refused.value) == ("the Qdrant server of a client given refused its request (HTTP 401 Unauthorized): "
                                  "the client holds a wrong API key, one without this permission, or none")
    never_shows(KEY, error_text(refused.value))
    client.close()


@needs_qdrant
def test_an_error_that_echoes_the_key_is_raised_without_it(qdrant: QdrantStub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QDRANT_API_KEY", KEY)
    qdrant.echo_key = True
    with pytest.raises(VectorDBError) as failed:
        export_codes(rows(), location=qdrant.url)
    assert str(failed.value) == (f"the Qdrant server at {qdrant.url} failed (HTTP 500 Internal Server Error: "
                                 "upstream rejected headers api-key=**********)")
    never_shows(KEY, error_text(failed.value))


@needs_qdrant
def test_search_on_a_client_whose_key_is_revoked(qdrant: QdrantStub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QDRANT_API_KEY", KEY)
    export_codes(rows(), location=qdrant.url)
    client = qdrant_client(qdrant.url)
    qdrant.key = "rotated"
    with pytest.raises(CredentialError, match=r"refused the API key from \$QDRANT_API_KEY \(HTTP 401") as refused:
        search_qdrant(client, "adaptemb", rows()[:1], 3)
    never_shows(KEY, error_text(refused.value))
    client.close()


# -- the command line --------------------------------------------------------------------------------


@pytest.fixture
def codes_file(tmp_path: Path) -> Path:
    return save_codes(rows(), tmp_path / "codes.npz")


@needs_qdrant
def test_cli_takes_the_key_from_the_environment_and_never_prints_it(qdrant: QdrantStub, codes_file: Path) -> None:
    env = {"QDRANT_API_KEY": KEY, "COLUMNS": "200"}
    done = runner.invoke(app, ["export-codes", "--codes", str(codes_file), "--location", qdrant.url], env=env)
    assert done.exit_code == 0, done.output
    assert done.output.strip() == (f"wrote 6 dense codes into qdrant collection 'adaptemb' at {qdrant.url} "
                                   "(API key from $QDRANT_API_KEY)")
    checked_headers(qdrant, KEY)
    named = runner.invoke(app, ["export-codes", "--codes", str(codes_file), "--location", qdrant.url, "--recreate",
                                "--api-key-env", "TEAM_QDRANT_KEY"], env={"TEAM_QDRANT_KEY": KEY, "COLUMNS": "200"})
    assert named.exit_code == 0 and "(API key from $TEAM_QDRANT_KEY)" in named.output
    wrong = runner.invoke(app, ["export-codes", "--codes", str(codes_file), "--location", qdrant.url, "--recreate"],
                          env={"QDRANT_API_KEY": "not-" + KEY, "COLUMNS": "200"})
    assert wrong.exit_code == 2
    assert wrong.output.strip() == (
        f"error: the Qdrant server at {qdrant.url} refused the API key from $QDRANT_API_KEY (HTTP 401 "
        "Unauthorized): check the API key, or name another variable with --api-key-env (api_key_env= in Python)")
    debug = runner.invoke(app, ["--debug", "export-codes", "--codes", str(codes_file), "--location", qdrant.url,
                                "--recreate"], env={"QDRANT_API_KEY": "not-" + KEY})
    assert isinstance(debug.exception, CredentialError)  # --debug: the traceback, and still no key in it
    for result in (done, named, wrong, debug):
        never_shows(KEY, result.output, "".join(traceback.format_exception(result.exception))
                    if result.exception and not isinstance(result.exception, SystemExit) else "")


def test_cli_has_no_option_that_takes_a_key(codes_file: Path) -> None:
    help_text = runner.invoke(app, ["export-codes", "--help"], env={"COLUMNS": "200"}).output
    assert "QDRANT_API_KEY" in help_text and "MILVUS_TOKEN" in help_text and "--api-key-env" in help_text
    assert "--ca-cert" in help_text and "never the key" in help_text
    refused = runner.invoke(app, ["export-codes", "--codes", str(codes_file), "--location", "http://127.0.0.1:9",
                                  "--api-key", KEY], env={"COLUMNS": "200"})
    assert refused.exit_code == 2 and "No such option: --api-key" in refused.output
    never_shows(KEY, refused.output)


def test_cli_named_variable_unset_or_the_key_itself(codes_file: Path) -> None:
    unset = runner.invoke(app, ["export-codes", "--codes", str(codes_file), "--location", "https://db.example.com",
                                "--api-key-env", "NO_SUCH_VARIABLE_SET"], env={"COLUMNS": "200"})
    assert unset.exit_code == 2
    assert unset.output.strip() == ("error: the environment variable $NO_SUCH_VARIABLE_SET (named by --api-key-env / "
                                    "api_key_env) is not set or is empty: it should hold the Qdrant API key")
    for mistaken in (KEY, "a3f9c2e7b1d04f5a9e8c7b6a5d4c3b2a"):  # the key itself passed where the name belongs
        key_given = runner.invoke(app, ["export-codes", "--codes", str(codes_file), "--location",
                                        "https://db.example.com", "--api-key-env", mistaken], env={"COLUMNS": "200"})
        assert key_given.exit_code == 2 and "error: " in key_given.output
        never_shows(mistaken, key_given.output)
    assert "not a variable name (not shown)" in runner.invoke(app, [
        "export-codes", "--codes", str(codes_file), "--location", "https://db.example.com", "--api-key-env", KEY]).output
    hex_like = runner.invoke(app, ["export-codes", "--codes", str(codes_file), "--location", "https://db.example.com",
                                   "--api-key-env", "a3f9c2e7b1d04f5a9e8c7b6a5d4c3b2a"], env={"COLUMNS": "200"})
    assert hex_like.output.strip() == (
        "error: the environment variable named by --api-key-env / api_key_env (its name is not shown: it is not an "
        "upper-case variable name; pass the name of a variable that holds the API key, not the API key itself) is not "
        "set or is empty: it should hold the Qdrant API key")


# -- where a key may go ------------------------------------------------------------------------------


class RecordingClient:
    """A test double of a database client class: records how it was built, fails on first use."""

    built: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, **kwargs: Any) -> None:
        RecordingClient.built.append(kwargs)

    def __getattr__(self, name: str) -> Any:
        import httpx

        def unreachable(*args: Any, **kwargs: Any) -> Any:
            raise httpx.ConnectError("[Errno 111] Connection refused")

        return unreachable

    def close(self) -> None:
        pass


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    RecordingClient.built = []
    monkeypatch.setattr(qdrant_store, "_require_qdrant", lambda: RecordingClient)
    monkeypatch.setattr(milvus_store, "_require_milvus", lambda lite: RecordingClient)
    return RecordingClient.built


def test_plain_http_to_another_machine_warns(recorded: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch,
                                             codes_file: Path) -> None:
    monkeypatch.setenv("QDRANT_API_KEY", KEY)
    monkeypatch.setenv("MILVUS_TOKEN", TOKEN)
    with pytest.warns(InsecureTransportWarning) as warned:
        qdrant_client("http://db.internal:6333")
    assert str(warned[0].message) == ("the Qdrant API key from $QDRANT_API_KEY is sent unencrypted to db.internal "
                                      "(http://): anyone on the network path can read it; use an https:// location")
    with pytest.warns(InsecureTransportWarning, match="Milvus token from \\$MILVUS_TOKEN is sent unencrypted"):
        milvus_client("tcp://10.0.0.7:19530")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none for this machine, for https, or with no key
        for location in ("http://localhost:6333", "http://127.0.0.1:6333", "http://[::1]:6333", "https://db.example.com"):
            qdrant_client(location)
    assert recorded[0] == {"url": "http://db.internal:6333", "api_key": KEY}
    assert recorded[1] == {"uri": "tcp://10.0.0.7:19530", "token": TOKEN}
    cli = runner.invoke(app, ["export-codes", "--codes", str(codes_file), "--location", "http://db.internal:6333"],
                        env={"COLUMNS": "200"})
    assert cli.exit_code == 2
    assert cli.output.splitlines() == [
        ("warning: the Qdrant API key from $QDRANT_API_KEY is sent unencrypted to db.internal (http://): anyone on "
         "the network path can read it; use an https:// location"),
        ("error: could not reach the Qdrant server at http://db.internal:6333 (ConnectError: [Errno 111] Connection "
         "refused)")]
    never_shows(KEY, cli.output)


def test_milvus_token_goes_to_the_client_as_token(recorded: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """pymilvus reads no token variable itself: adaptemb reads MILVUS_TOKEN (an API key, or user:password,
    which pymilvus sends as it is) and passes it as ``MilvusClient(uri=..., token=...)``."""
    monkeypatch.setenv("MILVUS_TOKEN", TOKEN)
    client = milvus_client("https://in01-abc.zillizcloud.com:19530")
    assert recorded[-1] == {"uri": "https://in01-abc.zillizcloud.com:19530", "token": TOKEN}
    assert guard.context_of(client, "milvus")[2].describe() == "token from $MILVUS_TOKEN"
    milvus_client("https://in01-abc.zillizcloud.com:19530", api_key=SecretStr("db_admin:other"))
    assert recorded[-1]["token"] == "db_admin:other"
    monkeypatch.delenv("MILVUS_TOKEN")
    milvus_client("http://localhost:19530")
    assert recorded[-1] == {"uri": "http://localhost:19530"}  # none set: none sent


@pytest.mark.parametrize(("to", "location"), [("qdrant", "https://admin:{secret}@db.example.com:6333"),
                                              ("milvus", "https://root:{secret}@db.example.com:19530")])
def test_a_url_with_credentials_in_it_is_refused_without_showing_them(to: str, location: str) -> None:
    with pytest.raises(ValueError, match="carries credentials before '@' \\(not shown\\)") as refused:
        export_codes(rows(), to=to, location=location.format(secret=KEY))
    never_shows(KEY, str(refused.value))
    assert "db.example.com" in str(refused.value)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"location": "qdrant-data/", "api_key": KEY}, ValueError,
     "an API key is only sent to a server URL; 'qdrant-data/' is not one"),
    ({"location": "qdrant-data/", "api_key_env": "X"}, ValueError, "is not one"),
    ({"location": "https://db.example.com", "api_key": KEY, "api_key_env": "X"}, ValueError, "not both"),
    ({"location": "https://db.example.com", "api_key": " "}, ValueError, "the API key given as api_key is empty"),
    ({"location": "https://db.example.com", "api_key": 42}, TypeError, "SecretStr or a str"),
    ({"location": "http://db.example.com", "ca_cert": "ca.pem"}, ValueError, "verifies an https:// server"),
    ({"location": "https://db.example.com", "ca_cert": "missing.pem"}, FileNotFoundError, "CA bundle"),
])
def test_bad_credential_settings_are_refused_before_anything_opens(kwargs: dict, error: type, message: str,
                                                                  recorded: list[dict[str, Any]], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error, match=re.escape(message)) as refused:
        export_codes(rows(), **kwargs)
    never_shows(KEY, str(refused.value))
    assert recorded == [] and not (tmp_path / "qdrant-data").exists()


@needs_qdrant
def test_the_default_variable_is_ignored_for_local_databases(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("QDRANT_API_KEY", KEY)
    assert export_codes(rows(), location=str(tmp_path / "q")).credentials == ""
    client = qdrant_client(":memory:")
    with pytest.raises(ValueError, match="a client given brings its own credentials"):
        export_codes(rows(), location=client, api_key=KEY)
    assert export_codes(rows(), location=client).location == "a client given"


def test_the_credential_is_masked_wherever_it_is_held(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MILVUS_TOKEN", TOKEN)
    credential = credentials.resolve_credential("milvus", "https://db.example.com", None, None)
    assert repr(credential) == str(credential) == "<token from $MILVUS_TOKEN: **********>"
    assert repr(credential.secret) == "SecretStr('**********')"
    assert credential.scrub(f"a {TOKEN} b {base64.b64encode(TOKEN.encode()).decode()} c") == "a ********** b ********** c"
    export = CodesExport("milvus", "https://db.example.com", "c", 1, "dense", "FLOAT_VECTOR", credential.describe())
    never_shows(TOKEN, repr(export), str(export), repr(credential), str(credential))


# -- TLS: certificates are verified ------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A private CA and a server certificate it signed for 127.0.0.1: (CA bundle, certificate, key)."""
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder = tmp_path_factory.mktemp("tls")
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "adaptemb test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    server = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
              .issuer_name(ca_name).public_key(server_key.public_key()).serial_number(2)
              .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
              .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
              .sign(ca_key, hashes.SHA256()))
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    return paths


@pytest.fixture
def qdrant_tls(certificates: tuple[Path, Path, Path]) -> Iterator[QdrantStub]:
    import ssl

    stub = QdrantStub(KEY)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificates[1], certificates[2])
    stub.socket = context.wrap_socket(stub.socket, server_side=True)
    yield from serve(stub)


@needs_qdrant
def test_https_verifies_the_certificate(qdrant_tls: QdrantStub, certificates: tuple[Path, Path, Path],
                                        monkeypatch: pytest.MonkeyPatch, codes_file: Path) -> None:
    monkeypatch.setenv("QDRANT_API_KEY", KEY)
    assert qdrant_tls.url.startswith("https://127.0.0.1:")
    with pytest.raises(ServerUnreachableError) as unverified:  # signed by a CA nobody trusts: refused
        export_codes(rows(), location=qdrant_tls.url)
    assert "CERTIFICATE_VERIFY_FAILED" in str(unverified.value)
    assert str(unverified.value).endswith("its TLS certificate was not verified against the trusted CAs: give the CA "
                                          "bundle that signed it with --ca-cert PATH (ca_cert= in Python)")
    assert not [call for call in qdrant_tls.seen if call[1] != "/"]  # nothing reached it, the key included
    ca = certificates[0]
    assert export_codes(rows(), location=qdrant_tls.url, ca_cert=ca).rows == 6
    checked_headers(qdrant_tls, KEY)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))  # httpx's own variable works as well
    assert export_codes(rows(), location=qdrant_tls.url, recreate=True).rows == 6
    monkeypatch.delenv("SSL_CERT_FILE")
    cli = runner.invoke(app, ["export-codes", "--codes", str(codes_file), "--location", qdrant_tls.url, "--recreate",
                              "--ca-cert", str(ca)], env={"COLUMNS": "200"})
    assert cli.exit_code == 0 and "(API key from $QDRANT_API_KEY)" in cli.output
    never_shows(KEY, error_text(unverified.value), cli.output)


# -- Milvus: a gRPC stand-in that checks the token ---------------------------------------------------


@pytest.fixture
def milvus_server() -> Iterator[tuple[str, list[Any]]]:
    yield from _milvus_server(tls=None)


def _milvus_server(tls: tuple[Path, Path, Path] | None) -> Iterator[tuple[str, list[Any]]]:
    """A Milvus gRPC server that answers Connect and DescribeCollection (a missing collection) to callers
    whose ``authorization`` metadata is base64(TOKEN), and UNAUTHENTICATED to others, as Milvus does."""
    if importlib.util.find_spec("pymilvus") is None:
        pytest.skip("needs pymilvus")
    from concurrent import futures

    import grpc
    from pymilvus.grpc_gen import common_pb2, milvus_pb2, milvus_pb2_grpc

    seen: list[Any] = []
    expected = base64.b64encode(TOKEN.encode()).decode()

    class Authentication(grpc.ServerInterceptor):
        def intercept_service(self, continuation: Any, details: Any) -> Any:
            sent = dict(details.invocation_metadata).get("authorization")
            seen.append((details.method.rsplit("/", 1)[-1], sent))
            if sent == expected:
                return continuation(details)

            def deny(request: Any, context: Any) -> Any:
                context.abort(grpc.StatusCode.UNAUTHENTICATED,
                              "auth check failure, please check username, password or API key are correct")

            return grpc.unary_unary_rpc_method_handler(deny)

    class Service(milvus_pb2_grpc.MilvusServiceServicer):
        def Connect(self, request: Any, context: Any) -> Any:  # gRPC's method name
            return milvus_pb2.ConnectResponse(status=common_pb2.Status(code=0), identifier=7)

        def DescribeCollection(self, request: Any, context: Any) -> Any:
            return milvus_pb2.DescribeCollectionResponse(status=common_pb2.Status(
                code=100, error_code=common_pb2.CollectionNotExists, reason=f"collection not found[{request.collection_name}]"))

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), interceptors=[Authentication()])
    milvus_pb2_grpc.add_MilvusServiceServicer_to_server(Service(), server)
    if tls is None:
        port, scheme = server.add_insecure_port("127.0.0.1:0"), "http"
    else:
        credentials = grpc.ssl_server_credentials([(tls[2].read_bytes(), tls[1].read_bytes())])
        port, scheme = server.add_secure_port("127.0.0.1:0", credentials), "https"
    server.start()
    try:
        yield f"{scheme}://127.0.0.1:{port}", seen
    finally:
        server.stop(grace=None)


@pytest.fixture
def milvus_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every log record, pymilvus' included (its logger does not propagate: it writes to stderr itself)."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="pymilvus")
    pymilvus_logger = logging.getLogger("pymilvus")
    pymilvus_logger.addHandler(caplog.handler)
    yield caplog
    pymilvus_logger.removeHandler(caplog.handler)


@needs_milvus
def test_milvus_token_reaches_the_server(milvus_server: tuple[str, list[Any]], monkeypatch: pytest.MonkeyPatch,
                                         milvus_logs: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture) -> None:
    url, seen = milvus_server
    monkeypatch.setenv("MILVUS_TOKEN", TOKEN)  # user:password form, as pymilvus takes it
    client = milvus_client(url)
    assert client.has_collection("adaptemb") is False
    client.close()
    assert seen and all(sent == base64.b64encode(TOKEN.encode()).decode() for _, sent in seen), seen
    assert {method for method, _ in seen} == {"Connect", "DescribeCollection"}
    never_shows(TOKEN, milvus_logs.text, *capfd.readouterr())


@needs_milvus
def test_milvus_wrong_or_missing_token(milvus_server: tuple[str, list[Any]], monkeypatch: pytest.MonkeyPatch,
                                       milvus_logs: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture,
                                       codes_file: Path) -> None:
    url, _ = milvus_server
    wrong = "svc_user:pw-wrong-never-print-me"
    monkeypatch.setenv("OTHER_MILVUS_TOKEN", wrong)
    with pytest.raises(CredentialError) as refused:
        export_codes(rows(), to="milvus", location=url, api_key_env="OTHER_MILVUS_TOKEN")
    assert str(refused.value) == (
        f"the Milvus server at {url} refused the token from $OTHER_MILVUS_TOKEN (UNAUTHENTICATED: auth check failure, "
        "please check username, password or API key are correct): check the token, or name another variable with "
        "--api-key-env (api_key_env= in Python)")
    with pytest.raises(CredentialError) as missing:
        milvus_client(url)
    assert str(missing.value).startswith(f"the Milvus server at {url} wants a token (an API key, or user:password) "
                                         "and none was sent (UNAUTHENTICATED: ")
    assert str(missing.value).endswith("set $MILVUS_TOKEN, or name the variable that holds it with --api-key-env "
                                       "(api_key_env= in Python)")
    cli = runner.invoke(app, ["export-codes", "--codes", str(codes_file), "--to", "milvus", "--location", url],
                        env={"MILVUS_TOKEN": wrong, "COLUMNS": "200"})
    assert cli.exit_code == 2 and cli.output.startswith(f"error: the Milvus server at {url} refused the token from "
                                                        "$MILVUS_TOKEN (UNAUTHENTICATED: ")
    never_shows(wrong, error_text(refused.value), error_text(missing.value), cli.output, milvus_logs.text,
                *capfd.readouterr())


@needs_milvus
def test_milvus_https_verifies_the_certificate(certificates: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch,
                                               capfd: pytest.CaptureFixture) -> None:
    """Signed by a CA gRPC does not trust: no connection (pymilvus gives up after its 10 s connect timeout),
    nothing sent; with that CA as ca_cert: connected, and the token arrives."""
    monkeypatch.setenv("MILVUS_TOKEN", TOKEN)
    for url, seen in _milvus_server(tls=certificates):
        with pytest.raises(ServerUnreachableError) as unverified:
            milvus_client(url)
        assert str(unverified.value) == (
            f"could not reach the Milvus server at {url} (Fail connecting to server on 127.0.0.1:{url.rsplit(':', 1)[1]}, "
            "illegal connection params or server unavailable (code 2)); over https a certificate that does not verify fails the same way: give its CA bundle "
            "with --ca-cert PATH (ca_cert= in Python)")
        assert seen == []
        client = milvus_client(url, ca_cert=certificates[0])  # verified against the private CA: accepted
        assert client.has_collection("adaptemb") is False
        client.close()
        assert seen and all(sent == base64.b64encode(TOKEN.encode()).decode() for _, sent in seen)
    never_shows(TOKEN, error_text(unverified.value), *capfd.readouterr())
