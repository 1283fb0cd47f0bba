"""Codes into Qdrant (local mode) and Milvus (Milvus Lite), no server: the database returns what adaptemb's own
search returns."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner
from vectordb_support import in_memory, needs_milvus, needs_qdrant

import adaptemb
from adaptemb.cli import app
from adaptemb.codes import DenseCodes, ProjectedQueries
from adaptemb.testing import assert_top_k_matches
from adaptemb.vectordb import (
    MEMORY_REFUSED,
    export_codes,
    milvus_client,
    qdrant_client,
    release_milvus_lite,
    search_milvus,
    search_qdrant,
)

DOCS, QUERIES = 600, 25  # Qdrant's local mode scores by brute force in Python: keep it small


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((DOCS + QUERIES, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x[:DOCS], x[DOCS:]


def fitted(method: str, docs: np.ndarray) -> adaptemb.Compressor:
    return adaptemb.fit(docs, method, **adaptemb.get_registry().get(method).test_params)


@pytest.mark.slow
@needs_qdrant
def test_csr_search_in_qdrant_matches_the_index(data: tuple[np.ndarray, np.ndarray]) -> None:
    docs, queries = data
    csr = fitted("csr", docs)
    doc_codes, query_codes = csr.encode(docs), csr.encode(queries)  # sparse queries: Qdrant's dot product
    scores, ids = search_qdrant(in_memory(doc_codes), "adaptemb", query_codes, 10)
    expected_scores, _ = csr.index(doc_codes).search(query_codes, 10)
    assert_top_k_matches((scores, ids), csr.score(query_codes, doc_codes), 10, tol=1e-3)  # quantised values tie
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-3, atol=1e-3)


@needs_qdrant
@pytest.mark.parametrize("method", ["svd", "mrl", "binary", "bsa", "int8"])
def test_top_scores_match_the_codes_own_similarity(method: str, data: tuple[np.ndarray, np.ndarray]) -> None:
    docs, queries = data
    compressor = fitted(method, docs)
    doc_codes, query_codes = compressor.encode(docs), compressor.encode(queries)
    scores, _ = search_qdrant(in_memory(doc_codes), "adaptemb", query_codes, 10)
    if method == "binary":  # ±1 vectors: dot = d − 2·Hamming
        exact = query_codes.to_dense() @ doc_codes.to_dense().T
    elif method == "bsa":  # ones on the active features: dot = overlap count
        exact = (query_codes.to_csr() @ doc_codes.to_csr().T).toarray()
    else:
        exact = query_codes.similarity(doc_codes)
    expected = -np.sort(-exact, axis=1)[:, :10]  # ties make ids ambiguous; the scores are not
    np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@needs_qdrant
def test_bsa_cosine_queries_are_refused_and_dot_queries_rank_as_the_index(data: tuple[np.ndarray, np.ndarray],
                                                                          tmp_path: Path) -> None:
    """bsa's default scoring divides each document's score by its decoded norm, which a database does not hold: its
    projected queries are refused there (also after a save and load); with scoring='asymmetric_dot' they rank as
    bsa's own index does."""
    docs, queries = data
    params = adaptemb.get_registry().get("bsa").test_params
    cosine = adaptemb.fit(docs, "bsa", **params)
    asked = cosine.encode_queries(queries)
    assert asked.document_weights and asked[:3].document_weights
    saved = adaptemb.save_codes(asked, tmp_path / "queries.safetensors")
    assert adaptemb.load_codes(saved).document_weights
    assert ProjectedQueries.concat([asked[:2], asked[2:]]).document_weights
    client = in_memory(cosine.encode(docs))
    for given in (asked, adaptemb.load_codes(saved)):
        with pytest.raises(ValueError, match="divides each document's score by a weight of its own"):
            search_qdrant(client, "adaptemb", given, 10)
    dot = adaptemb.fit(docs, "bsa", **{**params, "scoring": "asymmetric_dot"})
    doc_codes, dot_queries = dot.encode(docs), dot.encode_queries(queries)
    assert not dot_queries.document_weights
    scores, ids = search_qdrant(in_memory(doc_codes), "adaptemb", dot_queries, 10)
    assert_top_k_matches((scores, ids), dot.score(dot_queries, doc_codes), 10, tol=1e-4)


@needs_qdrant
def test_int8_codes_are_stored_dequantised_or_as_shifted_uint8_when_compact(data: tuple[np.ndarray, np.ndarray]) -> None:
    codes = fitted("int8", data[0]).encode(data[0][:5])
    client = qdrant_client(":memory:")
    exact = export_codes(codes, location=client)
    assert exact.vector == "float32 vector of 32, dot product, int8 scalar quantisation in RAM (rescored)"
    stored = client.retrieve("adaptemb", ids=[3], with_vectors=True)[0].vector["codes"]
    np.testing.assert_allclose(np.asarray(stored), codes.to_dense()[3], rtol=1e-6)  # offset + scale * code
    assert export_codes(codes, location=client, recreate=True, compact=True).vector == "uint8 vector of 32, dot product"
    stored = client.retrieve("adaptemb", ids=[3], with_vectors=True)[0].vector["codes"]
    np.testing.assert_array_equal(np.asarray(stored), codes.codes[3].astype(np.int16) + 128)
    with pytest.raises(ValueError, match="compact=True applies to Qdrant"):
        export_codes(codes, to="milvus", location="never.db", compact=True)


@needs_qdrant
def test_local_folder_ids_payload_and_recreate(data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    codes = fitted("svd", data[0]).encode(data[0][:20], k=4)
    folder = str(tmp_path / "new" / "deeper" / "qdrant")  # missing folders are created
    result = export_codes(codes, location=folder, ids=np.arange(100, 120), payload=[{"row": i} for i in range(20)])
    assert str(result) == f"wrote 20 dense codes into qdrant collection 'adaptemb' at {folder} (float32 vector of 4, dot product)"
    client = qdrant_client(folder)  # export_codes closed its own client: the folder is free
    point = client.retrieve("adaptemb", ids=[107], with_payload=True)[0]
    assert point.payload == {"row": 7}
    with pytest.raises(ValueError, match="already exists; pass recreate=True"):
        export_codes(codes, location=client)
    assert export_codes(codes, location=client, recreate=True).location == "a client given"
    assert client.count("adaptemb").count == 20  # a client given stays open
    client.close()
    assert qdrant_client(folder).count("adaptemb").count == 20  # persisted in the folder


@pytest.mark.slow
@needs_qdrant
def test_qdrant_folder_opens_in_another_process(data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    """The exporting client is closed, so the embedded folder's lock is free for another process."""
    folder = str(tmp_path / "qdrant")
    export_codes(fitted("svd", data[0]).encode(data[0][:30], k=4), location=folder)
    script = f"from qdrant_client import QdrantClient; print(QdrantClient(path={folder!r}).count('adaptemb').count)"
    run = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "30", run.stderr[-2000:]


@needs_qdrant
def test_in_memory_export_is_refused(data: tuple[np.ndarray, np.ndarray]) -> None:
    codes = fitted("svd", data[0]).encode(data[0][:5])
    for to in ("qdrant", "milvus"):
        with pytest.raises(ValueError) as refused:
            export_codes(codes, to=to, location=":memory:")
        assert str(refused.value) == MEMORY_REFUSED
    with pytest.raises(TypeError, match="location"):
        export_codes(codes)  # type: ignore[call-arg]  # no default: say where the rows go
    assert "':memory:'" in MEMORY_REFUSED and "qdrant_client(':memory:')" in MEMORY_REFUSED


@needs_qdrant
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"to": "pinecone"}, "unknown vector database 'pinecone'; supported: milvus, qdrant"),
     ({"ids": np.arange(3)}, "ids must be 20 non-negative"), ({"ids": np.zeros(20, int)}, "all distinct"),
     ({"payload": [{}]}, "one dict per row")],
)
def test_bad_exports_are_refused(kwargs: dict, message: str, data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    codes = fitted("svd", data[0]).encode(data[0][:20])
    with pytest.raises(ValueError, match=message):
        export_codes(codes, **{"location": str(tmp_path / "qdrant"), **kwargs})
    assert not (tmp_path / "qdrant").exists()  # refused before anything is opened


@pytest.mark.slow
@needs_qdrant
def test_cli_exports_encoded_shards(data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    np.save(tmp_path / "docs.npy", data[0])
    model = fitted("csr", data[0]).save(tmp_path / "csr.safetensors")
    runner = CliRunner()
    assert runner.invoke(app, ["encode", "-i", str(tmp_path / "docs.npy"), "--compressor", str(model),
                               "--out", str(tmp_path / "codes"), "--shard-rows", "250"]).exit_code == 0
    result = runner.invoke(app, ["export-codes", "--codes", str(tmp_path / "codes"), "--location", str(tmp_path / "db")])
    assert result.exit_code == 0 and f"wrote {DOCS} packed_sparse codes" in result.output
    assert qdrant_client(str(tmp_path / "db")).count("adaptemb").count == DOCS
    nowhere = runner.invoke(app, ["export-codes", "--codes", str(tmp_path / "codes")], env={"COLUMNS": "200"})
    assert nowhere.exit_code == 2 and "--location" in nowhere.output  # no default: nothing written into memory
    memory = runner.invoke(app, ["export-codes", "--codes", str(tmp_path / "codes"), "--location", ":memory:"])
    assert memory.exit_code == 2 and "does not write to ':memory:'" in memory.output


# -- Milvus (Milvus Lite: an in-process server per .db path, so one file serves the module's collections) --------


@pytest.fixture(scope="module")
def milvus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if importlib.util.find_spec("pymilvus") is None or importlib.util.find_spec("milvus_lite") is None:
        pytest.skip("needs pymilvus and milvus-lite")
    client = milvus_client(str(tmp_path_factory.mktemp("milvus") / "codes.db"))
    yield client
    client.close()


def assert_same_top(scores: np.ndarray, ids: np.ndarray, expected_scores: np.ndarray, expected_ids: np.ndarray) -> None:
    """The database's top list is adaptemb's: same scores, and the same ids wherever a score is not tied
    with the last one kept (a tie at the cut may be broken either way)."""
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-4, atol=1e-4)
    cut = expected_scores[:, -1:] + 1e-4
    for row in range(len(ids)):
        assert set(ids[row][scores[row] > cut[row]]) == set(expected_ids[row][expected_scores[row] > cut[row]]), row


@pytest.mark.slow
@needs_milvus
def test_csr_search_in_milvus_matches_the_index(data: tuple[np.ndarray, np.ndarray], milvus: Any) -> None:
    docs, queries = data
    csr = fitted("csr", docs)
    doc_codes, query_codes = csr.encode(docs), csr.encode(queries)  # sparse queries: Milvus' inner product
    export_codes(doc_codes, to="milvus", location=milvus, collection="csr")
    scores, ids = search_milvus(milvus, "csr", query_codes, 10)
    expected_scores, expected_ids = csr.index(doc_codes).search(query_codes, 10)
    assert (ids == expected_ids).all(axis=1).mean() >= 0.99
    assert_same_top(scores, ids, expected_scores, expected_ids)


@needs_milvus
@pytest.mark.parametrize("method", ["svd", "mrl", "binary", "bsa", "int8"])
def test_milvus_top_list_is_the_codes_own(method: str, data: tuple[np.ndarray, np.ndarray], milvus: Any) -> None:
    docs, queries = data
    compressor = fitted(method, docs)
    doc_codes, query_codes = compressor.encode(docs), compressor.encode(queries)
    export_codes(doc_codes, to="milvus", location=milvus, collection=method)
    scores, ids = search_milvus(milvus, method, query_codes, 10)
    exact = query_codes.similarity(doc_codes)  # binary: d − 2·Hamming; bsa: overlap count; int8: dequantised dot
    expected_ids = np.argsort(-exact, axis=1, kind="stable")[:, :10]
    assert_same_top(scores, ids, np.take_along_axis(exact, expected_ids, axis=1), expected_ids)
    if method == "svd":  # through adaptemb's own index too
        index_scores, index_ids = compressor.index(doc_codes).search(query_codes, 10)
        assert_same_top(scores, ids, index_scores, index_ids)


@pytest.mark.slow
@needs_milvus
def test_sparse_codes_go_into_a_sparse_field(data: tuple[np.ndarray, np.ndarray], milvus: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The layout for a Milvus server (and Milvus Lite >= 3.2.2): SPARSE_FLOAT_VECTOR holding the codes' non-zeros."""
    from pymilvus import DataType

    from adaptemb.vectordb import milvus as milvus_store

    docs, queries = data
    csr = fitted("csr", docs)
    doc_codes, query_codes = csr.encode(docs), csr.encode(queries)
    scores_by_ip = milvus_store._scores_sparse_by_ip(milvus)
    monkeypatch.setattr(milvus_store, "_scores_sparse_by_ip", lambda client: True)
    export_codes(doc_codes, to="milvus", location=milvus, collection="sparse")
    field = next(f for f in milvus.describe_collection("sparse")["fields"] if f["name"] == "codes")
    assert field["type"] == DataType.SPARSE_FLOAT_VECTOR
    stored = {int(k): float(v) for k, v in milvus.get("sparse", ids=[7], output_fields=["codes"])[0]["codes"].items()}
    row = doc_codes[[7]].to_csr()
    balance = stored.pop(doc_codes.dim)  # one entry more, at index dim: the same total for every row
    assert stored == pytest.approx(dict(zip(row.indices.tolist(), row.data.tolist())))
    ceiling = doc_codes.vector_rows().sum(axis=1).max() + 1.0
    assert balance == pytest.approx(ceiling - row.data.sum(), rel=1e-5)
    scores, ids = search_milvus(milvus, "sparse", query_codes, 10)
    if scores_by_ip:  # Milvus Lite before 3.2.2 scores this field by BM25: only the stored values are checked there
        assert_same_top(scores, ids, *csr.index(doc_codes).search(query_codes, 10))


@needs_milvus
def test_milvus_lite_version_picks_the_sparse_layout() -> None:
    from adaptemb.vectordb.milvus import _scores_sparse_by_ip

    class Version:
        def __init__(self, version: str) -> None:
            self.version = version

        def get_server_version(self) -> str:
            return self.version

    assert not _scores_sparse_by_ip(Version("milvus_lite-3.2.0"))  # BM25 whatever the metric: densified
    assert not _scores_sparse_by_ip(Version("milvus_lite-3.2.1"))
    assert _scores_sparse_by_ip(Version("milvus_lite-3.2.2"))
    assert _scores_sparse_by_ip(Version("v2.5.4"))  # a server


@needs_milvus
def test_milvus_ids_payload_and_recreate(data: tuple[np.ndarray, np.ndarray], milvus: Any) -> None:
    codes = fitted("svd", data[0]).encode(data[0][:20], k=4)
    export_codes(codes, to="milvus", location=milvus, collection="payload", ids=np.arange(100, 120),
                 payload=[{"row": i, "tag": f"t{i}"} for i in range(20)])
    assert milvus.get("payload", ids=[107], output_fields=["row", "tag"])[0] == {"id": 107, "row": 7, "tag": "t7"}
    with pytest.raises(ValueError, match="already exists; pass recreate=True"):
        export_codes(codes, to="milvus", location=milvus, collection="payload")
    export_codes(codes[:5], to="milvus", location=milvus, collection="payload", recreate=True)
    assert milvus.get_collection_stats("payload")["row_count"] == 5
    scores, ids = search_milvus(milvus, "payload", codes[:3], 2)  # new ids: the row numbers
    exact = codes[:3].similarity(codes[:5])
    np.testing.assert_array_equal(ids[:, 0], exact.argmax(axis=1))
    np.testing.assert_allclose(scores[:, 0], exact.max(axis=1), rtol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [({"to": "pinecone"}, ValueError, "unknown vector database 'pinecone'; supported: milvus, qdrant"),
     ({"location": ":memory:"}, ValueError, "does not write to ':memory:'"),
     ({"location": "milvus-data/"}, ValueError, "ending in .db"),
     ({"payload": [{"id": 1}] * 20}, ValueError, "reserved key 'id'"),
     ({"payload": [[1]] * 20}, TypeError, "one dict per row"),
     ({"ids": np.arange(19)}, ValueError, "ids must be 20 non-negative")],
)
def test_bad_milvus_exports_are_refused(kwargs: dict, error: type, message: str, data: tuple[np.ndarray, np.ndarray],
                                        tmp_path: Path) -> None:
    codes = fitted("svd", data[0]).encode(data[0][:20])
    with pytest.raises(error, match=message):
        export_codes(codes, **{"to": "milvus", "location": str(tmp_path / "m.db"), **kwargs})
    assert not (tmp_path / "m.db").exists()


def test_codes_without_a_vector_type_are_refused(tmp_path: Path) -> None:
    projected = ProjectedQueries(np.ones((4, 8), np.float32))  # an asymmetric query side: no database scores it
    for to, name in (("milvus", "Milvus"), ("qdrant", "Qdrant")):
        with pytest.raises(ValueError, match=f"'projected' codes have no {name} vector type; supported: binary, binary_sparse, dense, int8, packed_sparse, sparse"):
            export_codes(projected, to=to, location=str(tmp_path / "db.db"))


@pytest.mark.parametrize(("to", "location", "module", "extra"),
                         [("milvus", "m.db", "pymilvus", "milvus"), ("milvus", "m.db", "milvus_lite", "milvus"),
                          ("qdrant", "qdrant-folder", "qdrant_client", "qdrant")])
def test_missing_client_names_the_extra(to: str, location: str, module: str, extra: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    codes = DenseCodes(np.ones((2, 4), np.float32))
    with pytest.raises(ModuleNotFoundError, match=rf"pip install 'adaptemb\[{extra}\]'"):
        export_codes(codes, to=to, location=str(tmp_path / location))


SEARCH_SCRIPT = """
import json, sys
from pymilvus import MilvusClient

path, queries = sys.argv[1], json.load(open(sys.argv[2]))
client = MilvusClient(path)
found = {}
for collection, data in queries.items():
    data = [{int(k): v for k, v in row.items()} if isinstance(row, dict) else row for row in data]
    hits = client.search(collection, data=data, limit=10, anns_field="codes", search_params={"metric_type": "IP"})
    found[collection] = [[[hit["id"] for hit in row], [hit["distance"] for hit in row]] for row in hits]
assert "adaptemb" not in sys.modules
print(json.dumps(found))
"""


@pytest.mark.slow
@needs_milvus
def test_milvus_lite_file_is_searchable_from_a_fresh_process(data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    """export_codes into a .db path (its folders created), then another process with pymilvus alone searches
    it at once (no load_collection) and gets adaptemb's own top-10."""
    docs, queries = data
    location = str(tmp_path / "new" / "deeper" / "codes.db")
    csr, svd = fitted("csr", docs), fitted("svd", docs)
    expected, sent = {}, {}
    for name, compressor in (("csr", csr), ("svd", svd)):
        doc_codes, query_codes = compressor.encode(docs), compressor.encode(queries)
        result = export_codes(doc_codes, to="milvus", location=location, collection=name)
        assert result.rows == DOCS and "no index: Milvus Lite searches every row" in result.vector
        expected[name] = compressor.index(doc_codes).search(query_codes, 10)
        if name == "csr":
            matrix = query_codes.to_csr()
            sent[name] = [dict(zip(map(str, matrix.indices[lo:hi].tolist()), matrix.data[lo:hi].astype(float).tolist()))
                          for lo, hi in zip(matrix.indptr[:-1], matrix.indptr[1:])]
        else:
            sent[name] = query_codes.to_dense().astype(float).tolist()
    assert not release_milvus_lite(location)  # export_codes stopped the Lite server it started
    (tmp_path / "queries.json").write_text(json.dumps(sent))
    run = subprocess.run([sys.executable, "-c", SEARCH_SCRIPT, location, str(tmp_path / "queries.json")],
                         check=False, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    for name, (expected_scores, expected_ids) in expected.items():
        ids, scores = (np.array([row[i] for row in found[name]]) for i in (0, 1))
        assert (ids == expected_ids).all(axis=1).mean() >= 0.99, name
        assert_same_top(scores.astype(np.float32), ids, expected_scores, expected_ids)


@pytest.mark.slow
@needs_milvus
def test_cli_exports_into_milvus(data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    np.save(tmp_path / "docs.npy", data[0])
    csr = fitted("csr", data[0])
    runner = CliRunner()
    assert runner.invoke(app, ["encode", "-i", str(tmp_path / "docs.npy"), "--compressor", str(csr.save(tmp_path / "csr.safetensors")),
                               "--out", str(tmp_path / "codes"), "--shard-rows", "250"]).exit_code == 0
    location = str(tmp_path / "milvus" / "codes.db")
    result = runner.invoke(app, ["export-codes", "--codes", str(tmp_path / "codes"), "--to", "milvus", "--location", location])
    assert result.exit_code == 0 and f"wrote {DOCS} packed_sparse codes into milvus" in result.output
    client = milvus_client(location)
    assert client.get_collection_stats("adaptemb")["row_count"] == DOCS
    query_codes = csr.encode(data[1])
    assert_same_top(*search_milvus(client, "adaptemb", query_codes, 10), *csr.index(csr.encode(data[0])).search(query_codes, 10))
    client.close()
    assert release_milvus_lite(location)  # this test's own client started a Lite server: the CLI may open the file again
    bad = runner.invoke(app, ["export-codes", "--codes", str(tmp_path / "codes"), "--to", "milvus", "--location", location])
    assert bad.exit_code == 2 and "already exists" in bad.output
