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

from adaptemb.codes.base import Codes, select_rows

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


def pack_fields(fields: Sequence[tuple[np.ndarray, int]]) -> np.ndarray:
    """(n, k_i) unsigned arrays, each at its bit width, as one (n, ceil(sum k_i * bits_i / 8)) uint8 bitstream a row."""
    parts = []
    for values, bits in fields:
        shifts = np.arange(bits - 1, -1, -1, dtype=np.uint64)
        wide = values.astype(np.uint64)[:, :, None] >> shifts
        parts.append((wide & np.uint64(1)).astype(np.uint8).reshape(len(values), -1))
    return np.packbits(np.concatenate(parts, axis=1), axis=1, bitorder="big")


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


def nearest_levels(values: np.ndarray, indices: np.ndarray, codebook: np.ndarray) -> np.ndarray:
    """The level of each value's nearest codebook entry of its feature (rows of ``codebook`` sorted ascending;
    a value half-way between two entries takes the lower): a binary search over the midpoints, b steps."""
    entries = codebook.astype(np.float32)
    levels = np.zeros(values.shape, dtype=np.int64)
    step = entries.shape[1] // 2
    while step:
        candidate = levels + step
        midpoint = (entries[indices, candidate - 1] + entries[indices, candidate]) / 2
        levels = np.where(values > midpoint, candidate, levels)
        step //= 2
    return levels


class PackedSparseCodes(Codes):
    """k (index, value) pairs a row over ``dim`` dimensions, bit-packed (see the module docstring)."""

    kind = "packed_sparse"
    shared_arrays = ("layout", "codebook")
    vector_form = "sparse"
    row_bytes = staticmethod(row_bytes)
    nearest_levels = staticmethod(nearest_levels)

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
        """Pack fixed-k (n, k) ``indices`` / float ``values``: values of exactly 0 become empty slots, the others
        the nearest level of their feature's codebook (or float16 values for ``value_bits=16``)."""
        if indices.shape != values.shape or indices.ndim != 2:
            raise ValueError(f"indices {indices.shape} and values {values.shape} must both be (n, k)")
        if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= dim):
            raise ValueError(f"sparse indices must lie in 0..{dim - 1}")
        values = np.asarray(values, dtype=np.float32)
        empty = values == 0
        slots = np.where(empty, dim, indices.astype(np.int64))
        if value_bits == 16:
            levels = values.astype(np.float16).view(np.uint16)
        else:
            if codebook is None:
                raise ValueError(f"{value_bits}-bit values need a codebook")
            levels = np.where(empty, 0, nearest_levels(values, indices.astype(np.int64), codebook))
        packed = pack_fields([(slots, index_bits(dim)), (levels, value_bits)])
        return cls(packed, dim, indices.shape[1], value_bits, codebook)

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

    def to_dense(self) -> np.ndarray:
        return self.to_csr().toarray()

    def vector_rows(self) -> sp.csr_matrix:
        return self.to_csr()

    def similarity(self, other: Codes) -> np.ndarray:
        self._check_same_kind(other)
        assert isinstance(other, PackedSparseCodes)
        return np.asarray((self.to_csr() @ other.to_csr().T).toarray(), dtype=np.float32)

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
