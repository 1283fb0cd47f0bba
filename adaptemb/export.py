"""Exporting a fitted compressor's encoder to ONNX, checked against onnxruntime.

A method supports export by implementing ``Compressor._onnx_encoder(k)``: a ``torch.nn.Module`` that
maps a float32 batch (n, d) to a tuple of tensors named like the arrays of its codes'
``to_arrays()`` (shared tables such as int8 scales excluded), listed by ``module.output_names``.
After export the ONNX graph runs under onnxruntime on sample rows and must reproduce
``compressor.encode`` (floats within tolerance, integers exactly, up to ``max_mismatch``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from adaptemb.compressor import Array, Compressor
from adaptemb.serialization import atomic_write
from adaptemb.validation import as_matrix


@dataclass(frozen=True)
class OnnxParity:
    """How closely onnxruntime reproduced ``encode`` on the sample rows."""

    rows: int
    max_abs_diff: float
    integer_mismatch: float

    def __str__(self) -> str:
        return (
            f"onnxruntime parity on {self.rows} rows: max |diff| {self.max_abs_diff:.2e}, "
            f"integer mismatches {self.integer_mismatch:.4%}"
        )


def export_onnx(
    compressor: Compressor,
    path: str | Path,
    k: int | None = None,
    *,
    sample: Array | None = None,
    atol: float = 1e-4,
    max_mismatch: float = 1e-3,
) -> OnnxParity:
    """Write the encoder at budget ``k`` to ``path`` (atomically) and check it with onnxruntime.

    ``sample`` rows (default: 64 standard-normal rows) feed the parity check; a model that fails
    it is not written and ``ValueError`` says by how much it missed.
    """
    _require_onnx()
    if not compressor.is_fitted:
        compressor.budgets()  # raises NotFittedError with the usual message
    budget = compressor.budgets().resolve(k, compressor.name)
    rows = _sample_rows(compressor, sample)
    module = compressor._onnx_encoder(budget).eval()
    names = list(module.output_names)
    parity: list[OnnxParity] = []

    def export_and_check(tmp: Path) -> None:
        _export(module, rows, tmp, names)
        parity.append(check_onnx(tmp, compressor, budget, rows, names, atol=atol, max_mismatch=max_mismatch))

    atomic_write(path, export_and_check)
    return parity[0]


def check_onnx(
    model_path: Path, compressor: Compressor, k: int, rows: torch.Tensor, names: list[str],
    *, atol: float, max_mismatch: float,
) -> OnnxParity:
    """Run the ONNX model under onnxruntime and compare its outputs with ``compressor.encode``."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    outputs = dict(zip(names, session.run(names, {"embeddings": rows.numpy()})))
    expected = compressor.encode(rows, k=k).to_arrays()
    max_diff, mismatched, total = 0.0, 0, 0
    for name in names:
        got, want = outputs[name], expected[name]
        if got.shape != want.shape:
            raise ValueError(f"ONNX output {name!r} has shape {got.shape}, encode gives {want.shape}")
        if np.issubdtype(want.dtype, np.floating):
            max_diff = max(max_diff, float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max(initial=0.0)))
        else:
            mismatched += int((got.astype(np.int64) != want.astype(np.int64)).sum())
            total += want.size
    parity = OnnxParity(len(rows), max_diff, mismatched / total if total else 0.0)
    if max_diff > atol or parity.integer_mismatch > max_mismatch:
        raise ValueError(f"exported ONNX encoder does not match encode(): {parity} (atol {atol}, max_mismatch {max_mismatch})")
    return parity


def _export(module: torch.nn.Module, rows: torch.Tensor, target: Path, names: list[str]) -> None:
    batch = torch.export.Dim("batch", min=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module, (rows,), dynamo=True, input_names=["embeddings"], output_names=names,
            dynamic_shapes=({0: batch},), verbose=False,
        )
    program.save(str(target))


def _sample_rows(compressor: Compressor, sample: Array | None) -> torch.Tensor:
    if sample is not None:
        return as_matrix(sample, name="sample", dim=compressor.dim)
    generator = torch.Generator().manual_seed(compressor.config.seed)
    assert compressor.dim is not None
    return torch.randn(64, compressor.dim, generator=generator)


def _require_onnx() -> None:
    missing = [name for name in ("onnx", "onnxruntime", "onnxscript") if not _importable(name)]
    if missing:
        raise ModuleNotFoundError(f"ONNX export needs {', '.join(missing)}: pip install 'adaptemb[onnx]'")


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
