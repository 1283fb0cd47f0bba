"""Bad and edge inputs, one row per case: what a user or an attacker passes, and what must happen.

Each case is a short function; ``CASES`` is the table (read it top to bottom). Every case was once a
silent wrong result or an unclear error; the fix lives in the shared validation, loader or writer.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import SafetensorError
from safetensors.torch import save_file
from typer.testing import CliRunner

import adaptemb
from adaptemb import CorruptFileError, InvalidConfigError, UnknownCompressorError
from adaptemb.cli import app
from adaptemb.datasets import Dataset, save_dataset
from adaptemb.errors import InvalidConfigTypeError
from adaptemb.serialization import read_tensors, write_tensors

DIRECTION_METHODS = ("mrl", "csr", "bsa")  # methods that encode each row's direction (rows L2-normalised)


@dataclass
class Env:
    x: np.ndarray
    fitted: dict[str, adaptemb.Compressor]
    tmp: Path


@pytest.fixture(scope="module")
def fitted() -> tuple[np.ndarray, dict[str, adaptemb.Compressor]]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((400, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    registry = adaptemb.get_registry()
    fits = {name: adaptemb.fit(x, name, **registry.get(name).test_params) for name in ("svd", "int8", "mrl", "csr", "bsa")}
    fits["mrl-adapter"] = adaptemb.fit(x, "mrl", adapter="linear", epochs=1, progress=False)
    return x, fits


@pytest.fixture
def env(fitted: tuple[np.ndarray, dict[str, adaptemb.Compressor]], tmp_path: Path) -> Env:
    return Env(fitted[0], fitted[1], tmp_path)


def same_codes(a: adaptemb.Codes, b: adaptemb.Codes) -> bool:
    left, right = a.to_arrays(), b.to_arrays()
    return left.keys() == right.keys() and all(
        np.allclose(left[k].astype(np.float64), right[k].astype(np.float64), rtol=1e-3, atol=1e-5) for k in left
    )


# -- silent wrong results ---------------------------------------------------------------------------


def row_scale_never_changes_a_direction_code(env: Env) -> None:
    rows = env.x[:20]
    for name in (*DIRECTION_METHODS, "mrl-adapter"):
        compressor = env.fitted[name]
        base = compressor.encode(rows)
        for scale in (1e30, 1e19, 3.0, 1e-13, 1e-30):
            assert same_codes(compressor.encode((rows.astype(np.float64) * scale).astype(np.float32)), base), (name, scale)
        if name in ("csr", "bsa"):  # the asymmetric query side too
            scaled = compressor.encode_queries(rows * 1e30).to_arrays()["values"]
            np.testing.assert_allclose(scaled, compressor.encode_queries(rows).to_arrays()["values"], rtol=1e-4, atol=1e-6)


def huge_rows_do_not_encode_to_zeros(env: Env) -> None:
    for name in DIRECTION_METHODS:
        dense = env.fitted[name].encode(env.x[:5] * 1e30).to_dense()
        assert np.abs(dense).sum(axis=1).min() > 0, name


def zero_rows_encode_to_the_empty_code_of_direction_methods(env: Env) -> None:
    """A zero row is data (issue 30): a direction method gives it the empty code, the other rows keep theirs."""
    rows = env.x[:4].copy()
    rows[2] = 0
    for name in (*DIRECTION_METHODS, "mrl-adapter"):
        compressor = env.fitted[name]
        for k in (None, 3):
            codes = compressor.encode(rows, k=k)
            assert not codes.to_dense()[2].any(), (name, k)
            assert same_codes(codes[[0, 1, 3]], compressor.encode(rows[[0, 1, 3]], k=k)), (name, k)
        queries = compressor.encode_queries(rows)
        assert not compressor.score(queries, compressor.encode(env.x[:50]))[2].any(), name  # scores 0, no NaN
    assert env.fitted["bsa"].encode(rows, k=3).active_counts().tolist() == [3, 3, 0, 3]
    assert len(env.fitted["svd"].encode(rows)) == 4  # a zero row is an ordinary point for svd


def all_zero_fit_input_is_refused_by_direction_methods(env: Env) -> None:
    for name in DIRECTION_METHODS:
        with pytest.raises(ValueError, match=rf"embeddings: all 8 rows are all zero, so there is nothing to learn: "
                                             rf"{name} encodes each row's direction"):
            adaptemb.fit(np.zeros((8, 32), np.float32), name, **adaptemb.get_registry().get(name).test_params)


def boolean_budgets_are_refused(env: Env) -> None:
    with pytest.raises(InvalidConfigError, match="k: Input should be a valid integer"):
        adaptemb.fit(env.x, "svd", k=True)
    with pytest.raises(TypeError, match="k must be an integer"):
        env.fitted["svd"].encode(env.x, k=True)


def float_and_text_budgets_are_refused_numpy_ints_accepted(env: Env) -> None:
    for bad in (4.0, "4"):
        with pytest.raises(InvalidConfigError, match="valid integer"):
            adaptemb.fit(env.x, "svd", k=bad)
    assert adaptemb.fit(env.x, "svd", k=np.int64(4)).budgets().default == 4


def cli_boolean_budget_is_refused(env: Env) -> None:
    np.save(env.tmp / "x.npy", env.x)
    result = CliRunner().invoke(app, ["fit", "--method", "svd", "--input", str(env.tmp / "x.npy"),
                                      "-o", str(env.tmp / "m.safetensors"), "-p", "k=true"])
    assert result.exit_code == 2 and "valid integer" in result.output and "Traceback" not in result.output


def _tamper(env: Env, name: str, change: Callable[[dict[str, torch.Tensor]], None]) -> Path:
    """Save ``name``, rewrite its tensors with ``change`` keeping the original metadata, return the path."""
    path = env.fitted[name].save(env.tmp / f"{name}.safetensors")
    metadata, tensors = read_tensors(path)
    change(tensors)
    save_file(tensors, str(path), metadata=metadata)
    return path


def tensor_with_nan_is_refused_at_load(env: Env) -> None:
    path = _tamper(env, "svd", lambda t: t["mean"].__setitem__(0, float("nan")))
    with pytest.raises(CorruptFileError, match="tensor 'mean' holds NaN or infinite values"):
        adaptemb.load(path)


def tensor_of_another_dtype_is_refused_at_load(env: Env) -> None:
    for dtype in (torch.float64, torch.int32):
        path = _tamper(env, "svd", lambda t, dtype=dtype: t.__setitem__("components", t["components"].to(dtype)))
        with pytest.raises(CorruptFileError, match=f"tensor 'components' is {str(dtype)[6:]} of shape"):
            adaptemb.load(path)


def tensor_of_another_shape_is_refused_at_load(env: Env) -> None:
    path = _tamper(env, "csr", lambda t: t.__setitem__("pre_bias", t["pre_bias"][:-1].clone()))
    with pytest.raises(CorruptFileError, match="tensor 'pre_bias' is float32 of shape \\(31,\\), but was written as"):
        adaptemb.load(path)


def tensors_that_contradict_the_config_are_refused_without_a_manifest(env: Env) -> None:
    path = env.fitted["svd"].save(env.tmp / "svd.safetensors")
    metadata, tensors = read_tensors(path)
    metadata.pop("tensors")  # as a file written before manifests were; dim says 32, the tensors say 31
    tensors["mean"] = tensors["mean"][:-1].clone()
    tensors["components"] = tensors["components"][:, :-1].contiguous()
    save_file(tensors, str(path), metadata=metadata)
    with pytest.raises(CorruptFileError, match="do not fit its config and dim=32"):
        adaptemb.load(path)


def tensor_that_does_not_fit_the_config_is_named_in_own_words(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor of another shape with a manifest that agrees (so only the config and dim can tell)."""
    path = env.fitted["svd"].save(env.tmp / "svd.safetensors")
    metadata, tensors = read_tensors(path)
    tensors["mean"] = torch.zeros(64)
    write_tensors(path, tensors, {k: v for k, v in metadata.items() if k != "tensors"})  # a fresh, consistent manifest
    with pytest.raises(CorruptFileError) as caught:
        adaptemb.load(path)
    assert str(caught.value) == (f"{path}: the saved svd tensors do not fit its config and dim=32: "
                                 "tensor 'mean' has shape (64,), expected (32,)")
    cllr = adaptemb.fit(env.x, "cllr", **adaptemb.get_registry().get("cllr").test_params)
    path = cllr.save(env.tmp / "cllr.safetensors")
    metadata, tensors = read_tensors(path)
    tensors["int8_scale"] = tensors["int8_scale"][:-1].clone()  # the rank the fit kept is named by the weight
    write_tensors(path, tensors, {k: v for k, v in metadata.items() if k != "tensors"})
    with pytest.raises(CorruptFileError, match=r"tensor 'int8_scale' has shape \(15,\), expected \(r,\) with r=16 as in 'weight'"):
        adaptemb.load(path)
    # a method that declares no shapes: the failed test encode, in adaptemb's words; torch's only as the cause
    monkeypatch.setattr(type(env.fitted["svd"]), "_state_shapes", lambda self, dim: None)
    path = env.fitted["svd"].save(env.tmp / "svd.safetensors")
    metadata, tensors = read_tensors(path)
    tensors["mean"], tensors["components"] = torch.zeros(64), torch.zeros(32, 64)
    write_tensors(path, tensors, {k: v for k, v in metadata.items() if k != "tensors"})
    with pytest.raises(CorruptFileError) as caught:
        adaptemb.load(path)
    assert str(caught.value) == f"{path}: the saved svd tensors do not fit its config and dim=32 (encoding a test row failed)"
    assert isinstance(caught.value.__cause__, RuntimeError) and "size of tensor" not in str(caught.value)


def codes_of_a_newer_format_version_are_refused(env: Env) -> None:
    _rewrite_codes_header(env, lambda header: header.update(format_version="2"))
    with pytest.raises(CorruptFileError, match="codes format version '2'; this adaptemb .* reads version 1"):
        adaptemb.load_codes(env.tmp / "codes.npz")


def codes_of_a_foreign_format_are_refused(env: Env) -> None:
    _rewrite_codes_header(env, lambda header: header.update(format="someone.else"))
    with pytest.raises(CorruptFileError, match="not adaptemb codes"):
        adaptemb.load_codes(env.tmp / "codes.npz")


def _rewrite_codes_header(env: Env, change: Callable[[dict], None]) -> None:
    adaptemb.save_codes(env.fitted["svd"].encode(env.x[:5]), env.tmp / "codes.npz")
    arrays = dict(np.load(env.tmp / "codes.npz"))
    header = json.loads(str(arrays["__adaptemb__"]))
    change(header)
    arrays["__adaptemb__"] = np.array(json.dumps(header))
    np.savez(env.tmp / "codes.npz", **arrays)


def load_reads_header_and_tensors_from_one_read(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    path = env.fitted["svd"].save(env.tmp / "svd.safetensors")
    opened: list[str] = []
    real_open = open

    def counting_open(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", counting_open)
    monkeypatch.setattr("io.open", counting_open)
    adaptemb.load(path)
    assert opened.count(str(path)) == 1  # a concurrent atomic replace cannot mix two files


# -- errors that must be clear ----------------------------------------------------------------------


def cli_disk_full_is_one_error_line(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    np.save(env.tmp / "x.npy", env.x)

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("adaptemb.serialization.save_file", full)
    args = ["fit", "--method", "svd", "--input", str(env.tmp / "x.npy"), "-o", str(env.tmp / "m.safetensors")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip() == f"error: No space left on device: the disk is full: {env.tmp / 'm.safetensors'}"
    assert sorted(p.name for p in env.tmp.iterdir()) == ["x.npy"]  # nothing half-written
    debug = CliRunner().invoke(app, ["--debug", *args])
    assert debug.exit_code != 0 and isinstance(debug.exception, OSError)  # --debug: the real exception


def disk_full_is_one_oserror_naming_the_target_from_every_writer(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    svd = env.fitted["svd"]
    codes = svd.encode(env.x[:5])
    dataset = Dataset.from_gold("d", env.x[:20], env.x[:3], np.arange(3))
    np.save(env.tmp / "x.npy", env.x)
    out = env.tmp / "out"
    writers = {
        "m.safetensors": lambda path: svd.save(path),
        "c.npz": lambda path: adaptemb.save_codes(codes, path),
        "i.safetensors": lambda path: svd.index(codes).save(path),
        "d.npz": lambda path: save_dataset(dataset, path),
        "d.safetensors": lambda path: save_dataset(dataset, path),
        "m.onnx": lambda path: svd.export_onnx(path),
        "shards": lambda path: adaptemb.encode_files(env.tmp / "x.npy", svd, path, progress=False),
    }

    def full(*args: object) -> None:  # the disk fills while the written bytes are flushed
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    for name, write in writers.items():
        with pytest.raises(OSError) as caught:
            write(out / name)
        assert caught.value.errno == errno.ENOSPC and caught.value.strerror == "No space left on device: the disk is full"
        assert caught.value.filename is not None and Path(caught.value.filename).parent in (out, out / name), name
        assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()], name  # nothing half-written
    monkeypatch.undo()

    def safetensors_full(*args: object, **kwargs: object) -> None:  # how safetensors itself reports it
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr("adaptemb.serialization.save_file", safetensors_full)
    target = env.tmp / "new" / "m.safetensors"
    with pytest.raises(OSError) as caught:
        svd.save(target)
    assert str(caught.value) == f"[Errno 28] No space left on device: the disk is full: '{target}'"
    assert isinstance(caught.value.__cause__, SafetensorError)
    assert not target.parent.exists()  # not even the folder it created


def a_folder_where_a_file_is_expected_is_a_directory(env: Env) -> None:
    folder = env.tmp / "a-folder"
    folder.mkdir()
    svd = env.fitted["svd"]
    codes = svd.encode(env.x[:5])
    calls = {
        "load": lambda: adaptemb.load(folder),
        "Compressor.load": lambda: type(svd).load(folder),
        "load_codes": lambda: adaptemb.load_codes(folder),
        "load_index": lambda: adaptemb.load_index(folder),
        "load_embeddings": lambda: adaptemb.load_embeddings(folder),
        "fit from a path": lambda: adaptemb.fit(folder, "svd"),
        "save": lambda: svd.save(folder),
        "save_codes": lambda: adaptemb.save_codes(codes, folder),
        "index save": lambda: svd.index(codes).save(folder),
        "save_dataset": lambda: save_dataset(Dataset.from_gold("d", env.x[:9], env.x[:2], np.arange(2)), _npz_folder(env)),
        "export_onnx": lambda: svd.export_onnx(folder),
        "export_encoder": lambda: adaptemb.export_encoder("all-MiniLM-L6-v2", svd, folder),  # before any model loads
    }
    for what, call in calls.items():
        with pytest.raises(IsADirectoryError) as caught:
            call()
        assert caught.value.errno == errno.EISDIR, what
        assert caught.value.filename in (str(folder), str(_npz_folder(env))), what
    for args in (["info", str(folder)], ["fit", "--method", "svd", "--input", str(folder), "-o", str(env.tmp / "m.safetensors")]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2 and result.output.strip() == f"error: Is a directory: {folder}", args
    np.save(env.tmp / "x.npy", env.x)
    result = CliRunner().invoke(app, ["fit", "--method", "svd", "--input", str(env.tmp / "x.npy"), "-o", str(folder)])
    assert result.exit_code == 2 and result.output.strip() == f"error: Is a directory: {folder}"


def _npz_folder(env: Env) -> Path:
    """A folder named like a dataset file (``save_dataset`` wants a .npz or .safetensors name)."""
    folder = env.tmp / "folder.npz"
    folder.mkdir(exist_ok=True)
    return folder


def cli_unwritable_folder_is_one_error_line(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    np.save(env.tmp / "x.npy", env.x)

    def denied(*args: object, dir: str = "", **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), dir)

    monkeypatch.setattr(tempfile, "mkstemp", denied)
    result = CliRunner().invoke(app, ["fit", "--method", "svd", "--input", str(env.tmp / "x.npy"),
                                      "-o", str(env.tmp / "m.safetensors")])
    assert result.exit_code == 2 and result.output.strip() == f"error: Permission denied: {env.tmp}"


def cli_unexpected_error_is_one_line_pointing_at_debug(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    np.save(env.tmp / "x.npy", env.x)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("adaptemb.serialization.save_file", broken)
    result = CliRunner().invoke(app, ["fit", "--method", "svd", "--input", str(env.tmp / "x.npy"),
                                      "-o", str(env.tmp / "m.safetensors")])
    assert result.exit_code == 2 and "unexpected RuntimeError: boom" in result.output and "--debug" in result.output


def float64_beyond_float32_says_it_overflows(env: Env) -> None:
    rows = env.x[:3].astype(np.float64)
    rows[1, 0] = 1e39
    with pytest.raises(ValueError, match=r"overflows float32 in 1 of 3 rows \(first at row 1\): largest magnitude 1e\+39"):
        env.fitted["svd"].encode(rows)
    rows[1, 0] = np.nan
    with pytest.raises(ValueError, match="contains NaN or infinite values"):
        env.fitted["svd"].encode(rows)


def method_names_are_suggested_case_insensitively(env: Env) -> None:
    with pytest.raises(UnknownCompressorError, match="unknown compressor 'CSR' \\(did you mean 'csr'\\?\\)"):
        adaptemb.fit(env.x, "CSR")


def decoding_codes_wider_than_the_fit_names_the_widths(env: Env) -> None:
    wide = adaptemb.DenseCodes(np.ones((2, 40), dtype=np.float32))  # from a fit on 40-d rows
    with pytest.raises(ValueError, match="codes have 40 active dims, but this svd compressor encodes at most 32"):
        env.fitted["svd"].decode(wide)


def one_budget_rule_for_methods_without_a_budget(env: Env) -> None:
    d = env.x.shape[1]
    for call in (lambda k: adaptemb.fit(env.x, "int8", k=k), lambda k: env.fitted["int8"].encode(env.x, k=k)):
        assert call(d) is not None  # k = d is what int8 keeps: accepted by fit and encode alike
        with pytest.raises(InvalidConfigError, match=f"int8 has no budget: it always keeps all {d} dims"):
            call(d - 1)


def every_configuration_error_is_an_invalid_config_error(env: Env) -> None:
    x, d = env.x, env.x.shape[1]
    quick = {"epochs": 1, "progress": False}
    cases = [  # (call, the parameter and value named, what is valid)
        (lambda: adaptemb.fit(x, "int8", k=8), "got k=8", f"pass k=None \\(or k={d}\\)"),
        (lambda: adaptemb.fit(x, "binary", k=8), "got k=8", f"k={d}"),
        (lambda: adaptemb.fit(x, "svd", k=d + 1), f"k={d + 1}", f"valid: k=1..{d}"),
        (lambda: adaptemb.fit(x, "mrl", k=d + 1), f"k={d + 1}", f"valid: k=1..{d}"),
        (lambda: adaptemb.fit(x, "csr", k=65, hidden=64, **quick), "k=65", "valid: k=1..64"),
        (lambda: adaptemb.fit(x, "bsa", k=33, h=64, **quick), "k=33", "valid: k=1..32"),
        (lambda: adaptemb.fit(x, "cllr", k=17, rank=16, steps=1, progress=False), "k=17", "valid: k=1..16"),
        (lambda: adaptemb.fit(x, "sq", k=5), "k: Input should be 4, 6 or 8", "got 5"),
        (lambda: adaptemb.fit(x, "rabitq", k=9), "k: Input should be less than or equal to 4", "got 9"),
        (lambda: adaptemb.fit(x, "svd", bogus=1), "unknown parameter 'bogus'", "Valid parameters"),
        (lambda: env.fitted["svd"].encode(x, k=d + 1), f"k={d + 1} is out of range", f"1 <= k <= {d}"),
        (lambda: env.fitted["int8"].encode(x, k=3), "got k=3", f"k={d}"),
        (lambda: adaptemb.fit(x, "sq").encode(x, k=5), "k=5 is not a budget of sq", "valid budgets are 4, 6, 8"),
    ]
    for call, named, valid in cases:
        with pytest.raises(InvalidConfigError, match=named) as caught:
            call()
        assert isinstance(caught.value, ValueError), named  # existing `except ValueError` keeps working
        assert caught.match(valid)
    with pytest.raises(InvalidConfigTypeError, match="k must be an integer between 1 and") as caught:
        env.fitted["svd"].encode(x, k=True)  # a wrongly typed budget is still a TypeError too
    assert isinstance(caught.value, TypeError) and caught.value.parameter == "k" and caught.value.value is True


def replacing_a_private_file_keeps_its_mode(env: Env) -> None:
    model, codes = env.tmp / "private.safetensors", env.tmp / "private.npz"
    for path, write in ((model, lambda: env.fitted["svd"].save(model)),
                        (codes, lambda: adaptemb.save_codes(env.fitted["svd"].encode(env.x[:3]), codes))):
        write()
        os.chmod(path, 0o600)
        write()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


CASES: list[Callable[..., None]] = [
    row_scale_never_changes_a_direction_code,
    huge_rows_do_not_encode_to_zeros,
    zero_rows_encode_to_the_empty_code_of_direction_methods,
    all_zero_fit_input_is_refused_by_direction_methods,
    boolean_budgets_are_refused,
    float_and_text_budgets_are_refused_numpy_ints_accepted,
    cli_boolean_budget_is_refused,
    tensor_with_nan_is_refused_at_load,
    tensor_of_another_dtype_is_refused_at_load,
    tensor_of_another_shape_is_refused_at_load,
    tensors_that_contradict_the_config_are_refused_without_a_manifest,
    tensor_that_does_not_fit_the_config_is_named_in_own_words,
    codes_of_a_newer_format_version_are_refused,
    codes_of_a_foreign_format_are_refused,
    load_reads_header_and_tensors_from_one_read,
    cli_disk_full_is_one_error_line,
    disk_full_is_one_oserror_naming_the_target_from_every_writer,
    a_folder_where_a_file_is_expected_is_a_directory,
    cli_unwritable_folder_is_one_error_line,
    cli_unexpected_error_is_one_line_pointing_at_debug,
    float64_beyond_float32_says_it_overflows,
    method_names_are_suggested_case_insensitively,
    decoding_codes_wider_than_the_fit_names_the_widths,
    one_budget_rule_for_methods_without_a_budget,
    every_configuration_error_is_an_invalid_config_error,
    replacing_a_private_file_keeps_its_mode,
]


SLOW_CASES = {disk_full_is_one_oserror_naming_the_target_from_every_writer}
"""Measured over 3 s (13-19 s, -n 2 under load: it writes through every writer): marked slow."""


@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.slow) if case in SLOW_CASES else case
                                  for case in CASES], ids=[case.__name__ for case in CASES])
def test_bad_input(case: Callable[..., None], env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    if "monkeypatch" in case.__code__.co_varnames[: case.__code__.co_argcount]:
        case(env, monkeypatch)
    else:
        case(env)
