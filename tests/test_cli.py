"""The command line: plugins, fit, compress, export, info, and one-line errors with exit code 2."""

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import adaptemb
from adaptemb.cli import app  # importing the package registers every command

runner = CliRunner()


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.npy"
    np.save(path, np.random.default_rng(0).standard_normal((100, 24)).astype(np.float32))
    return path


def test_plugins_lists_every_registered_method() -> None:
    result = runner.invoke(app, ["plugins"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for name in adaptemb.get_registry().names():
        assert name in result.output
    assert f"adaptemb {adaptemb.__version__}" in result.output


def test_fit_then_compress_writes_loadable_codes(corpus: Path, tmp_path: Path) -> None:
    model, codes_path = tmp_path / "svd.safetensors", tmp_path / "codes.npz"
    fitted = runner.invoke(app, ["fit", "--method", "svd", "--input", str(corpus), "-o", str(model), "-p", "k=12"])
    assert fitted.exit_code == 0, fitted.output
    assert "budgets k=1..12" in fitted.output
    compressed = runner.invoke(app, ["compress", "--model", str(model), "--input", str(corpus), "-o", str(codes_path), "-k", "5"])
    assert compressed.exit_code == 0, compressed.output
    codes = adaptemb.load_codes(codes_path)
    expected = adaptemb.load(model).encode(np.load(corpus), k=5)
    np.testing.assert_array_equal(codes.to_dense(), expected.to_dense())
    assert "20.0 bytes per vector" in compressed.output
    info = runner.invoke(app, ["info", str(model)])
    assert info.exit_code == 0 and '"k":12' in info.output


def test_compress_writes_query_codes_for_asymmetric_methods(corpus: Path, tmp_path: Path) -> None:
    """``--side query``: csr's query codes are projected (dense over the latents, plus an offset), not sparse."""
    model, docs_path, queries_path = tmp_path / "csr.safetensors", tmp_path / "docs.npz", tmp_path / "queries.npz"
    fitted = runner.invoke(app, ["fit", "--method", "csr", "--input", str(corpus), "-o", str(model),
                                 "-p", "hidden=64", "-p", "k=4", "-p", "epochs=1", "-p", "progress=false"])
    assert fitted.exit_code == 0, fitted.output
    for side, path in (("doc", docs_path), ("query", queries_path)):
        result = runner.invoke(app, ["compress", "--model", str(model), "--input", str(corpus), "-o", str(path),
                                     "--side", side])
        assert result.exit_code == 0 and f"{side} codes" in result.output, result.output
    docs, queries = adaptemb.load_codes(docs_path), adaptemb.load_codes(queries_path)
    assert (docs.kind, queries.kind) == ("sparse", "projected")
    compressor = adaptemb.load(model)
    np.testing.assert_array_equal(queries.to_dense(), compressor.encode_queries(np.load(corpus)).to_dense())
    _, ids = compressor.index(docs).search(queries, 3)  # the saved query codes search the saved documents
    assert ids.shape == (len(docs), 3)
    bad = runner.invoke(app, ["compress", "--model", str(model), "--input", str(corpus), "-o", str(path), "--side", "both"])
    assert bad.exit_code == 2 and "both" in bad.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["fit", "--method", "svdd", "--input", "{corpus}", "-o", "{out}"], "did you mean 'svd'?"),
        (["fit", "--method", "svd", "--input", "{corpus}", "-o", "{out}", "-p", "kk=3"], "unknown parameter 'kk'"),
        (["fit", "--method", "svd", "--input", "{corpus}", "-o", "{out}", "-p", "k"], "must look like NAME=VALUE"),
        (["fit", "--method", "svd", "--input", "{missing}", "-o", "{out}"], "no such file"),
        (["compress", "--model", "{corpus}", "--input", "{corpus}", "-o", "{out}"], "not a valid safetensors file"),
        (["fit", "--method", "cllr", "--input", "{corpus}", "-o", "{out}", "--pair-queries", "{corpus}"],
         "need both --pair-queries and --pair-documents"),
        (["fit", "--method", "svd", "--input", "{corpus}", "-o", "{out}", "--pair-queries", "{corpus}",
          "--pair-documents", "{corpus}"], "svd does not learn from pairs"),
    ],
    ids=["unknown-method", "unknown-param", "malformed-param", "missing-input", "model-not-safetensors",
         "half-a-pair", "pairs-for-a-method-without"],
)
def test_errors_are_one_line_with_exit_code_2(args: list[str], message: str, corpus: Path, tmp_path: Path) -> None:
    filled = [a.format(corpus=corpus, out=tmp_path / "out.safetensors", missing=tmp_path / "nope.npy") for a in args]
    result = runner.invoke(app, filled)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out.safetensors").exists()


def test_fit_learns_from_pairs_and_labels_files(corpus: Path, tmp_path: Path) -> None:
    """``--pair-queries`` / ``--pair-documents`` and ``--labels`` reach ``fit``: the same model as the API's."""
    x = np.load(corpus)
    np.save(queries := tmp_path / "queries.npy", x[:40] + 0.1)
    np.save(documents := tmp_path / "documents.npy", x[:40])
    np.save(labels := tmp_path / "labels.npy", (x[:, 0] > 0).astype(np.int64))
    small = ["-p", "rank=8", "-p", "steps=20", "-p", "progress=false"]
    model = tmp_path / "cllr.safetensors"
    result = runner.invoke(app, ["fit", "-m", "cllr", "-i", str(corpus), "-o", str(model), *small,
                                 "--pair-queries", str(queries), "--pair-documents", str(documents), "--labels", str(labels)],
                           env={"COLUMNS": "400"})  # the report's JSON on one line
    assert result.exit_code == 0, result.output
    assert '"supervision": "labels+pairs"' in result.output and '"held_out_pairs": 8' in result.output
    direct = adaptemb.fit(x, "cllr", pairs=(x[:40] + 0.1, x[:40]), labels=(x[:, 0] > 0).astype(np.int64), rank=8,
                          steps=20, progress=False)
    np.testing.assert_allclose(adaptemb.load(model).encode(x, k=4).values, direct.encode(x, k=4).values, atol=1e-6)


def test_compress_rejects_a_budget_the_model_cannot_honour(corpus: Path, tmp_path: Path) -> None:
    model = tmp_path / "int8.safetensors"
    assert runner.invoke(app, ["fit", "--method", "int8", "--input", str(corpus), "-o", str(model)]).exit_code == 0
    result = runner.invoke(app, ["compress", "--model", str(model), "--input", str(corpus), "-o", str(tmp_path / "c.npz"), "-k", "8"])
    assert result.exit_code == 2 and "int8 has no budget" in result.output
    assert not (tmp_path / "c.npz").exists()


@pytest.mark.slow
def test_export_writes_an_onnx_encoder_that_matches(corpus: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    model, onnx_path = tmp_path / "svd.safetensors", tmp_path / "svd.onnx"
    assert runner.invoke(app, ["fit", "--method", "svd", "--input", str(corpus), "-o", str(model)]).exit_code == 0
    result = runner.invoke(app, ["export", "--model", str(model), "-o", str(onnx_path), "-k", "6", "--sample", str(corpus)])
    assert result.exit_code == 0, result.output
    assert "onnxruntime parity on 100 rows" in result.output
    import onnxruntime

    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    x = np.load(corpus)
    (values,) = session.run(None, {"embeddings": x})
    np.testing.assert_allclose(values, adaptemb.load(model).encode(x, k=6).to_dense(), atol=1e-5)


def test_info_lists_only_the_valid_budgets(tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal((300, 16)).astype(np.float32)
    adaptemb.fit(x, "sq").save(tmp_path / "sq.safetensors")
    adaptemb.fit(x, "pq", k=4).save(tmp_path / "pq.safetensors")
    runner = CliRunner()
    assert "budgets: k=4, 6, 8 (default 8)" in runner.invoke(app, ["info", str(tmp_path / "sq.safetensors")]).output
    assert "budgets: k=4 (this fit only" in runner.invoke(app, ["info", str(tmp_path / "pq.safetensors")]).output
