"""Streaming encode: files read batch by batch, codes written shard by shard, identical to in-memory encode."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

import adaptemb
from adaptemb import CorruptFileError
from adaptemb.cli import app

N, D = 2_000, 24


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((N, D)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def inputs(rows: np.ndarray, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("inputs")
    np.save(folder / "x.npy", rows)
    table = pa.table({"id": np.arange(N), "emb": pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)), D)})
    pq.write_table(table, folder / "x.parquet", row_group_size=300)  # row groups cut across shards and batches
    save_file({"emb": torch.from_numpy(rows)}, str(folder / "x.safetensors"))
    np.save(folder / "first.npy", rows[:700])
    np.save(folder / "rest.npy", rows[700:])
    return {p.name: p for p in folder.iterdir()}


_FITTED: dict[str, adaptemb.Compressor] = {}


def fitted(method: str, rows: np.ndarray) -> adaptemb.Compressor:
    """One small fit per method for the whole module."""
    if method not in _FITTED:
        _FITTED[method] = adaptemb.fit(rows, method, **adaptemb.get_registry().get(method).test_params)
    return _FITTED[method]


def same(a: adaptemb.Codes, b: adaptemb.Codes) -> bool:
    left, right = a.to_arrays(), b.to_arrays()
    if left.keys() == right.keys() and all(np.array_equal(left[k], right[k]) for k in left):
        return True
    return a.kind == b.kind and np.array_equal(a.to_dense(), b.to_dense())  # another layout of the same codes


@pytest.mark.parametrize("method", ["svd", "int8", "binary", "mrl", pytest.param("csr", marks=pytest.mark.slow), "bsa"])
@pytest.mark.parametrize("side", ["doc", "query"])
def test_shards_hold_exactly_the_in_memory_codes(method: str, side: str, rows: np.ndarray, inputs: dict[str, Path],
                                                 tmp_path: Path) -> None:
    compressor = fitted(method, rows)
    expected = compressor.encode(rows) if side == "doc" else compressor.encode_queries(rows)
    for source in ("x.npy", "x.parquet", "x.safetensors"):
        out = tmp_path / source
        result = adaptemb.encode_files(inputs[source], compressor, out,
                                       side=side, shard_rows=750, batch_rows=200, progress=False)
        assert (result.rows, result.shards_written, result.shards_skipped) == (N, 3, 0)
        codes, ids = adaptemb.read_code_shards(out, ids=True)
        assert same(codes, expected), source
        np.testing.assert_array_equal(ids, np.arange(N))


def test_several_inputs_are_read_end_to_end(rows: np.ndarray, inputs: dict[str, Path], tmp_path: Path) -> None:
    csr = fitted("csr", rows)
    adaptemb.encode_files([inputs["first.npy"], inputs["rest.npy"]], csr, tmp_path, k=3,
                          shard_rows=500, batch_rows=128, progress=False)
    assert same(adaptemb.read_code_shards(tmp_path), csr.encode(rows, k=3))


def test_a_killed_run_resumes_without_redoing_finished_shards(rows: np.ndarray, inputs: dict[str, Path], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    csr = fitted("csr", rows)
    model = csr.save(tmp_path / "csr.safetensors")
    source, out = inputs["x.parquet"], tmp_path / "codes"
    real_write = adaptemb.streaming._write_shard
    written: list[str] = []

    def dies_on_the_third_shard(path: Path, codes: adaptemb.Codes, start: int) -> None:
        if len(written) == 2:
            raise KeyboardInterrupt  # the process is stopped half-way
        written.append(path.name)
        real_write(path, codes, start)

    monkeypatch.setattr(adaptemb.streaming, "_write_shard", dies_on_the_third_shard)
    with pytest.raises(KeyboardInterrupt):
        adaptemb.encode_files(source, model, out, shard_rows=400, progress=False)
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.parquet")}
    assert sorted(before) == ["part-00000.parquet", "part-00001.parquet"]
    assert not json.loads((out / "manifest.json").read_text())["complete"]
    with pytest.raises(ValueError, match="unfinished encode job"):
        adaptemb.read_code_shards(out)
    monkeypatch.setattr(adaptemb.streaming, "_write_shard", real_write)
    result = adaptemb.encode_files(source, model, out, shard_rows=400, progress=False)
    assert (result.shards_written, result.shards_skipped, result.rows) == (3, 2, 1_200)
    assert all(out.joinpath(name).stat().st_mtime_ns == ns for name, ns in before.items())  # not redone
    assert same(adaptemb.read_code_shards(out), csr.encode(rows))


def test_another_job_in_the_same_folder_is_refused(rows: np.ndarray, inputs: dict[str, Path], tmp_path: Path) -> None:
    svd = adaptemb.fit(rows, "svd")
    adaptemb.encode_files(inputs["x.npy"], svd, tmp_path, k=4, progress=False)
    with pytest.raises(ValueError, match="shards of another encode job"):
        adaptemb.encode_files(inputs["x.npy"], svd, tmp_path, k=5, progress=False)


@pytest.mark.parametrize(("method", "nbytes", "k"), [("svd", 42, 10), ("csr", 6, 8), ("bsa", 7, 8)])
def test_a_byte_budget_gives_the_codes_encode_gives(method: str, nbytes: int, k: int, rows: np.ndarray,
                                                     inputs: dict[str, Path], tmp_path: Path) -> None:
    """``bytes=B`` picks the budget once, as ``encode(x, bytes=B)`` does (svd: 4 bytes a dimension, 42 -> k=10;
    bsa's packed rows: k=8 in 7 bytes); the manifest records both; query codes are made at that k."""
    compressor = fitted(method, rows)
    result = adaptemb.encode_files(inputs["x.parquet"], compressor, tmp_path / "doc", bytes=nbytes, shard_rows=750,
                                   batch_rows=200, progress=False)
    codes, expected = adaptemb.read_code_shards(tmp_path / "doc"), compressor.encode(rows, bytes=nbytes)
    assert same(codes, expected) and codes.bytes_per_vector <= nbytes
    assert result.k == k == compressor.budget_for_bytes(nbytes)
    manifest = json.loads((tmp_path / "doc" / "manifest.json").read_text())
    assert (manifest["bytes"], manifest["k"]) == (nbytes, k)
    adaptemb.encode_files(inputs["x.npy"], compressor, tmp_path / "query", bytes=nbytes, side="query", progress=False)
    assert same(adaptemb.read_code_shards(tmp_path / "query"), compressor.encode_queries(rows, k=k))


def test_a_resumed_run_must_give_the_same_byte_budget(rows: np.ndarray, inputs: dict[str, Path], tmp_path: Path) -> None:
    svd = fitted("svd", rows)
    adaptemb.encode_files(inputs["x.npy"], svd, tmp_path, bytes=42, shard_rows=1000, progress=False)
    with pytest.raises(ValueError, match="another encode job \\(k 10 there, 6 here; bytes 42 there, 24 here\\)"):
        adaptemb.encode_files(inputs["x.npy"], svd, tmp_path, bytes=24, shard_rows=1000, progress=False)
    with pytest.raises(ValueError, match="another encode job \\(bytes 42 there, None here\\)"):  # the same k, given
        adaptemb.encode_files(inputs["x.npy"], svd, tmp_path, k=10, shard_rows=1000, progress=False)
    again = adaptemb.encode_files(inputs["x.npy"], svd, tmp_path, bytes=42, shard_rows=1000, progress=False)
    assert (again.shards_written, again.shards_skipped, again.k) == (0, 2, 10)
    with pytest.raises(adaptemb.InvalidConfigError, match="pass k=10 or bytes=42, not both"):
        adaptemb.encode_files(inputs["x.npy"], svd, tmp_path / "both", k=10, bytes=42, progress=False)
    with pytest.raises(adaptemb.InvalidConfigError, match="no budget of svd fits 3 bytes per vector"):
        adaptemb.encode_files(inputs["x.npy"], svd, tmp_path / "small", bytes=3, progress=False)
    assert not (tmp_path / "both").exists() and not (tmp_path / "small").exists()


@pytest.mark.parametrize(
    ("setup", "error", "message"),
    [
        (lambda tmp: np.save(tmp / "in.npy", np.ones((5, 7), np.float32)), ValueError, "fitted on dimension 24"),
        (lambda tmp: (tmp / "in.csv").write_text("1,2\n"), ValueError, "supported file types are .npy, .npz, .safetensors, .parquet, .fvecs"),
        (lambda tmp: (tmp / "in.npy").write_bytes(b"not numpy"), CorruptFileError, "could not read"),
        (lambda tmp: np.save(tmp / "in.npy", np.ones((5, 24), np.int64)), TypeError, "floating dtype"),
    ],
    ids=["wrong-width", "unknown-suffix", "not-numpy", "integer-rows"],
)
def test_bad_inputs_are_refused_with_clear_errors(setup, error: type[Exception], message: str, rows: np.ndarray,
                                                  tmp_path: Path) -> None:
    setup(tmp_path)
    path = next(tmp_path.glob("in.*"))
    with pytest.raises(error, match=message):
        adaptemb.encode_files(path, adaptemb.fit(rows, "svd"), tmp_path / "out", progress=False)


def test_cli_encode_and_resume(rows: np.ndarray, inputs: dict[str, Path], tmp_path: Path) -> None:
    model = adaptemb.fit(rows, "binary").save(tmp_path / "binary.safetensors")
    args = ["encode", "-i", str(inputs["x.parquet"]), "-c", str(model), "--out", str(tmp_path / "out"),
            "--shard-rows", "1000"]
    first, second = CliRunner().invoke(app, args), CliRunner().invoke(app, args)
    assert first.exit_code == 0 and "2 shards written, 0 already done" in first.output
    assert second.exit_code == 0 and "0 shards written, 2 already done" in second.output
    bad = CliRunner().invoke(app, [*args[:-2], "--shard-rows", "0"], env={"COLUMNS": "200"})
    assert bad.exit_code == 2 and "--shard-rows" in bad.output and "greater than or equal to 1" in bad.output
    one = CliRunner().invoke(app, [*args[:-3], str(tmp_path / "one"), "--shard-rows", "2000"])  # "1 shard", not "1 shards"
    assert one.exit_code == 0 and "1 shard written" in one.output and "2,000 rows" in one.output


@pytest.mark.slow
def test_ray_engine_writes_the_same_shards_and_resumes(rows: np.ndarray, inputs: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("ray")
    csr = fitted("csr", rows)
    local, distributed = tmp_path / "local", tmp_path / "ray"
    sources = [inputs["x.parquet"], inputs["x.npy"]]
    adaptemb.encode_files(sources, csr, local, shard_rows=900, progress=False)
    (distributed).mkdir()
    result = adaptemb.encode_files(sources, csr, distributed, shard_rows=900, engine="ray")
    assert (result.shards_written, result.rows) == (5, 2 * N)
    assert same(adaptemb.read_code_shards(distributed), adaptemb.read_code_shards(local))
    (distributed / "part-00002.parquet").unlink()  # as if that actor had died
    again = adaptemb.encode_files(sources, csr, distributed, shard_rows=900, engine="ray")
    assert (again.shards_written, again.shards_skipped) == (1, 4)
    assert same(adaptemb.read_code_shards(distributed), csr.encode(np.concatenate([rows, rows])))


@pytest.mark.slow
def test_ray_engine_takes_a_byte_budget(rows: np.ndarray, inputs: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("ray")
    bsa = fitted("bsa", rows)
    result = adaptemb.encode_files(inputs["x.npy"], bsa, tmp_path, bytes=7, shard_rows=900, engine="ray")
    assert (result.shards_written, result.k) == (3, 8)
    assert same(adaptemb.read_code_shards(tmp_path), bsa.encode(rows, bytes=7))
    with pytest.raises(ValueError, match="bytes 7 there, 6 here"):
        adaptemb.encode_files(inputs["x.npy"], bsa, tmp_path, bytes=6, shard_rows=900, engine="ray")


@pytest.mark.slow
def test_a_local_ray_that_times_out_at_startup_is_started_once_more(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's own error when its new local node misses the 30 s registration wait (injected: a busy machine makes
    it happen, rarely): shut down and start again once; any other error, a second timeout or a cluster address
    raises at once."""
    ray = pytest.importorskip("ray")
    from adaptemb.rows import start_ray

    calls: list[str] = []
    failures = ["The current node timed out during startup. This could happen because ..."]

    def init(**options: object) -> None:
        calls.append(f"init {options.get('address')}")
        if failures:
            raise Exception(failures.pop(0))  # noqa: TRY002  Ray raises this bare Exception itself

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    assert start_ray() is ray and calls == ["init None", "shutdown", "init None"]
    for address, errors in ((None, ["timed out during startup"] * 2), ("ray://head:10001", ["timed out during startup"]),
                            (None, ["some other failure"])):
        calls.clear()
        failures[:] = errors
        with pytest.raises(Exception, match=errors[0]):
            start_ray(address)
        assert calls == ([f"init {address}"] if len(errors) == 1 else ["init None", "shutdown", "init None"])


@pytest.mark.slow
def test_ctrl_c_on_encode_prints_the_command_that_resumes(tmp_path: Path) -> None:
    """SIGINT mid-run: exit 130, the shards so far kept, and the exact command to resume, which then finishes."""
    rows = np.random.default_rng(0).standard_normal((400_000, 32)).astype(np.float32)
    np.save(source := tmp_path / "big.npy", rows)
    model = adaptemb.fit(rows[:2000], "svd", k=8).save(tmp_path / "svd.safetensors")
    out = tmp_path / "codes"
    command = [sys.executable, "-m", "adaptemb", "encode", "-i", str(source), "-c", str(model), "--out", str(out),
               "--shard-rows", "2000", "--batch-rows", "500"]
    running = _popen_with_sigint(command)
    deadline = time.monotonic() + 120
    while not (out / "part-00001.parquet").exists() and time.monotonic() < deadline and running.poll() is None:
        time.sleep(0.05)
    running.send_signal(signal.SIGINT)
    _, stderr = running.communicate(timeout=120)
    assert running.returncode == 130, stderr
    assert "run the same command again to resume" in stderr and f"--out {out}" in stderr
    assert "Traceback" not in stderr
    resumed = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert "already done" in resumed.stdout and ", 0 already done" not in resumed.stdout
    np.testing.assert_array_equal(adaptemb.streaming.read_code_shards(out).to_dense(),
                                  adaptemb.load(model).encode(rows).to_dense())


def _popen_with_sigint(command: list[str]) -> subprocess.Popen[str]:
    """Start ``command`` with SIGINT delivered as in a terminal, also where this process ignores it (pytest started
    in the background of a non-interactive shell): a handled signal becomes the default at exec, an ignored one
    stays ignored, and Python then never raises KeyboardInterrupt."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)
