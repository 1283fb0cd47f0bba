"""Sign bits packed 8 per byte, scored by the ±1 dot product (the Hamming ranking)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from adaptemb.codes.base import Codes, blockwise_scores, select_rows


class BinaryCodes(Codes):
    """Sign bits packed 8 per byte (bit set = positive); stands for a vector of +1/-1.

    ``similarity`` is the +1/-1 dot product, ``dim - 2 * hamming``: it ranks exactly as Hamming
    distance does and is on the scale of a dot product.
    """

    kind = "binary"
    onnx_outputs = ("bits",)
    vector_form = "dense"
    vector_quantization = "sign_bits"

    def __init__(self, packed: np.ndarray, dim: int) -> None:
        if packed.dtype != np.uint8 or packed.ndim != 2 or packed.shape[1] != (dim + 7) // 8:
            raise ValueError(f"binary codes need uint8 of shape (n, {(dim + 7) // 8}); got {packed.dtype} {packed.shape}")
        self.packed = packed
        self.dim = int(dim)

    @classmethod
    def from_signs(cls, x: np.ndarray) -> BinaryCodes:
        """Pack ``x > 0`` of a 2-D array."""
        return cls(pack_signs(x), x.shape[1])

    def __len__(self) -> int:
        return self.packed.shape[0]

    def __getitem__(self, rows: slice | np.ndarray | Sequence[int]) -> BinaryCodes:
        return BinaryCodes(self.packed[select_rows(rows)], self.dim)

    @property
    def row_nbytes(self) -> int:
        return self.packed.nbytes

    def bits(self) -> np.ndarray:
        """The unpacked 0/1 bits as uint8, shape (n, dim)."""
        return np.unpackbits(self.packed, axis=1, count=self.dim)

    def to_dense(self) -> np.ndarray:
        return self.bits().astype(np.float32) * 2.0 - 1.0

    def hamming(self, other: BinaryCodes) -> np.ndarray:
        """Hamming distances (len(self), len(other)) as int32."""
        self._check_same_kind(other)
        return ((self.dim - self.similarity(other)) / 2).round().astype(np.int32)

    def similarity(self, other: Codes) -> np.ndarray:
        self._check_same_kind(other)
        assert isinstance(other, BinaryCodes)
        ones_a = self.bits().astype(np.float32)

        def block_scores(block: BinaryCodes) -> np.ndarray:
            ones_b = block.bits().astype(np.float32)
            common = ones_a @ ones_b.T  # |a AND b|, exact in float32 for dim < 2**24
            hamming = ones_a.sum(1, keepdims=True) + ones_b.sum(1)[None, :] - 2.0 * common
            return self.dim - 2.0 * hamming

        return blockwise_scores(other, len(self), block_scores)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"packed": self.packed}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], dim: int) -> BinaryCodes:
        return cls(arrays["packed"], dim)

    @classmethod
    def concat(cls, parts: Sequence[BinaryCodes]) -> BinaryCodes:
        return cls(np.concatenate([p.packed for p in parts]), parts[0].dim)

    @classmethod
    def onnx_graph(cls, outputs: dict[str, Any], dim: int) -> tuple[Any, ...]:
        return (outputs["packed"].to(torch.uint8),)

    def onnx_arrays(self, head_outputs: Sequence[str]) -> dict[str, np.ndarray]:
        return {"bits": self.packed}

    def from_onnx_arrays(self, arrays: dict[str, np.ndarray]) -> BinaryCodes:
        return BinaryCodes(arrays["bits"], self.dim)

    def vector_rows(self) -> np.ndarray:
        """The ±1 rows: their dot product is ``dim - 2 * hamming``, the Hamming ranking."""
        return self.to_dense()

    def sign_bits(self) -> np.ndarray:
        return self.packed


def pack_signs(x: np.ndarray) -> np.ndarray:
    """The signs of a 2-D array's rows as packed bits (``x > 0`` set), uint8 (n, ceil(d / 8)), most significant
    first: how binary codes and a store's bit vectors hold them."""
    return np.packbits(x > 0, axis=1)


def unpack_signs(packed: np.ndarray, dim: int) -> np.ndarray:
    """Packed sign bits as float32 ±1 rows (n, ``dim``)."""
    return np.unpackbits(packed, axis=1, count=dim).astype(np.float32) * 2.0 - 1.0
