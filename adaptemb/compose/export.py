"""A composition's encode path as one torch module, for ONNX export (``Compressor.encoder(k)``).

The graph is the projection's own head (its ``encoder(r)``), its output as the float values ``encode(x, k=r)
.to_dense()`` gives (float16 values widened, int8 codes dequantised with their stored calibration), the
rotation of rank ``r`` (centre and orthogonal matrix, stored in the graph), for a 2-bit stage its two planes'
values (``adaptemb.compose.levels.lift``), for a 3-bit stage its three (``adaptemb.compose.planes.lift_planes``),
and the quantiser's own head,
whose outputs are the graph's. A composition exports when both parts do; otherwise ``refusal`` says which part
does not.
"""

from __future__ import annotations

from typing import Any

import torch

from adaptemb.codes import Codes
from adaptemb.compose.levels import SignMagnitude, lift
from adaptemb.compose.planes import SignAdditiveMagnitude, lift_planes, magnitude_patterns
from adaptemb.compose.stages import Transform, rotation_of
from adaptemb.errors import UnsupportedExportError


def refusal(name: str, projection: Any, quantizer: Any) -> str | None:
    """Why the composition ``name`` of these part instances cannot export to ONNX, naming the part; None: it can."""
    parts = [(role, part) for role, part in (("projection", projection), ("quantizer", quantizer)) if not part.exportable]
    if not parts:
        return None
    missing = " and ".join(f"its {role} {part.name}" for role, part in parts)
    return (f"{name} cannot be exported to ONNX: {missing} declares no ONNX encoder (exportable is False); a "
            "composition exports when both its projection and its quantiser do (e.g. svd+binary, svd+int8)")


class ComposedHead(torch.nn.Module):
    """Projection head, its float values, the rotation (``(y - center) @ matrix``), the planes' values where the
    stage keeps 2 or 3 bits per dimension, then the quantiser head."""

    def __init__(self, projection: torch.nn.Module, values: torch.nn.Module,
                 transform: Transform, quantizer: torch.nn.Module) -> None:
        super().__init__()
        self.projection, self.values, self.quantizer = projection, values, quantizer
        self.output_names = tuple(quantizer.output_names)
        self.two_bit = isinstance(transform, SignMagnitude)
        rotation = rotation_of(transform)
        self.rotated = rotation is not None
        if rotation is not None:
            self.register_buffer("center", rotation.center.clone())
            self.register_buffer("matrix", rotation.matrix.clone())
        if isinstance(transform, SignMagnitude):
            self.register_buffer("threshold", transform.threshold.clone())
        self.three_bit = isinstance(transform, SignAdditiveMagnitude)
        if isinstance(transform, SignAdditiveMagnitude):
            self.register_buffer("magnitudes", transform.magnitudes().clone())
            self.register_buffer("patterns", magnitude_patterns())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.values(dict(zip(self.projection.output_names, self.projection(x))))
        if self.rotated:
            y = (y - self.center) @ self.matrix
        if self.two_bit:
            y = lift(y, self.threshold)
        if self.three_bit:
            y = lift_planes(y, self.magnitudes, self.patterns)
        return tuple(self.quantizer(y))


def projected_values(sample: Codes, name: str) -> torch.nn.Module:
    """The module from the projection head's outputs to float32 values, as its codes' ``to_dense()`` gives them
    (the kind's ``onnx_values``: dense values widened, int8 codes dequantised with their calibration); a kind
    without float values in a graph is refused, naming the composition."""
    values = sample.onnx_values()
    if values is None:
        raise UnsupportedExportError(f"{name}: its projection emits {sample.kind} codes; the ONNX export of a "
                                     "composition takes a projection emitting dense or int8 values")
    return values
