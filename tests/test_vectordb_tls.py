"""Credentials over TLS, and Milvus: an ``https`` server's certificate is verified (the public CAs, or a CA bundle
given); a Milvus gRPC stand-in (pymilvus' own service stubs) checks the ``authorization`` metadata (base64 of the
token) on every call. ``test_vectordb_credentials`` holds the Qdrant key's tests; ``credential_stubs`` the Qdrant
stand-in both use."""

from __future__ import annotations

import base64
import datetime
import importlib.util
import ipaddress
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from credential_stubs import (
    KEY,
    TOKEN,
    QdrantStub,
    checked_headers,
    clean_environment,  # noqa: F401 - an autouse fixture: it applies where imported
    error_text,
    needs_milvus,
    needs_qdrant,
    never_shows,
    rows,
    runner,
    serve,
)

from adaptemb.cli import app
from adaptemb.serialization import save_codes
from adaptemb.vectordb import (
    CredentialError,
    ServerUnreachableError,
    export_codes,
    milvus_client,
)

# qdrant-client checks the server version from a background thread, which may run after a test's stub is gone
pytestmark = pytest.mark.filterwarnings("ignore:Failed to obtain server version:UserWarning")


@pytest.fixture
def codes_file(tmp_path: Path) -> Path:
    return save_codes(rows(), tmp_path / "codes.npz")


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
    assert cli.exit_code == 0 and "API key from $QDRANT_API_KEY)" in cli.output
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
