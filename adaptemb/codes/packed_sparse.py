"""Sparse codes at their true size: k (index, value) pairs a row, bit-packed into a fixed number of bytes.

Row layout (one ``uint8`` row of ``packed``, most significant bit first, as ``np.packbits``): the k indices at
``index_bits(dim)`` bits each, then the k values at ``value_bits`` bits each, zero-padded to a whole byte.

* Indices take ``⌈log2(dim + 1)⌉`` bits (``⌈log2 dim⌉`` unless ``dim`` is a power of two): the value ``dim``
  marks an empty slot (a value of exactly 0, e.g. the code of an all-zero row), which adds nothing to a score.
* Values are b-bit levels (b in 1, 2, 3, 4, 8) of a per-feature codebook, ``codebook[index, level]``
  (float16, (dim, 2**b), stored once for all rows); or, with ``value_bits=16``, the float16 values themselves.
  A per-feature codebook was measured against one float16 scale per row (``benchmarks/packed_sparse_values.py``)
  and keeps more NDCG@10 per byte: the row scale costs 2 B a row, the codebook nothing per row.

``bytes_per_vector`` is the packed row width; the codebook and the 3-number ``layout`` (format version, k,
value bits) are ``shared_arrays``. Scoring and ``to_dense`` unpack ``SCORE_BLOCK_ROWS`` rows at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import torch

from adaptemb.codes.base import Codes, select_rows
from adaptemb.codes.graph import pack_bits

LAYOUT_VERSION = 1
"""The row layout this code writes and reads; a file with another layout is refused."""
VALUE_BITS = (1, 2, 3, 4, 8, 16)
"""Bits per value: levels of a per-feature codebook (1-8), or float16 values (16)."""
UNPACK_ROWS = 65536
"""Rows unpacked at a time (bounds the bit matrix: rows x bits-per-row bytes)."""


def index_bits(dim: int) -> int:
    """Bits per index: room for ``0 .. dim - 1`` and the empty-slot marker ``dim``."""
    return int(dim).bit_length()


def row_bytes(k: int, dim: int, value_bits: int) -> int:
    """Bytes of one packed row of ``k`` (index, value) pairs over ``dim`` dimensions."""
    return -(-k * (index_bits(dim) + value_bits) // 8)


def pack_fields(fields: Sequence[tuple[torch.Tensor, int]]) -> torch.Tensor:
    """(n, k_i) integer tensors, each at its bit width, as one (n, ceil(sum k_i * bits_i / 8)) uint8 bitstream a row
    (the low bits of each number, most significant first; integer division only, so it exports to ONNX)."""
    parts = []
    for values, bits in fields:
        powers = 2 ** torch.arange(bits - 1, -1, -1, device=values.device)
        parts.append(torch.remainder(torch.div(values.long().unsqueeze(-1), powers, rounding_mode="floor"), 2).flatten(1))
    return pack_bits(torch.cat(parts, dim=1))


def unpack_fields(packed: np.ndarray, widths: Sequence[tuple[int, int]]) -> list[np.ndarray]:
    """The inverse of ``pack_fields``: one (n, count) int64 array per (count, bits) in ``widths``."""
    total = sum(count * bits for count, bits in widths)
    bits_matrix = np.unpackbits(packed, axis=1, count=total, bitorder="big")
    out, start = [], 0
    for count, bits in widths:
        field = bits_matrix[:, start : start + count * bits].reshape(len(packed), count, bits)
        out.append(field.astype(np.int64) @ (np.int64(1) << np.arange(bits - 1, -1, -1, dtype=np.int64)))
        start += count * bits
    return out


def nearest_levels(values: torch.Tensor, indices: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
    """The level of each value's nearest entry in its feature's row of ``codebook`` (rows ascending; a value half-way
    between two entries takes the lower): a binary search over the midpoints, b steps, computed in ``values``' dtype."""
    levels = codebook.shape[1]
    entries = codebook.to(values.dtype).reshape(-1)
    base = indices.long() * levels
    found = torch.zeros_like(base)
    step = levels // 2
    while step:
        candidate = found + step
        midpoint = (entries[base + candidate - 1] + entries[base + candidate]) / 2
        found = torch.where(values > midpoint, candidate, found)
        step //= 2
    return found


def float16_bits(values: torch.Tensor) -> torch.Tensor:
    """The IEEE half-precision bit patterns of ``values`` (int64; beyond float16's range they saturate), computed
    arithmetically: ONNX has no bit cast."""
    half = values.clamp(-65504.0, 65504.0).to(torch.float16).to(torch.float32)
    magnitude = half.abs()
    exponent = torch.floor(torch.log2(magnitude.clamp_min(2.0**-14)))
    exponent = exponent - (magnitude < torch.pow(2.0, exponent)).float() + (magnitude >= torch.pow(2.0, exponent + 1)).float()
    normal = magnitude >= 2.0**-14
    mantissa = torch.where(normal, magnitude / torch.pow(2.0, exponent) - 1.0, magnitude * 2.0**14) * 1024.0
    field = torch.where(normal, exponent + 15.0, torch.zeros_like(exponent))
    return (half < 0).long() * 32768 + field.long() * 1024 + torch.round(mantissa).long()


class SparsePacker(torch.nn.Module):
    """Fixed-k (indices, values) -> packed rows (the one implementation, used by ``from_sparse`` and inside exported
    encoders): values of exactly 0 become empty slots, the others the nearest level of their feature's codebook,
    or float16 bit patterns for ``value_bits=16``."""

    def __init__(self, dim: int, value_bits: int, codebook: np.ndarray | None = None) -> None:
        super().__init__()
        if value_bits not in VALUE_BITS:
            raise ValueError(f"value_bits must be one of {', '.join(map(str, VALUE_BITS))}; got {value_bits}")
        if value_bits != 16 and (codebook is None or codebook.shape != (dim, 2**value_bits)):
            raise ValueError(f"{value_bits}-bit values need a codebook of shape ({dim}, {2**value_bits})")
        self.dim, self.value_bits = dim, value_bits
        table = np.zeros((dim, 0), np.float32) if codebook is None else np.asarray(codebook, np.float32)
        self.register_buffer("codebook", torch.from_numpy(table.copy()))

    def forward(self, indices: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        values = values.float()
        empty = values == 0
        slots = torch.where(empty, torch.full_like(indices.long(), self.dim), indices.long())
        if self.value_bits == 16:
            levels = float16_bits(values)
        else:
            levels = torch.where(empty, 0, nearest_levels(values, indices.clamp(0, self.dim - 1), self.codebook))
        return pack_fields([(slots, index_bits(self.dim)), (levels, self.value_bits)])


class PackedSparseCodes(Codes):
    """k (index, value) pairs a row over ``dim`` dimensions, bit-packed (see the module docstring)."""

    kind = "packed_sparse"
    shared_arrays = ("layout", "codebook")
    onnx_outputs = ("packed",)
    vector_form = "sparse"
    row_bytes = staticmethod(row_bytes)
    index_bits = staticmethod(index_bits)
    nearest_levels = staticmethod(nearest_levels)
    packer = SparsePacker
    """``PackedSparseCodes.packer(dim, value_bits, codebook)``: the torch module that packs (indices, values)."""

    def __init__(self, packed: np.ndarray, dim: int, k: int, value_bits: int, codebook: np.ndarray | None = None) -> None:
        if value_bits not in VALUE_BITS:
            raise ValueError(f"value_bits must be one of {', '.join(map(str, VALUE_BITS))}; got {value_bits}")
        if k < 1 or dim < 1:
            raise ValueError(f"packed sparse codes need k >= 1 and dim >= 1; got k={k}, dim={dim}")
        width = row_bytes(k, dim, value_bits)
        if packed.dtype != np.uint8 or packed.ndim != 2 or packed.shape[1] != width:
            raise ValueError(f"packed rows must be uint8 (n, {width}) for k={k}, dim={dim}, value_bits={value_bits}; "
                             f"got {packed.dtype} {packed.shape}")
        levels = 2**value_bits
        if value_bits == 16:
            codebook = np.zeros((dim, 0), np.float16)
        elif codebook is None or codebook.dtype != np.float16 or codebook.shape != (dim, levels):
            raise ValueError(f"{value_bits}-bit values need a float16 codebook of shape ({dim}, {levels})")
        self.packed, self.codebook = packed, codebook
        self.dim, self.k, self.value_bits = int(dim), int(k), int(value_bits)

    @classmethod
    def from_sparse(cls, indices: np.ndarray, values: np.ndarray, dim: int, value_bits: int,
                    codebook: np.ndarray | None = None) -> PackedSparseCodes:
        """Pack fixed-k (n, k) ``indices`` / float ``values`` (``SparsePacker``); ``codebook`` (dim, 2**value_bits)
        float16 for 1-8 bit values."""
        if indices.shape != values.shape or indices.ndim != 2:
            raise ValueError(f"indices {indices.shape} and values {values.shape} must both be (n, k)")
        if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= dim):
            raise ValueError(f"sparse indices must lie in 0..{dim - 1}")
        packer = SparsePacker(dim, value_bits, codebook)
        with torch.no_grad():
            packed = packer(torch.as_tensor(np.asarray(indices, np.int64)), torch.as_tensor(np.asarray(values, np.float32)))
        return cls(packed.numpy(), dim, indices.shape[1], value_bits, codebook)

    def slots(self) -> tuple[np.ndarray, np.ndarray]:
        """(indices, levels), each int64 (n, k); an empty slot has index ``dim``."""
        widths = [(self.k, index_bits(self.dim)), (self.k, self.value_bits)]
        parts = [unpack_fields(self.packed[s : s + UNPACK_ROWS], widths) for s in range(0, len(self), UNPACK_ROWS)]
        if not parts:
            return np.zeros((0, self.k), np.int64), np.zeros((0, self.k), np.int64)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def level_values(self, indices: np.ndarray, levels: np.ndarray) -> np.ndarray:
        """float32 values of (index, level) slots, 0 for empty ones."""
        if self.value_bits == 16:
            values = levels.astype(np.uint16).view(np.float16).astype(np.float32)
        else:
            values = self.codebook[np.minimum(indices, self.dim - 1), levels].astype(np.float32)
        return np.where(indices < self.dim, values, np.float32(0))

    def __len__(self) -> int:
        return self.packed.shape[0]

    def __getitem__(self, rows: slice | np.ndarray | Sequence[int]) -> PackedSparseCodes:
        return PackedSparseCodes(self.packed[select_rows(rows)], self.dim, self.k, self.value_bits, self.codebook)

    @property
    def row_nbytes(self) -> int:
        return self.packed.nbytes

    @property
    def shared_nbytes(self) -> int:
        return self._layout().nbytes + self.codebook.nbytes

    def active_counts(self) -> np.ndarray:
        indices, _ = self.slots()
        return (indices < self.dim).sum(axis=1).astype(np.int64)

    def to_csr(self) -> sp.csr_matrix:
        """The dequantised values as a float32 scipy CSR matrix (n, dim), empty slots left out."""
        indices, levels = self.slots()
        values = self.level_values(indices, levels)
        keep = indices < self.dim
        indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int64)
        matrix = sp.csr_matrix((values[keep], indices[keep], indptr), shape=(len(self), self.dim))
        matrix.sum_duplicates()
        return matrix

    def similarity(self, other: Codes) -> np.ndarray:
        """The dot products of the dequantised rows."""
        self._check_same_kind(other)
        assert isinstance(other, PackedSparseCodes)
        return (self.to_csr() @ other.to_csr().T).toarray().astype(np.float32)

    def to_dense(self) -> np.ndarray:
        return self.to_csr().toarray()

    def vector_rows(self) -> sp.csr_matrix:
        """The dequantised rows (a vector database's sparse vectors)."""
        return self.to_csr()

    def parity_arrays(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Packed rows (``packed``, with these codes' layout and codebook) as ``indices`` (-1: an empty slot) and
        their dequantised ``values``."""
        if "packed" not in arrays:
            return dict(arrays)
        rows = PackedSparseCodes(np.ascontiguousarray(arrays["packed"], np.uint8), self.dim, self.k, self.value_bits,
                                 None if self.value_bits == 16 else self.codebook)
        indices, levels = rows.slots()
        return {"indices": np.where(indices < self.dim, indices, -1), "values": rows.level_values(indices, levels)}

    def _layout(self) -> np.ndarray:
        return np.array([LAYOUT_VERSION, self.k, self.value_bits], dtype=np.int32)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"packed": self.packed, "layout": self._layout(), "codebook": self.codebook}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], dim: int) -> PackedSparseCodes:
        layout = np.asarray(arrays["layout"])
        if layout.shape != (3,) or layout.dtype.kind not in "iu":
            raise ValueError(f"packed_sparse layout must be 3 integers (version, k, value bits); got {layout!r}")
        version, k, value_bits = (int(v) for v in layout)
        if version != LAYOUT_VERSION:
            raise ValueError(f"packed_sparse row layout version {version}; this adaptemb reads version {LAYOUT_VERSION}")
        codes = cls(arrays["packed"], dim, k, value_bits, arrays.get("codebook") if value_bits != 16 else None)
        indices, _ = codes.slots()
        if indices.size and int(indices.max()) > dim:
            raise ValueError(f"packed_sparse index {int(indices.max())} is out of range for dim={dim}")
        return codes

    @classmethod
    def concat(cls, parts: Sequence[PackedSparseCodes]) -> PackedSparseCodes:
        first = parts[0]
        for part in parts[1:]:
            if (part.dim, part.k, part.value_bits) != (first.dim, first.k, first.value_bits) or not np.array_equal(
                    part.codebook, first.codebook):
                raise ValueError("packed_sparse codes concatenate only with the same dim, k, value bits and codebook")
        return cls(np.concatenate([p.packed for p in parts]), first.dim, first.k, first.value_bits, first.codebook)
