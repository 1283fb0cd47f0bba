"""``int8``: per-dimension calibrated scalar quantisation to int8 (4x smaller than float32)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field

from adaptemb import (
    Codes,
    Compressor,
    CompressorConfig,
    IntegerEmbeddings,
    InvalidConfigError,
    QuantizedCodes,
    adds_compressors,
)

from .unbudgeted import Unbudgeted

_LEVELS = 127  # codes lie in [-127, 127], symmetric around each dimension's calibrated centre
_QUANTILE_SAMPLE_ROWS = 100_000


class Int8Config(CompressorConfig):
    calibration: Literal["minmax", "quantile"] = Field(
        "minmax", description="Per-dimension range: the training min/max, or clipped quantiles."
    )
    quantile: float = Field(
        0.001, gt=0.0, lt=0.5, description="With calibration='quantile': fraction clipped at each end."
    )


class Int8Compressor(Unbudgeted, Compressor):
    """int8 scalar quantisation with per-dimension ranges calibrated on the fit data."""

    name = "int8"
    role = "quantizer"
    Config = Int8Config
    budget_help = "no budget: keeps all d dims at 1 byte each"
    exportable = True
    doc_kind = "int8"
    accepts_input_kinds = ("int8",)
    config: Int8Config

    def _fit(self, x: torch.Tensor, **supervision: object) -> None:
        if self.config.calibration == "minmax":
            low, high = x.min(dim=0).values, x.max(dim=0).values
        else:
            sample = x
            if len(x) > _QUANTILE_SAMPLE_ROWS:
                sample = x[torch.randperm(len(x), generator=self.generator)[:_QUANTILE_SAMPLE_ROWS]]
            q = self.config.quantile
            bounds = np.quantile(sample.double().numpy(), [q, 1.0 - q], axis=0)
            low, high = torch.from_numpy(bounds[0]).float(), torch.from_numpy(bounds[1]).float()
        self._offset = ((low + high) / 2).contiguous()
        self._scale = ((high - low) / (2 * _LEVELS)).contiguous()

    def _fit_passthrough(self, given: IntegerEmbeddings, **supervision: object) -> None:
        """int8 input (``input_kind="int8"``): no calibration; the input's scale and offset are the compressor's."""
        explicit = sorted(self.config.model_fields_set & {"calibration", "quantile"})
        if explicit:
            raise InvalidConfigError(
                f"int8 keeps int8 input as it is (its codes are the given values, with input_scale and input_offset), "
                f"so it calibrates nothing: {' and '.join(explicit)} {'does' if len(explicit) == 1 else 'do'} not apply; leave "
                "them out, or fit on float embeddings"
            )
        assert given.scale is not None and given.offset is not None
        self._scale = torch.from_numpy(given.scale.copy())
        self._offset = torch.from_numpy(given.offset.copy())

    def _encode_passthrough(self, given: IntegerEmbeddings) -> Codes:
        """The given int8 values as the codes, byte for byte, when they share this compressor's scale and offset."""
        assert given.scale is not None and given.offset is not None
        scale, offset = self._scale.numpy(), self._offset.numpy()
        if not (np.array_equal(given.scale, scale) and np.array_equal(given.offset, offset)):
            which = [name for name, a, b in (("input_scale", given.scale, scale), ("input_offset", given.offset, offset))
                     if not np.array_equal(a, b)]
            raise ValueError(
                f"these int8 embeddings come with another {' and '.join(which)} than this int8 compressor's calibration "
                f"(scale {_describe(scale)}, offset {_describe(offset)}); int8 keeps int8 input as it is, so it needs "
                "the values it was fitted with: pass those, or fit int8 on these embeddings (input_kind='int8')"
            )
        return QuantizedCodes(given.values.copy(), scale, offset)

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        (codes,) = self.encoder(k)(x)
        return QuantizedCodes(codes.numpy(), self._scale.numpy(), self._offset.numpy())

    def encoder(self, k: int) -> torch.nn.Module:
        return _Quantise(self._offset, self._scale)

    def _state(self) -> dict[str, torch.Tensor]:
        return {"scale": self._scale, "offset": self._offset}

    def _state_shapes(self, dim: int) -> dict[str, tuple[int | str, ...]]:
        return {"scale": (dim,), "offset": (dim,)}

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self._scale, self._offset = tensors["scale"], tensors["offset"]
        if self._scale.shape != self._offset.shape or self._scale.ndim != 1:
            raise ValueError("scale and offset must be 1-D tensors of equal length")


def _describe(values: np.ndarray) -> str:
    """One value when all are equal, else the range: for error messages."""
    low, high = float(values.min()), float(values.max())
    return f"{low:.6g}" if low == high else f"{low:.6g}..{high:.6g} per dimension"


class _Quantise(torch.nn.Module):
    """The encoder: round((x - offset) / scale) clamped to [-127, 127] (ONNX-exportable)."""

    output_names = ("codes",)

    def __init__(self, offset: torch.Tensor, scale: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("offset", offset.clone())
        # a constant dimension (scale 0) always quantises to 0 and decodes to its offset
        self.register_buffer("safe_scale", torch.where(scale > 0, scale, torch.ones_like(scale)))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        codes = torch.round((x - self.offset) / self.safe_scale).clamp(-_LEVELS, _LEVELS)
        return (codes.to(torch.int8),)


register_compressors = adds_compressors(Int8Compressor)
