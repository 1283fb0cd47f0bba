"""A compressor's encode path as an ONNX graph: the ``OnnxExport`` members of the public ``Compressor``.

A method that exports declares ``exportable = True`` and implements ``encoder(k)``: the encode path at budget
``k`` as one torch module, float32 (n, d) in, a tuple of tensors out, named by its ``output_names``.
``export_onnx`` exports that module alone (input ``embeddings``) and checks it under onnxruntime against
``encode``; ``adaptemb.export_encoder`` joins it to a backbone. Nothing here imports the ONNX packages until
an export runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from adaptemb.codes import Codes
from adaptemb.errors import UnsupportedExportError
from adaptemb.onnx.parity import OnnxParity, export_checked
from adaptemb.onnx.sessions import require_onnx
from adaptemb.validation import as_matrix

SAMPLE_ROWS = 64
"""Rows of the default parity sample of ``export_onnx`` (seeded standard-normal rows)."""


class OnnxExport:
    """ONNX export of a compressor's encode path (a mixin of ``Compressor``; it uses the compressor's
    ``name``, ``dim``, ``generator``, ``budgets()`` and ``encode``)."""

    exportable: ClassVar[bool] = False
    """True when ``encoder(k)`` gives the encode path as one torch module, so ``export_onnx`` and
    ``adaptemb.export_encoder`` can export this method. Declared by each method that implements ``encoder``
    (``exportable = True``); a method that exports only some configurations makes it a property that says so."""

    name: ClassVar[str]

    def export_refusal(self) -> str:
        """Why this compressor does not export to ONNX (the ``UnsupportedExportError`` message); a method whose
        export depends on its parts or configuration says which one stops it."""
        return f"{self.name} cannot be exported to ONNX (its exportable is False)"

    def encoder(self, k: int) -> torch.nn.Module:
        """The encode path at budget ``k`` as one torch module (the ONNX export path): float32 (n, d) in, a tuple
        of tensors out, named by its ``output_names`` like the arrays of ``encode(x, k).to_arrays()`` (shared
        tables such as int8 scales excluded). Methods that cannot export raise ``UnsupportedExportError`` (a
        ``NotImplementedError``)."""
        raise UnsupportedExportError(f"{self.name} does not support ONNX export (its exportable is False)")

    def encoder_arrays(self, codes: Codes, k: int) -> dict[str, np.ndarray]:
        """The arrays ``encoder(k)`` emits, by output name, for rows ``encode(rows, k)`` gave as ``codes``: what
        ``export_onnx`` checks the graph against. By default ``codes.to_arrays()``; a method whose encoder lays
        its codes out otherwise (``bsa``'s fixed ``indices``, which mark a zero row's empty set with -1) overrides it."""
        return codes.to_arrays()

    def export_onnx(self, path: str | Path, k: int | None = None, *, sample: Any = None) -> OnnxParity:
        """Export the encoder at budget ``k`` to ONNX and check it against onnxruntime.

        Returns the parity measured on ``sample`` rows (default: 64 seeded standard-normal rows; all-zero rows
        are fine); the file is written only when onnxruntime reproduces ``encode`` (as ``encoder_arrays`` lays it
        out). Needs ``pip install 'adaptemb[onnx]'``.
        """
        compressor: Any = self
        compressor._require_fitted()
        if not self.exportable:
            raise UnsupportedExportError(self.export_refusal())
        budget = compressor.budgets().resolve(k, self.name)
        require_onnx()
        if sample is not None:
            rows = as_matrix(sample, name="sample", dim=compressor.dim)
        else:
            rows = torch.randn(SAMPLE_ROWS, compressor.dim, generator=compressor.generator)
        expected = self.encoder_arrays(compressor.encode(rows, k=budget), budget)
        return export_checked(self.encoder(budget), rows, path, expected)
