"""The command line: plugins, fit, compress, export-onnx, info, one option vocabulary with deprecated spellings, and
one-line errors with exit code 2."""

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

import adaptemb
from adaptemb.cli import app  # importing the package registers every command
from adaptemb.cli.errors import friendly_errors

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
    compressed = runner.invoke(app, ["compress", "--compressor", str(model), "--input", str(corpus), "-o", str(codes_path), "-k", "5"])
    assert compressed.exit_code == 0, compressed.output
    codes = adaptemb.load_codes(codes_path)
    expected = adaptemb.load(model).encode(np.load(corpus), k=5)
    np.testing.assert_array_equal(codes.to_dense(), expected.to_dense())
    assert "20.0 bytes per vector" in compressed.output
    info = runner.invoke(app, ["info", str(model)])
    assert info.exit_code == 0 and '"k":12' in info.output


@pytest.mark.slow
def test_compress_writes_query_codes_for_asymmetric_methods(corpus: Path, tmp_path: Path) -> None:
    """``--side query``: csr's query codes are projected (dense over the latents, plus an offset), not sparse."""
    model, docs_path, queries_path = tmp_path / "csr.safetensors", tmp_path / "docs.npz", tmp_path / "queries.npz"
    fitted = runner.invoke(app, ["fit", "--method", "csr", "--input", str(corpus), "-o", str(model),
                                 "-p", "hidden=64", "-p", "k=4", "-p", "epochs=1", "-p", "progress=false"])
    assert fitted.exit_code == 0, fitted.output
    for side, path in (("doc", docs_path), ("query", queries_path)):
        result = runner.invoke(app, ["compress", "-c", str(model), "--input", str(corpus), "-o", str(path),
                                     "--side", side])
        assert result.exit_code == 0 and f"{side} codes" in result.output, result.output
    docs, queries = adaptemb.load_codes(docs_path), adaptemb.load_codes(queries_path)
    assert (docs.kind, queries.kind) == ("packed_sparse", "projected")
    compressor = adaptemb.load(model)
    np.testing.assert_array_equal(queries.to_dense(), compressor.encode_queries(np.load(corpus)).to_dense())
    _, ids = compressor.index(docs).search(queries, 3)  # the saved query codes search the saved documents
    assert ids.shape == (len(docs), 3)
    bad = runner.invoke(app, ["compress", "-c", str(model), "--input", str(corpus), "-o", str(path), "--side", "both"])
    assert bad.exit_code == 2 and "both" in bad.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["fit", "--method", "svdd", "--input", "{corpus}", "-o", "{out}"], "did you mean 'svd'?"),
        (["fit", "--method", "svd", "--input", "{corpus}", "-o", "{out}", "-p", "kk=3"], "unknown parameter 'kk'"),
        (["fit", "--method", "svd", "--input", "{corpus}", "-o", "{out}", "-p", "k"], "must look like NAME=VALUE"),
        (["fit", "--method", "svd", "--input", "{missing}", "-o", "{out}"], "no such file"),
        (["compress", "-c", "{corpus}", "--input", "{corpus}", "-o", "{out}"], "not a valid safetensors file"),
        (["compress", "--input", "{corpus}", "-o", "{out}"], "missing option --compressor/-c"),
        (["compress", "-c", "{corpus}", "--model", "{corpus}", "--input", "{corpus}", "-o", "{out}"],
         "--model is the deprecated spelling of --compressor/-c: give only --compressor/-c"),
        (["fit", "--method", "cllr", "--input", "{corpus}", "-o", "{out}", "--pair-queries", "{corpus}"],
         "need both --pair-queries and --pair-documents"),
        (["fit", "--method", "svd", "--input", "{corpus}", "-o", "{out}", "--pair-queries", "{corpus}",
          "--pair-documents", "{corpus}"], "svd does not learn from pairs"),
        (["fit", "--method", "svd", "--input", "{corpus}", "-o", "{out}", "--bytes", "16"],
         "svd is not fitted for a byte budget (its config has no byte_budgets)"),
        (["fit", "--method", "csr", "--input", "{corpus}", "-o", "{out}", "--bytes", "10,ten"],
         "--bytes must be a comma-separated list of integers, e.g. 16,64; got '10,ten'"),
        (["fit", "--method", "csr", "--input", "{corpus}", "-o", "{out}", "--bytes", "0,16"],
         "--bytes must list positive integers; got '0,16'"),
        (["encode", "-c", "{corpus}", "--input", "{corpus}", "--out", "{out}", "-k", "4", "-b", "16"],
         "give -k/--k (the method's budget) or -b/--bytes (bytes per vector, which picks k), not both"),
    ],
    ids=["unknown-method", "unknown-param", "malformed-param", "missing-input", "model-not-safetensors",
         "no-compressor", "old-and-new-spelling",
         "half-a-pair", "pairs-for-a-method-without", "bytes-for-a-method-without", "bytes-not-integers",
         "bytes-not-positive", "encode-k-and-bytes"],
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
                           env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert "supervision" in result.output and "labels+pairs" in result.output and "held_out_pairs" in result.output
    direct = adaptemb.fit(x, "cllr", pairs=(x[:40] + 0.1, x[:40]), labels=(x[:, 0] > 0).astype(np.int64), rank=8,
                          steps=20, progress=False)
    np.testing.assert_allclose(adaptemb.load(model).encode(x, k=4).values, direct.encode(x, k=4).values, atol=1e-6)


def test_compress_rejects_a_budget_the_model_cannot_honour(corpus: Path, tmp_path: Path) -> None:
    model = tmp_path / "int8.safetensors"
    assert runner.invoke(app, ["fit", "--method", "int8", "--input", str(corpus), "-o", str(model)]).exit_code == 0
    result = runner.invoke(app, ["compress", "-c", str(model), "--input", str(corpus), "-o", str(tmp_path / "c.npz"), "-k", "8"])
    assert result.exit_code == 2 and "int8 has no budget" in result.output
    assert not (tmp_path / "c.npz").exists()


@pytest.mark.slow
def test_fit_for_byte_budgets_then_compress_and_encode_within_them(corpus: Path, tmp_path: Path) -> None:
    """``fit --bytes 3,6`` reaches ``adaptemb.fit(..., bytes=[3, 6])`` (csr: heads for those budgets); ``compress -b`` and
    ``encode -b`` write the codes ``encode(x, bytes=B)`` gives, within B bytes per vector."""
    model, x = tmp_path / "csr.safetensors", np.load(corpus)
    small = ["-p", "hidden=64", "-p", "epochs=1", "-p", "progress=false"]
    fitted = runner.invoke(app, ["fit", "-m", "csr", "-i", str(corpus), "-o", str(model), "--bytes", "3,6", *small])
    assert fitted.exit_code == 0, fitted.output
    compressor = adaptemb.load(model)
    assert compressor.config.byte_budgets == (3, 6)
    direct = adaptemb.fit(x, "csr", bytes=[3, 6], hidden=64, epochs=1, progress=False)
    assert same_codes(compressor.encode(x, bytes=3), direct.encode(x, bytes=3))
    compressed = runner.invoke(app, ["compress", "-c", str(model), "-i", str(corpus), "-o", str(tmp_path / "c.npz"),
                                     "-b", "3"])
    assert compressed.exit_code == 0, compressed.output
    codes, expected = adaptemb.load_codes(tmp_path / "c.npz"), compressor.encode(x, bytes=3)
    assert same_codes(codes, expected) and codes.bytes_per_vector <= 3
    assert f"at k={compressor.budget_for_bytes(3)} (the largest within 3 bytes)" in compressed.output
    encoded = runner.invoke(app, ["encode", "-c", str(model), "-i", str(corpus), "--out", str(tmp_path / "shards"),
                                  "-b", "6"])
    assert encoded.exit_code == 0, encoded.output
    shards = adaptemb.read_code_shards(tmp_path / "shards")
    assert same_codes(shards, compressor.encode(x, bytes=6)) and shards.bytes_per_vector <= 6
    assert shards.bytes_per_vector > codes.bytes_per_vector  # a larger budget: a larger k


def test_fit_a_composition_for_byte_budgets(corpus: Path, tmp_path: Path) -> None:
    """svd+binary fitted ``--bytes 2,3`` prepares ranks 16 and 24 (d=24, one bit a dimension); ``-b 2`` picks rank 16,
    and a budget below its smallest code is a clear error naming that code's size."""
    model, x = tmp_path / "svd_binary.safetensors", np.load(corpus)
    fitted = runner.invoke(app, ["fit", "-m", "svd+binary", "-i", str(corpus), "-o", str(model), "--bytes", "2,3"])
    assert fitted.exit_code == 0, fitted.output
    assert "budgets k=16, 24 (default 24)" in fitted.output
    compressed = runner.invoke(app, ["compress", "-c", str(model), "-i", str(corpus), "-o", str(tmp_path / "c.npz"),
                                     "-b", "2"])
    assert compressed.exit_code == 0, compressed.output
    assert "at k=16 (the largest within 2 bytes)" in compressed.output and "2.0 bytes per vector" in compressed.output
    assert same_codes(adaptemb.load_codes(tmp_path / "c.npz"), adaptemb.load(model).encode(x, bytes=2))
    too_small = runner.invoke(app, ["compress", "-c", str(model), "-i", str(corpus), "-o", str(tmp_path / "d.npz"),
                                    "-b", "1"])
    assert too_small.exit_code == 2 and "its smallest code (k=16) takes 2" in too_small.output
    assert not (tmp_path / "d.npz").exists()


@pytest.mark.parametrize("command", [
    ["compress", "-i", "{corpus}", "-o", "{out}"],
    ["encode", "-i", "{corpus}", "--out", "{out}"],
    ["export-onnx", "-o", "{out}"],
    ["export-encoder", "-o", "{out}"],
])
def test_k_and_bytes_together_are_refused(command: list[str], corpus: Path, tmp_path: Path) -> None:
    model = tmp_path / "svd.safetensors"
    assert runner.invoke(app, ["fit", "-m", "svd", "-i", str(corpus), "-o", str(model), "-p", "k=12"]).exit_code == 0
    filled = [a.format(corpus=corpus, out=tmp_path / "out") for a in command]
    both = runner.invoke(app, [*filled, "-c", str(model), "-k", "4", "-b", "16"])
    assert both.exit_code == 2 and "Traceback" not in both.output
    assert "give -k/--k (the method's budget) or -b/--bytes (bytes per vector, which picks k), not both" in both.output
    assert not (tmp_path / "out").exists()
    zero = runner.invoke(app, [*filled, "-c", str(model), "-b", "0"], env={"COLUMNS": "200"})
    assert zero.exit_code == 2 and "'--bytes' / '-b': Input should be greater than or equal to 1" in zero.output


def same_codes(a: adaptemb.Codes, b: adaptemb.Codes) -> bool:
    left, right = a.to_arrays(), b.to_arrays()
    return a.kind == b.kind and left.keys() == right.keys() and all(np.array_equal(left[k], right[k]) for k in left)


@pytest.mark.slow
def test_export_onnx_writes_an_onnx_encoder_that_matches(corpus: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    model, onnx_path = tmp_path / "svd.safetensors", tmp_path / "svd.onnx"
    assert runner.invoke(app, ["fit", "--method", "svd", "--input", str(corpus), "-o", str(model)]).exit_code == 0
    result = runner.invoke(app, ["export-onnx", "-c", str(model), "-o", str(onnx_path), "-k", "6", "--sample", str(corpus)])
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


def test_old_spellings_still_work_with_a_deprecation_note(corpus: Path, tmp_path: Path) -> None:
    """``--model`` (compress) and ``export`` (now export-onnx) keep working for one release, with a one-line note."""
    model = tmp_path / "svd.safetensors"
    assert runner.invoke(app, ["fit", "-m", "svd", "-i", str(corpus), "-o", str(model), "-p", "k=6"]).exit_code == 0
    old = runner.invoke(app, ["compress", "--model", str(model), "-i", str(corpus), "-o", str(tmp_path / "old.npz")])
    new = runner.invoke(app, ["compress", "-c", str(model), "-i", str(corpus), "-o", str(tmp_path / "new.npz")])
    assert old.exit_code == new.exit_code == 0, old.output
    assert "note: --model is deprecated and will be removed in the next release; use --compressor/-c" in old.output
    assert "deprecated" not in new.output
    np.testing.assert_array_equal(adaptemb.load_codes(tmp_path / "old.npz").to_dense(),
                                  adaptemb.load_codes(tmp_path / "new.npz").to_dense())
    assert "--model" not in runner.invoke(app, ["compress", "--help"], env={"COLUMNS": "100"}).output  # hidden
    help_text = runner.invoke(app, ["--help"], env={"COLUMNS": "100"}).output
    assert "export-onnx" in help_text and "export-encoder" in help_text and "export-codes" in help_text
    assert " export " not in help_text  # the old verb is hidden


def test_flags_take_no_value_and_closed_choices_are_listed() -> None:
    """Boolean options are spelt --flag/--no-flag without a <bool> value; engines and databases are enums."""
    fit_help = runner.invoke(app, ["fit", "--help"], env={"COLUMNS": "120"}).output
    assert "--no-stream" in fit_help and "local|ray" in fit_help
    export_help = runner.invoke(app, ["export-codes", "--help"], env={"COLUMNS": "120"}).output
    assert "--no-recreate" in export_help and "qdrant|milvus" in export_help
    for line in (fit_help + export_help).splitlines():
        if "--stream" in line or "--recreate" in line:
            assert "<bool>" not in line, line


def test_fit_report_is_a_short_table_and_whole_in_json(corpus: Path, tmp_path: Path) -> None:
    model, report = tmp_path / "csr.safetensors", tmp_path / "report" / "fit.json"
    result = runner.invoke(app, ["fit", "-m", "csr", "-i", str(corpus), "-o", str(model), "-p", "hidden=64", "-p", "k=4",
                                 "-p", "epochs=1", "-p", "progress=false", "--report", str(report)], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert "fit report" in result.output and "seconds" in result.output and "dead_fraction" in result.output
    table = [line for line in result.output.splitlines() if line[:1] in "┌│└"]
    assert table and "{" not in result.output and max(len(line) for line in table) <= 100
    assert "train_losses" in result.output and "recon_k" in result.output  # a group of numbers on one row
    whole = json.loads(report.read_text())
    assert whole["extra"]["hidden"] == 64 and "recon_k" in whole["train_losses"]


def _app_raising(error: BaseException) -> typer.Typer:
    one = typer.Typer()

    @one.command()
    @friendly_errors
    def boom() -> None:
        raise error

    return one


@pytest.mark.parametrize(("error", "code", "text"), [
    (typer.Exit(code=3), 3, ""),
    (typer.Abort(), 1, "Aborted"),
    (typer.BadParameter("no good"), 2, "no good"),
    (ValueError("k must be positive"), 2, "error: k must be positive"),
    (RuntimeError("a bug"), 2, "error: unexpected RuntimeError: a bug (rerun with --debug"),
])
def test_typer_control_flow_passes_through_the_error_mapping(error: BaseException, code: int, text: str) -> None:
    """typer's own exit, abort and usage errors keep their exit codes and messages; everything else is one line."""
    result = runner.invoke(_app_raising(error), [])
    assert result.exit_code == code, result.output
    assert text in result.output and "Traceback" not in result.output


def test_integer_embeddings_from_files_with_input_kind(tmp_path: Path) -> None:
    """int8 and packed-bit files come in through --input-kind (never guessed): int8 keeps the bytes, binary the bits,
    other methods dequantise with --input-scale / --input-offset (a number or an .npy of d values)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 24)).astype(np.float32)
    np.save(values := tmp_path / "int8.npy", np.clip(np.round(x * 40), -128, 127).astype(np.int8))
    np.save(scales := tmp_path / "scales.npy", np.full(24, 1 / 40, dtype=np.float32))
    np.save(bits := tmp_path / "bits.npy", np.packbits(x > 0, axis=1))
    refused = runner.invoke(app, ["fit", "-m", "svd", "-i", str(values), "-o", str(tmp_path / "no.safetensors")])
    assert refused.exit_code == 2 and "input_kind='int8'" in refused.output
    kept = tmp_path / "int8.safetensors"
    fitted = runner.invoke(app, ["fit", "-m", "int8", "-i", str(values), "-o", str(kept), "--input-kind", "int8",
                                 "--input-scale", str(scales)])
    assert fitted.exit_code == 0, fitted.output
    coded = runner.invoke(app, ["compress", "-c", str(kept), "-i", str(values), "-o", str(tmp_path / "c.npz"),
                                "--input-kind", "int8", "--input-scale", str(scales)])
    assert coded.exit_code == 0, coded.output
    np.testing.assert_array_equal(adaptemb.load_codes(tmp_path / "c.npz").to_arrays()["codes"], np.load(values))
    svd = tmp_path / "svd.safetensors"
    assert runner.invoke(app, ["fit", "-m", "svd", "-i", str(values), "-o", str(svd), "--input-kind", "int8",
                               "--input-scale", "0.025", "-p", "k=8"]).exit_code == 0
    direct = adaptemb.fit(np.load(values).astype(np.float32) * np.float32(0.025), "svd", k=8)
    np.testing.assert_allclose(adaptemb.load(svd).encode(x).to_dense(), direct.encode(x).to_dense(), atol=1e-5)
    binary = tmp_path / "binary.safetensors"
    assert runner.invoke(app, ["fit", "-m", "binary", "-i", str(bits), "-o", str(binary), "--input-kind", "ubinary",
                               "-p", "threshold=zero"]).exit_code == 0
    assert runner.invoke(app, ["compress", "-c", str(binary), "-i", str(bits), "-o", str(tmp_path / "b.npz"),
                               "--input-kind", "ubinary"]).exit_code == 0
    np.testing.assert_array_equal(adaptemb.load_codes(tmp_path / "b.npz").to_arrays()["packed"], np.load(bits))
    streamed = runner.invoke(app, ["fit", "-m", "svd", "-i", str(values), "-o", str(tmp_path / "s.safetensors"),
                                   "--stream", "--input-kind", "int8"])
    assert streamed.exit_code == 2 and "--stream reads float embeddings" in streamed.output


def test_adaptemb_warnings_are_one_line(tmp_path: Path) -> None:
    """A warning adaptemb issues (here: zero rows left out of a fit) is one ``warning:`` line, not a source excerpt."""
    x = np.random.default_rng(0).standard_normal((200, 16)).astype(np.float32)
    x[:20] = 0
    np.save(path := tmp_path / "x.npy", x)
    result = runner.invoke(app, ["fit", "-m", "mrl", "-i", str(path), "-o", str(tmp_path / "m.safetensors")],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    warning_lines = [line for line in result.output.splitlines() if "zero" in line.lower() and "warning" in line.lower()]
    assert len(warning_lines) == 1 and warning_lines[0].startswith("warning: "), result.output
    assert "ZeroRowsWarning" not in result.output and ".py:" not in result.output
