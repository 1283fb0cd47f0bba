"""Credentials for remote vector stores: the Qdrant API key and the Milvus token come from the environment
(or a ``SecretStr`` in Python), reach the server, and never show in output, logs, reprs or errors.

Qdrant is a local stand-in server (``http.server`` on 127.0.0.1, a random port, plain or TLS) that answers
the REST calls qdrant-client makes for export / count / search and checks the ``api-key`` header on every
one. Milvus is a gRPC stand-in (pymilvus' own service stubs) that checks the ``authorization`` metadata
(base64 of the token) on every call, plus a test double of the client class for what is sent."""

from __future__ import annotations

import base64
import logging
import re
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from credential_stubs import (
    KEY,
    TOKEN,
    QdrantStub,
    checked_headers,
    clean_environment,  # noqa: F401 - an autouse fixture: it applies where imported
    error_text,
    needs_qdrant,
    never_shows,
    rows,
    runner,
    serve,
)
from pydantic import SecretStr

from adaptemb.cli import app
from adaptemb.serialization import save_codes
from adaptemb.vectordb import (
    CodesExport,
    CredentialError,
    InsecureTransportWarning,
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

# qdrant-client checks the server version from a background thread, which may run after a test's stub is gone
pytestmark = pytest.mark.filterwarnings("ignore:Failed to obtain server version:UserWarning")


@pytest.fixture
def qdrant() -> Iterator[QdrantStub]:
    yield from serve(QdrantStub(KEY))


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
                                   "(float32 vector of 4, dot product; API key from $QDRANT_API_KEY)")
    checked_headers(qdrant, KEY)
    named = runner.invoke(app, ["export-codes", "--codes", str(codes_file), "--location", qdrant.url, "--recreate",
                                "--api-key-env", "TEAM_QDRANT_KEY"], env={"TEAM_QDRANT_KEY": KEY, "COLUMNS": "200"})
    assert named.exit_code == 0 and "API key from $TEAM_QDRANT_KEY)" in named.output
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


