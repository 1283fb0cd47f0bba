"""An approximate index built from the code shards ``adaptemb encode`` writes (``build_index_from_shards``): the
same index as the in-memory build, resumed after a real kill, and refused for another build's work folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from ann_support import data, fitted

import adaptemb
from adaptemb import AnnConfig
from adaptemb.index_build import build_index_from_shards

pytestmark = pytest.mark.slow  # the compressor's fit; each build after it takes a second or two
CONFIG = {"cells": 32, "calibration_queries": 300, "sample": 5000}


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[adaptemb.Compressor, Path, Path]:
    """(the compressor, its saved file, the corpus' document codes as 16 shards of 500 rows)."""
    compressor, _ = fitted("csr")
    corpus, _ = data()
    folder = tmp_path_factory.mktemp("shards")
    np.save(folder / "corpus.npy", corpus)
    model = compressor.save(folder / "csr.safetensors")
    adaptemb.encode_files(folder / "corpus.npy", model, folder / "codes", bytes=16, shard_rows=500, progress=False)
    return compressor, model, folder / "codes"


def test_the_index_built_from_shards_is_the_in_memory_one(shards: tuple, tmp_path: Path) -> None:
    compressor, model, codes_folder = shards
    path = build_index_from_shards(codes_folder, model, tmp_path / "ann.safetensors", ann=CONFIG)
    assert not Path(f"{path}.building").exists()
    streamed = adaptemb.load_index(path)
    in_memory = compressor.index(adaptemb.read_code_shards(codes_folder), ann=AnnConfig(**CONFIG))
    np.testing.assert_array_equal(streamed.store.main.offsets, in_memory.store.main.offsets)
    np.testing.assert_array_equal(streamed.store.main.ids, in_memory.store.main.ids)
    assert streamed.store.main.ids.dtype == in_memory.store.main.ids.dtype
    assert streamed.bytes_per_vector == in_memory.bytes_per_vector
    np.testing.assert_array_equal(streamed.calibration.recall, in_memory.calibration.recall)
    np.testing.assert_array_equal(streamed.store.main.codes.packed, in_memory.store.main.codes.packed)
    np.testing.assert_array_equal(streamed.router.centroids, in_memory.router.centroids.astype(np.float16))
    assert (streamed.router.basis is None) == (in_memory.router.basis is None)  # None: queries routed as they are
    if streamed.router.basis is not None:
        np.testing.assert_array_equal(streamed.router.basis, in_memory.router.basis.astype(np.float16))
    _, queries = data()
    for nprobe in (2, 8):
        np.testing.assert_array_equal(streamed.search(queries, 10, nprobe=nprobe)[1],
                                      in_memory.search(queries, 10, nprobe=nprobe)[1])


def test_a_killed_build_resumes_and_gives_the_same_index(shards: tuple, tmp_path: Path) -> None:
    _, model, codes_folder = shards
    whole = build_index_from_shards(codes_folder, model, tmp_path / "whole.safetensors", ann=CONFIG)
    target = tmp_path / "killed.safetensors"
    work = Path(f"{target}.building")
    script = ("import sys; from adaptemb.index_build import build_index_from_shards as b; "
              f"b(sys.argv[1], sys.argv[2], sys.argv[3], ann={CONFIG!r})")
    child = subprocess.Popen([sys.executable, "-c", script, str(codes_folder), str(model), str(target)],
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    deadline = time.monotonic() + 120
    while not (work / "filled.json").is_file() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL, "the build ended before it was killed"
    assert not target.exists() and (work / "router.npz").is_file() and len(list((work / "assign").iterdir())) == 16
    build_index_from_shards(codes_folder, model, target, ann=CONFIG)
    assert target.read_bytes() == whole.read_bytes() and not work.exists()


def test_a_work_folder_of_another_build_is_refused(shards: tuple, tmp_path: Path) -> None:
    _, model, codes_folder = shards
    target = tmp_path / "ann.safetensors"
    work = Path(f"{target}.building")
    work.mkdir()
    (work / "job.json").write_text('{"shards": "other"}')
    with pytest.raises(ValueError, match="holds an unfinished build of other codes, compressor or settings"):
        build_index_from_shards(codes_folder, model, target, ann=CONFIG)


def test_the_cli_builds_the_same_index_and_says_what_was_wrong(shards: tuple, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from adaptemb.cli import app

    _, model, codes_folder = shards
    args = ["index", "build", "--codes", str(codes_folder), "-c", str(model), "--out", str(tmp_path / "cli.safetensors"),
            "--cells", "32"]
    config = ["--recall", "0.9"]
    wrong = CliRunner().invoke(app, [*args, "--recall", "1.5"])
    assert wrong.exit_code != 0 and "recall" in wrong.output and "less than or equal to 1" in wrong.output
    assert not (tmp_path / "cli.safetensors").exists()
    # the CLI sets cells and recall only; the rest are AnnConfig's defaults, as the library call with them
    built = CliRunner().invoke(app, [*args, *config])
    assert built.exit_code == 0, built.output
    default = build_index_from_shards(codes_folder, model, tmp_path / "default.safetensors",
                                      ann={"cells": 32, "recall": 0.9})
    assert (tmp_path / "cli.safetensors").read_bytes() == default.read_bytes()
