"""int8 codes with a per-dimension affine calibration shared by all rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from adaptemb.codes.base import Codes, decoded_inner_products, select_rows


class QuantizedCodes(Codes):
    """int8 codes with per-dimension affine calibration: ``x ≈ offset + scale * code``.

    ``scale`` and ``offset`` (float32, shape (dim,)) are shared by all rows. ``similarity`` is the
    exact inner product of the dequantised vectors, computed blockwise in float32.
    """

    kind = "int8"
    shared_arrays = ("scale", "offset")
    onnx_outputs = ("codes",)
    vector_form = "dense"
    compact_vector_dtype = "uint8"
    vector_quantization = "int8_scalar"

    def __init__(self, codes: np.ndarray, scale: np.ndarray, offset: np.ndarray) -> None:
        if codes.dtype != np.int8 or codes.ndim != 2:
            raise ValueError(f"int8 codes need a 2-D int8 array; got {codes.dtype} {codes.shape}")
        if scale.shape != (codes.shape[1],) or offset.shape != (codes.shape[1],):
            raise ValueError("scale and offset must have shape (dim,)")
        self.codes = codes
        self.scale = scale.astype(np.float32, copy=False)
        self.offset = offset.astype(np.float32, copy=False)
        self.dim = codes.shape[1]

    def __len__(self) -> int:
        return self.codes.shape[0]

    def __getitem__(self, rows: slice | np.ndarray | Sequence[int]) -> QuantizedCodes:
        return QuantizedCodes(self.codes[select_rows(rows)], self.scale, self.offset)

    @property
    def row_nbytes(self) -> int:
        return self.codes.nbytes

    @property
    def shared_nbytes(self) -> int:
        return self.scale.nbytes + self.offset.nbytes

    def to_dense(self) -> np.ndarray:
        return self.offset + self.scale * self.codes.astype(np.float32)

    def similarity(self, other: Codes) -> np.ndarray:
        self._check_same_kind(other)
        assert isinstance(other, QuantizedCodes)
        if not (np.array_equal(self.scale, other.scale) and np.array_equal(self.offset, other.offset)):
            raise ValueError("int8 codes come from different calibrations; encode both with one compressor")
        return decoded_inner_products(self.to_dense(), other)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"codes": self.codes, "scale": self.scale, "offset": self.offset}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], dim: int) -> QuantizedCodes:
        return cls(arrays["codes"], arrays["scale"], arrays["offset"])

    @classmethod
    def concat(cls, parts: Sequence[QuantizedCodes]) -> QuantizedCodes:
        return cls(np.concatenate([p.codes for p in parts]), parts[0].scale, parts[0].offset)

    @classmethod
    def onnx_graph(cls, outputs: dict[str, Any], dim: int) -> tuple[Any, ...]:
        return (outputs["codes"],)

    def onnx_values(self) -> torch.nn.Module:
        """The ``codes`` output dequantised with these codes' calibration, ``offset + scale * code``."""
        return _Dequantised(self.scale, self.offset)

    def parity_vectors(self, name: str, array: np.ndarray) -> np.ndarray:
        """``codes`` dequantised (``offset + scale * code``, float64) for the code cosine."""
        rows = super().parity_vectors(name, array)
        if name != "codes":
            return rows
        return self.offset.astype(np.float64) + self.scale.astype(np.float64) * rows

    def vector_rows(self) -> np.ndarray:
        """The dequantised rows ``offset + scale * code``: their dot product is ``similarity``."""
        return self.to_dense()

    def compact_vector_rows(self) -> np.ndarray:
        """uint8 ``code + 128``: a byte a dimension, whose dot product only approximates the dequantised one."""
        return (self.codes.astype(np.int16) + 128).astype(np.uint8)


class _Dequantised(torch.nn.Module):
    """``offset + scale * codes`` of a head's int8 ``codes`` output, in float32, inside a graph."""

    def __init__(self, scale: np.ndarray, offset: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("scale", torch.from_numpy(scale.copy()))
        self.register_buffer("offset", torch.from_numpy(offset.copy()))

    def forward(self, outputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.offset + self.scale * outputs["codes"].to(torch.float32)
