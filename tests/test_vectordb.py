"""Codes into Qdrant (local mode, no server): the database returns what adaptemb's own search returns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import adaptemb
from adaptemb.cli import app

pytest.importorskip("qdrant_client")
from adaptemb.vectordb import export_codes, qdrant_client, search_qdrant

DOCS, QUERIES = 600, 25  # Qdrant's local mode scores by brute force in Python: keep it small


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((DOCS + QUERIES, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x[:DOCS], x[DOCS:]


def fitted(method: str, docs: np.ndarray) -> adaptemb.Compressor:
    return adaptemb.fit(docs, method, **adaptemb.get_registry().get(method).test_params)


def test_csr_search_in_qdrant_matches_the_index(data: tuple[np.ndarray, np.ndarray]) -> None:
    docs, queries = data
    csr = fitted("csr", docs)
    doc_codes, query_codes = csr.encode(docs), csr.encode(queries)  # sparse queries: Qdrant's dot product
    scores, ids = search_qdrant(export_codes(doc_codes), "adaptemb", query_codes, 10)
    expected_scores, expected_ids = csr.index(doc_codes).search(query_codes, 10)
    assert (ids == expected_ids).all(axis=1).mean() >= 0.99
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("method", ["svd", "mrl", "binary", "bsa"])
def test_top_scores_match_the_codes_own_similarity(method: str, data: tuple[np.ndarray, np.ndarray]) -> None:
    docs, queries = data
    compressor = fitted(method, docs)
    doc_codes, query_codes = compressor.encode(docs), compressor.encode(queries)
    scores, _ = search_qdrant(export_codes(doc_codes), "adaptemb", query_codes, 10)
    if method == "binary":  # ±1 vectors: dot = d − 2·Hamming
        exact = query_codes.to_dense() @ doc_codes.to_dense().T
    elif method == "bsa":  # ones on the active features: dot = overlap count
        exact = (query_codes.to_csr() @ doc_codes.to_csr().T).toarray()
    else:
        exact = query_codes.similarity(doc_codes)
    expected = -np.sort(-exact, axis=1)[:, :10]  # ties make ids ambiguous; the scores are not
    np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-4)


def test_int8_codes_are_stored_as_shifted_uint8(data: tuple[np.ndarray, np.ndarray]) -> None:
    codes = fitted("int8", data[0]).encode(data[0][:5])
    client = export_codes(codes)
    stored = client.retrieve("adaptemb", ids=[3], with_vectors=True)[0].vector["codes"]
    np.testing.assert_array_equal(np.asarray(stored), codes.codes[3].astype(np.int16) + 128)


def test_local_folder_ids_payload_and_recreate(data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    codes = fitted("svd", data[0]).encode(data[0][:20], k=4)
    folder = str(tmp_path / "qdrant")
    client = export_codes(codes, location=folder, ids=np.arange(100, 120), payload=[{"row": i} for i in range(20)])
    point = client.retrieve("adaptemb", ids=[107], with_payload=True)[0]
    assert point.payload == {"row": 7}
    with pytest.raises(ValueError, match="already exists; pass recreate=True"):
        export_codes(codes, location=client)
    assert export_codes(codes, location=client, recreate=True).count("adaptemb").count == 20
    client.close()
    assert qdrant_client(folder).count("adaptemb").count == 20  # persisted in the folder


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"to": "pinecone"}, "unknown vector database 'pinecone'"), ({"ids": np.arange(3)}, "ids must be 20 non-negative"),
     ({"payload": [{}]}, "one dict per row")],
)
def test_bad_exports_are_refused(kwargs: dict, message: str, data: tuple[np.ndarray, np.ndarray]) -> None:
    codes = fitted("svd", data[0]).encode(data[0][:20])
    with pytest.raises(ValueError, match=message):
        export_codes(codes, **kwargs)


def test_cli_exports_encoded_shards(data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    np.save(tmp_path / "docs.npy", data[0])
    model = fitted("csr", data[0]).save(tmp_path / "csr.safetensors")
    runner = CliRunner()
    assert runner.invoke(app, ["encode", "-i", str(tmp_path / "docs.npy"), "--compressor", str(model),
                               "-o", str(tmp_path / "codes"), "--shard-rows", "250"]).exit_code == 0
    result = runner.invoke(app, ["export-codes", "--codes", str(tmp_path / "codes"), "--location", str(tmp_path / "db")])
    assert result.exit_code == 0 and f"wrote {DOCS} sparse codes" in result.output
    assert qdrant_client(str(tmp_path / "db")).count("adaptemb").count == DOCS
