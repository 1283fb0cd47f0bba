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
from safetensors.torch import save_file
from typer.testing import CliRunner

import adaptemb
from adaptemb import CorruptFileError, InvalidConfigError, UnknownCompressorError
from adaptemb.cli import app
from adaptemb.serialization import read_tensors

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


def zero_rows_are_refused_by_direction_methods(env: Env) -> None:
    rows = env.x[:4].copy()
    rows[2] = 0
    for name in DIRECTION_METHODS:
        with pytest.raises(ValueError, match=r"all-zero rows \(1 of 4, first at row 2\)"):
            env.fitted[name].encode(rows)
    assert len(env.fitted["svd"].encode(rows)) == 4  # a zero row is an ordinary point for svd


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
    assert result.output.strip() == "error: No space left on device"
    assert sorted(p.name for p in env.tmp.iterdir()) == ["x.npy"]  # nothing half-written
    debug = CliRunner().invoke(app, ["--debug", *args])
    assert debug.exit_code != 0 and isinstance(debug.exception, OSError)  # --debug: the real exception


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
        with pytest.raises(ValueError, match=f"int8 has no budget: it always keeps all {d} dims"):
            call(d - 1)


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
    zero_rows_are_refused_by_direction_methods,
    boolean_budgets_are_refused,
    float_and_text_budgets_are_refused_numpy_ints_accepted,
    cli_boolean_budget_is_refused,
    tensor_with_nan_is_refused_at_load,
    tensor_of_another_dtype_is_refused_at_load,
    tensor_of_another_shape_is_refused_at_load,
    tensors_that_contradict_the_config_are_refused_without_a_manifest,
    codes_of_a_newer_format_version_are_refused,
    codes_of_a_foreign_format_are_refused,
    load_reads_header_and_tensors_from_one_read,
    cli_disk_full_is_one_error_line,
    cli_unwritable_folder_is_one_error_line,
    cli_unexpected_error_is_one_line_pointing_at_debug,
    float64_beyond_float32_says_it_overflows,
    method_names_are_suggested_case_insensitively,
    decoding_codes_wider_than_the_fit_names_the_widths,
    one_budget_rule_for_methods_without_a_budget,
    replacing_a_private_file_keeps_its_mode,
]


@pytest.mark.parametrize("case", CASES, ids=[case.__name__ for case in CASES])
def test_bad_input(case: Callable[..., None], env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    if "monkeypatch" in case.__code__.co_varnames[: case.__code__.co_argcount]:
        case(env, monkeypatch)
    else:
        case(env)
