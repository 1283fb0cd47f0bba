"""Saving and loading: data only, clear errors for foreign or damaged files, atomic writes."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import adaptemb
from adaptemb.serialization import atomic_write


@pytest.fixture
def x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((60, 12)).astype(np.float32)


def test_file_holds_tensors_and_readable_metadata(x: np.ndarray, tmp_path: Path) -> None:
    path = adaptemb.fit(x, "svd", k=4).save(tmp_path / "svd.safetensors")
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        meta = handle.metadata()
        assert set(handle.keys()) == {"mean", "components", "explained_variance"}
    assert meta["format"] == "adaptemb.compressor" and meta["method"] == "svd" and meta["dim"] == "12"
    assert json.loads(meta["config"]) == {"seed": 0, "k": 4, "values": "float32"}
    assert meta["adaptemb_version"] == adaptemb.__version__
    assert "pickle" not in path.read_bytes()[:2000].decode("latin-1").lower()


def test_foreign_safetensors_file_is_refused(tmp_path: Path) -> None:
    save_file({"weight": torch.zeros(2, 2)}, str(tmp_path / "foreign.safetensors"))
    with pytest.raises(adaptemb.CorruptFileError, match="not an adaptemb compressor"):
        adaptemb.load(tmp_path / "foreign.safetensors")


def test_corrupt_and_truncated_files_are_refused(x: np.ndarray, tmp_path: Path) -> None:
    good = adaptemb.fit(x, "int8").save(tmp_path / "int8.safetensors")
    (tmp_path / "truncated.safetensors").write_bytes(good.read_bytes()[:-10])
    (tmp_path / "noise.safetensors").write_bytes(b"\x00\x01 definitely not safetensors")
    for name in ("truncated", "noise"):
        with pytest.raises(adaptemb.CorruptFileError, match="not a valid safetensors file"):
            adaptemb.load(tmp_path / f"{name}.safetensors")
    with pytest.raises(FileNotFoundError, match="no such file"):
        adaptemb.load(tmp_path / "missing.safetensors")


def _rewrite(path: Path, target: Path, tensors: dict | None = None, **meta_changes: str) -> Path:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        meta = {**handle.metadata(), **meta_changes}
    save_file(tensors if tensors is not None else load_file(str(path)), str(target), metadata=meta)
    return target


def test_unknown_method_in_file_lists_registered_methods(x: np.ndarray, tmp_path: Path) -> None:
    good = adaptemb.fit(x, "svd").save(tmp_path / "svd.safetensors")
    bad = _rewrite(good, tmp_path / "bad.safetensors", method="nosuchmethod")
    with pytest.raises(adaptemb.UnknownCompressorError, match="unknown compressor 'nosuchmethod'.*available: "):
        adaptemb.load(bad)


def test_damaged_contents_are_reported_not_crashed(x: np.ndarray, tmp_path: Path) -> None:
    good = adaptemb.fit(x, "svd").save(tmp_path / "svd.safetensors")
    cases = {
        "missing-tensor": {"tensors": {"mean": torch.zeros(12)}},
        "bad-config": {"config": '{"k": "many"}'},
        "newer-format": {"format_version": "99"},
    }
    for name, change in cases.items():
        bad = _rewrite(good, tmp_path / f"{name}.safetensors", **change)
        with pytest.raises(adaptemb.CorruptFileError):
            adaptemb.load(bad)


def test_loading_through_a_subclass_checks_the_method(x: np.ndarray, tmp_path: Path) -> None:
    path = adaptemb.fit(x, "int8").save(tmp_path / "int8.safetensors")
    svd_cls = adaptemb.get_registry().get("svd")
    with pytest.raises(TypeError, match="holds a 'int8' compressor, not 'svd'"):
        svd_cls.load(path)


def test_unfitted_compressor_cannot_be_saved(tmp_path: Path) -> None:
    with pytest.raises(adaptemb.NotFittedError, match="call fit"):
        adaptemb.get_compressor("svd").save(tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()


def test_written_files_get_the_usual_permissions(x: np.ndarray, tmp_path: Path) -> None:
    import os

    mask = os.umask(0o022)
    try:
        path = adaptemb.fit(x, "svd").save(tmp_path / "svd.safetensors")
    finally:
        os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o644


def test_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"previous")

    def failing(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(target, failing)
    assert target.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]
    with pytest.raises(RuntimeError, match="disk full"):  # the folders made for a failed write go too
        atomic_write(tmp_path / "new" / "deeper" / "out.bin", failing)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]
    with pytest.raises(NotADirectoryError, match="out.bin is a file, not a folder"):
        atomic_write(target / "below" / "x.bin", lambda tmp: None)


def test_writers_create_missing_folders(x: np.ndarray, tmp_path: Path) -> None:
    """Every file writer (they all go through atomic_write) creates the folders above its target."""
    comp = adaptemb.fit(x, "svd", k=4)
    codes = comp.encode(x)
    saved = comp.save(tmp_path / "model" / "new" / "deeper" / "svd.safetensors")
    assert adaptemb.load(saved).encode(x).to_dense() == pytest.approx(codes.to_dense())
    codes_file = adaptemb.save_codes(codes, tmp_path / "codes" / "new" / "deeper" / "codes.npz")
    assert np.array_equal(adaptemb.load_codes(codes_file).to_dense(), codes.to_dense())
    index = comp.index(codes)
    index_file = index.save(tmp_path / "index" / "new" / "deeper" / "index.safetensors")
    assert np.array_equal(adaptemb.load_index(index_file).search(x[:3], 2)[1], index.search(x[:3], 2)[1])
    existing = tmp_path / "model" / "new" / "deeper" / "again.safetensors"  # some folders exist, some do not
    assert comp.save(existing).is_file()
    assert not list(tmp_path.rglob(".*.tmp"))


def test_codes_files_refuse_foreign_and_damaged_npz(x: np.ndarray, tmp_path: Path) -> None:
    np.savez(tmp_path / "plain.npz", a=np.ones(3))
    with pytest.raises(adaptemb.CorruptFileError, match="not adaptemb codes"):
        adaptemb.load_codes(tmp_path / "plain.npz")
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(adaptemb.CorruptFileError, match="not a readable .npz"):
        adaptemb.load_codes(tmp_path / "junk.npz")
    codes = adaptemb.compress(x, method="binary")
    adaptemb.save_codes(codes, tmp_path / "codes.npz")
    arrays = dict(np.load(tmp_path / "codes.npz"))
    arrays["__adaptemb__"] = np.array(json.dumps({"format": "adaptemb.codes", "format_version": "1",
                                                  "kind": "binary", "dim": 12, "n": 999}))
    np.savez(tmp_path / "lying.npz", **arrays)
    with pytest.raises(adaptemb.CorruptFileError, match="declares 999 rows but holds 60"):
        adaptemb.load_codes(tmp_path / "lying.npz")
