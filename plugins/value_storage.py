"""How dense methods (``svd``, ``mrl``) store their float values: float32, float16, or int8 with a range
calibrated on the fit rows (the ``values`` option): 4, 2 or 1 byte per kept dimension. ``StoredValuesProjection``
is what the projections whose codes are those values (``svd``, ``mrl``, ``cllr``) declare alike.

float16 codes are ``DenseCodes`` of float16 values (searched by the dense index like float32 ones); int8
codes are ``QuantizedCodes`` (``offset + scale * code``, searched by the int8 index), queries encoded the same
way. The encoder module wraps the method's float encoder, so ONNX export still reproduces ``encode``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch

from adaptemb import Codes, DenseCodes, QuantizedCodes

Values = Literal["float32", "float16", "int8"]
LEVELS = 127  # int8 codes lie in [-127, 127]
VALUES_HELP = ("How each kept value is stored: float32 (4 B), float16 (2 B) or int8 (1 B, a range per dimension "
               "calibrated on the fit rows).")


def code_kind(values: str) -> str:
    """The code kind a method emits with this ``values`` option."""
    return "int8" if values == "int8" else "dense"


class StoredValuesProjection:
    """Mixin, listed before ``Compressor``, of a projection whose codes are its float values stored as the config's
    ``values`` says: a composition's first part (``role``), exportable to ONNX, and its code kind follows
    ``values`` (``int8`` codes for int8 values, else ``dense``)."""

    config: Any
    """The method's config: it has a ``values`` field (``Values`` or some of them)."""
    role: ClassVar[Literal["projection"]] = "projection"
    exportable: ClassVar[bool] = True

    @property
    def doc_kind(self) -> str:
        return code_kind(self.config.values)


def calibrate(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, offset) per column of ``z``: its range over the rows mapped onto [-127, 127]."""
    low, high = z.min(dim=0).values, z.max(dim=0).values
    return ((high - low) / (2 * LEVELS)).contiguous(), ((low + high) / 2).contiguous()


class StoreValues(torch.nn.Module):
    """An encoder's float ``values`` stored as ``values`` (float32 / float16) or int8 ``codes``."""

    def __init__(self, inner: torch.nn.Module, values: str, scale: torch.Tensor | None = None,
                 offset: torch.Tensor | None = None) -> None:
        super().__init__()
        self.inner, self.values = inner, values
        self.output_names = ("codes",) if values == "int8" else ("values",)
        if values == "int8":
            assert scale is not None and offset is not None
            self.register_buffer("offset", offset.clone())
            self.register_buffer("safe_scale", torch.where(scale > 0, scale, torch.ones_like(scale)))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        (z,) = self.inner(x)
        if self.values == "float16":
            return (z.to(torch.float16),)
        if self.values == "int8":
            return (torch.round((z - self.offset) / self.safe_scale).clamp(-LEVELS, LEVELS).to(torch.int8),)
        return (z,)


def as_codes(output: torch.Tensor, values: str, scale: torch.Tensor | None = None,
             offset: torch.Tensor | None = None) -> Codes:
    """The ``StoreValues`` output as codes: ``DenseCodes`` or ``QuantizedCodes`` (with its calibration)."""
    if values == "int8":
        assert scale is not None and offset is not None
        return QuantizedCodes(output.numpy(), scale.numpy(), offset.numpy())
    return DenseCodes(output.numpy())
