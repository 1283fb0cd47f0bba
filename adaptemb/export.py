"""Exporting a torch encoder module to ONNX, checked against onnxruntime.

``export_checked`` traces a module that maps a float32 batch (n, d) to a tuple of tensors, writes the
ONNX graph atomically and runs it under onnxruntime on sample rows: the outputs must reproduce the
reference arrays (floats within ``atol``, integers exactly up to ``max_mismatch``) or nothing is written.
``Compressor.export_onnx`` uses it with the compressor's ``encoder(k)`` and ``encode``.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from adaptemb.serialization import atomic_write

INPUT_NAME = "embeddings"


@dataclass(frozen=True)
class OnnxParity:
    """How closely onnxruntime reproduced the reference on the sample rows."""

    rows: int
    max_abs_diff: float
    integer_mismatch: float

    def __str__(self) -> str:
        return (
            f"onnxruntime parity on {self.rows} rows: max |diff| {self.max_abs_diff:.2e}, "
            f"integer mismatches {self.integer_mismatch:.4%}"
        )


def export_checked(
    module: torch.nn.Module,
    rows: torch.Tensor,
    path: str | Path,
    output_names: list[str],
    reference: Callable[[torch.Tensor], Mapping[str, np.ndarray]],
    *,
    atol: float = 1e-4,
    max_mismatch: float = 1e-3,
) -> OnnxParity:
    """Export ``module`` to ``path`` (atomically) and check it with onnxruntime against ``reference(rows)``."""
    require_onnx()
    parity: list[OnnxParity] = []

    def export_and_check(tmp: Path) -> None:
        _export(module.eval(), rows, tmp, output_names)
        outputs = run_onnx(tmp, rows.numpy(), output_names)
        parity.append(compare_outputs(outputs, reference(rows), len(rows), atol=atol, max_mismatch=max_mismatch))

    atomic_write(path, export_and_check)
    return parity[0]


def run_onnx(model_path: Path, rows: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """The named outputs of an ONNX model on ``rows`` under onnxruntime (CPU)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    return dict(zip(names, session.run(names, {INPUT_NAME: rows})))


def compare_outputs(
    outputs: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], rows: int, *, atol: float, max_mismatch: float
) -> OnnxParity:
    """Parity of ``outputs`` with ``expected`` (same names); ``ValueError`` when it misses the tolerances."""
    max_diff, mismatched, total = 0.0, 0, 0
    for name, got in outputs.items():
        want = expected[name]
        if got.shape != want.shape:
            raise ValueError(f"ONNX output {name!r} has shape {got.shape}, the reference gives {want.shape}")
        if np.issubdtype(want.dtype, np.floating):
            max_diff = max(max_diff, float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max(initial=0.0)))
        else:
            mismatched += int((got.astype(np.int64) != want.astype(np.int64)).sum())
            total += want.size
    parity = OnnxParity(rows, max_diff, mismatched / total if total else 0.0)
    if max_diff > atol or parity.integer_mismatch > max_mismatch:
        raise ValueError(f"exported ONNX encoder does not match encode(): {parity} (atol {atol}, max_mismatch {max_mismatch})")
    return parity


def _export(module: torch.nn.Module, rows: torch.Tensor, target: Path, names: list[str]) -> None:
    batch = torch.export.Dim("batch", min=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module, (rows,), dynamo=True, input_names=[INPUT_NAME], output_names=names,
            dynamic_shapes=({0: batch},), verbose=False,
        )
    program.save(str(target))


def require_onnx() -> None:
    """``ModuleNotFoundError`` with the install command when the ONNX packages are missing."""
    missing = [name for name in ("onnx", "onnxruntime", "onnxscript") if importlib.util.find_spec(name) is None]
    if missing:
        raise ModuleNotFoundError(f"ONNX export needs {', '.join(missing)}: pip install 'adaptemb[onnx]'")
