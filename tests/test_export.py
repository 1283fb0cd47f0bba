"""ONNX export refuses what it cannot honour and never leaves a file when parity fails."""

from pathlib import Path

import numpy as np
import pytest
import torch

import adaptemb

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


@pytest.mark.slow
def test_a_wrong_encoder_fails_parity_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(0).standard_normal((40, 8)).astype(np.float32)
    comp = adaptemb.fit(x, "svd")
    honest = comp.encoder

    def off_by_one(k: int) -> torch.nn.Module:
        module = honest(k)
        module.mean += 1.0
        return module

    monkeypatch.setattr(comp, "encoder", off_by_one)
    with pytest.raises(ValueError, match="does not match encode"):
        comp.export_onnx(tmp_path / "bad.onnx", sample=x)
    with pytest.raises(ValueError, match="does not match encode"):  # nor the folders made for it
        comp.export_onnx(tmp_path / "new" / "deeper" / "bad.onnx", sample=x)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_export_creates_missing_folders(tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal((40, 8)).astype(np.float32)
    target = tmp_path / "new" / "deeper" / "svd.onnx"
    parity = adaptemb.fit(x, "svd").export_onnx(target, sample=x)
    assert parity.rows == 40 and target.is_file()


def test_export_checks_budget_and_fit_state(tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal((40, 8)).astype(np.float32)
    with pytest.raises(adaptemb.NotFittedError):
        adaptemb.get_compressor("svd").export_onnx(tmp_path / "x.onnx")
    with pytest.raises(ValueError, match="int8 has no budget"):
        adaptemb.fit(x, "int8").export_onnx(tmp_path / "x.onnx", k=3)
    assert list(tmp_path.iterdir()) == []
