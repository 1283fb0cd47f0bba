"""Dense float codes (a prefix, a projection), scored by dot product."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from adaptemb.codes.base import Codes, select_rows


class DenseCodes(Codes):
    """Dense float vectors (a prefix, a projection); scored by dot product."""

    kind = "dense"
    onnx_outputs = ("codes",)
    vector_form = "dense"

    def __init__(self, values: np.ndarray) -> None:
        if values.ndim != 2 or values.dtype not in (np.float16, np.float32):
            raise ValueError(f"dense codes need a 2-D float16/float32 array; got {values.dtype} {values.shape}")
        self.values = values
        self.dim = values.shape[1]

    def __len__(self) -> int:
        return self.values.shape[0]

    def __getitem__(self, rows: slice | np.ndarray | Sequence[int]) -> DenseCodes:
        return DenseCodes(self.values[select_rows(rows)])

    @property
    def row_nbytes(self) -> int:
        return self.values.nbytes

    def to_dense(self) -> np.ndarray:
        return self.values.astype(np.float32, copy=False)

    def similarity(self, other: Codes) -> np.ndarray:
        self._check_same_kind(other)
        assert isinstance(other, DenseCodes)
        return self.to_dense() @ other.to_dense().T

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"values": self.values}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], dim: int) -> DenseCodes:
        return cls(arrays["values"])

    @classmethod
    def concat(cls, parts: Sequence[DenseCodes]) -> DenseCodes:
        return cls(np.concatenate([p.values for p in parts]))

    @classmethod
    def onnx_graph(cls, outputs: dict[str, Any], dim: int) -> tuple[Any, ...]:
        return (outputs["values"],)

    def onnx_arrays(self, head_outputs: Sequence[str]) -> dict[str, np.ndarray]:
        return {"codes": self.values}

    def from_onnx_arrays(self, arrays: dict[str, np.ndarray]) -> DenseCodes:
        return DenseCodes(arrays["codes"])

    def vector_rows(self) -> np.ndarray:
        return self.to_dense()

    def onnx_values(self) -> torch.nn.Module:
        """The ``values`` output (float32 or float16) in float32."""
        return _Float32Values()


class _Float32Values(torch.nn.Module):
    """A head's ``values`` output in float32, inside a graph."""

    def forward(self, outputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return outputs["values"].to(torch.float32)
