"""Sparse codes at their true size: k (index, value) pairs a row, bit-packed into a fixed number of bytes.

Row layout (one ``uint8`` row of ``packed``, most significant bit first, as ``np.packbits``): the k indices, then
the k values at ``value_bits`` bits each, zero-padded to a whole byte. The indices take one of two forms, whichever
makes the row smaller (``low_bits_of``; the same for every row of a collection):

* fixed: each index at ``⌈log2(dim + 1)⌉`` bits (``⌈log2 dim⌉`` unless ``dim`` is a power of two), in the
  encoder's order; the value ``dim`` marks an empty slot (a value of exactly 0, e.g. the code of an all-zero row),
  which adds nothing to a score;
* Elias-Fano (layout version 3; ``adaptemb.codes.elias_fano``): the same slots sorted ascending (the values follow
  their indices), k ``low_bits``-bit low parts and a ``k + (dim >> low_bits)``-bit bitmap of the high parts, about
  ``log2(dim / k) + 2`` bits an index. At dim 1536 a 16-byte row holds 13 indices with 1-bit values, not 10.
* Values are b-bit levels (b in 1, 2, 3, 4, 8) of a per-feature codebook, ``codebook[index, level]``
  (float16, (dim, 2**b), stored once for all rows); or, with ``value_bits=16``, the float16 values themselves.
  A per-feature codebook was measured against one float16 scale per row (``benchmarks/packed_sparse_values.py``)
  and keeps more NDCG@10 per byte: the row scale costs 2 B a row, the codebook nothing per row.

``bytes_per_vector`` is the packed row width; the codebook and the 3-number ``layout`` (format version, k,
value bits) are ``shared_arrays``. Scoring and ``to_dense`` unpack ``SCORE_BLOCK_ROWS`` rows at a time.

The codebook is stored compactly (layout version 2): per feature its float16 (low, high) = (first, last entry),
``codebook_range`` (dim, 2), and the other entries as uint8 positions ``p`` in 0..255 within it, ``codebook_steps``
(dim, 2**b - 2, written for 2-4 bits): entry = float16(low + (high - low) * p / 255); 8-bit values store no
positions (the 256 entries are even steps from low to high). At dim 3072 that is 12 KiB (1 and 8 bits) to 54 KiB (4 bits), not 1.5 MiB (8 bits).
``PackedSparseCodes.storable_codebook`` rounds a codebook to that form once, where it is made (``from_sparse``
does), so that quantising, scoring and the file use the same entries. Codes whose codebook is not in that form
(e.g. loaded from a version-1 file) are written as version 1, the full float16 codebook, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import Literal

import numpy as np
import scipy.sparse as sp
import torch

from adaptemb.codes.base import Codes, select_rows
from adaptemb.codes.elias_fano import bitmap_bits, coded_bits, join_slots, low_bits_for, split_slots
from adaptemb.codes.graph import pack_bits

LAYOUT_VERSION = 2
"""The layout of fixed-width indices with the compact codebook; ``FULL_CODEBOOK_LAYOUT`` is read too."""
FULL_CODEBOOK_LAYOUT = 1
"""The layout with the whole float16 (dim, 2**b) codebook: read, and written for a codebook not in stored form."""
ELIAS_FANO_LAYOUT = 3
"""The layout of Elias-Fano coded indices: (version, k, value bits, low bits), either codebook form."""
READ_LAYOUTS = (FULL_CODEBOOK_LAYOUT, LAYOUT_VERSION, ELIAS_FANO_LAYOUT)
POSITION_STEPS = 255
"""A stored codebook entry sits at one of 256 even positions (uint8) from its feature's low to its high entry."""
VALUE_BITS = (1, 2, 3, 4, 8, 16)
"""Bits per value: levels of a per-feature codebook (1-8), or float16 values (16)."""
UNPACK_ROWS = 8192
"""Rows unpacked at a time (bounds the bit matrix and its int64 copy: rows x bits-per-row x 9 bytes, 9 MiB for
16-byte rows)."""


def index_bits(dim: int) -> int:
    """Bits per index: room for ``0 .. dim - 1`` and the empty-slot marker ``dim``."""
    return int(dim).bit_length()


def low_bits_of(k: int, dim: int, value_bits: int) -> int | None:
    """The Elias-Fano low-part width of rows of ``k`` indices over ``dim`` if that coding makes them at least a byte
    smaller than fixed-width indices, else None (fixed)."""
    low_bits = low_bits_for(k, dim)
    return low_bits if row_bytes(k, dim, value_bits, low_bits) < row_bytes(k, dim, value_bits, None) else None


def row_bytes(k: int, dim: int, value_bits: int, low_bits: int | Literal["smallest"] | None = "smallest") -> int:
    """Bytes of one packed row of ``k`` (index, value) pairs over ``dim`` dimensions, its indices coded with
    ``low_bits`` (None: fixed width; default: the smaller form, ``low_bits_of``)."""
    low_bits = low_bits_of(k, dim, value_bits) if low_bits == "smallest" else low_bits
    indices = k * index_bits(dim) if low_bits is None else coded_bits(k, dim, int(low_bits))
    return -(-(indices + k * value_bits) // 8)


def max_k_within(nbytes: float, dim: int, value_bits: int) -> int:
    """The largest k (at most ``dim``) whose packed row at ``value_bits`` fits ``nbytes``; 0 if not even k = 1."""
    k = 0
    while k < dim and row_bytes(k + 1, dim, value_bits) <= nbytes:
        k += 1
    return k


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


def expand_codebook(bounds: np.ndarray, steps: np.ndarray, value_bits: int) -> np.ndarray:
    """The float16 (dim, 2**b) codebook of stored per-feature ``bounds`` (dim, 2) float16 (low, high) and ``steps``
    (dim, 2**b - 2) uint8 inner positions (none for 8 bits: even steps): float16(low + (high - low) * p / 255)."""
    low, high = (bounds[:, i : i + 1].astype(np.float64) for i in (0, 1))
    if value_bits == 8:
        positions = np.broadcast_to(np.arange(POSITION_STEPS + 1, dtype=np.float64), (len(bounds), 256))
    else:
        ends = np.zeros((len(bounds), 1)), np.full((len(bounds), 1), POSITION_STEPS)
        positions = np.concatenate([ends[0], steps.astype(np.float64), ends[1]], axis=1)
    return (low + (high - low) * positions / POSITION_STEPS).astype(np.float16)


def compact_codebook(codebook: np.ndarray, value_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(bounds, steps) of ascending float16 ``codebook`` rows (see ``expand_codebook``): each inner entry's position
    is the one whose expansion is nearest (the exact one where an expansion equals it)."""
    bounds = np.ascontiguousarray(codebook[:, [0, -1]], dtype=np.float16)
    if value_bits == 8:
        return bounds, np.zeros((len(codebook), 0), np.uint8)
    low, high = (bounds[:, i : i + 1].astype(np.float64) for i in (0, 1))
    inner = codebook[:, 1:-1]
    span = np.where(high > low, high - low, 1.0)
    positions = np.clip(np.rint((inner.astype(np.float64) - low) * POSITION_STEPS / span), 0, POSITION_STEPS)
    for shift in (-1.0, 1.0):  # float16 rounding of an expansion can make the rounded position miss it by one
        entries = (low + (high - low) * positions / POSITION_STEPS).astype(np.float16)
        moved = np.clip(positions + shift, 0, POSITION_STEPS)
        exact = (low + (high - low) * moved / POSITION_STEPS).astype(np.float16) == inner
        positions = np.where((entries != inner) & exact, moved, positions)
    return bounds, positions.astype(np.uint8)


def storable_codebook(codebook: np.ndarray, value_bits: int) -> np.ndarray:
    """``codebook`` (dim, 2**b) rounded to the form a codes file stores (the module docstring): float16, each row's
    first and last entries kept, the others at the nearest of 256 even positions between them (8 bits: all at even
    steps). Rows must ascend and be finite. Round once, where the codebook is made, and quantise with the result."""
    if value_bits not in VALUE_BITS or value_bits == 16:
        raise ValueError(f"a codebook is for 1, 2, 3, 4 or 8-bit values; got value_bits={value_bits}")
    book = np.asarray(codebook)
    if book.ndim != 2 or book.shape[1] != 2**value_bits:
        raise ValueError(f"{value_bits}-bit values need a codebook of shape (dim, {2**value_bits}); got {book.shape}")
    book = book.astype(np.float16)
    if not np.isfinite(book).all():
        raise ValueError("codebook entries must be finite (within float16's range)")
    descending = np.flatnonzero((np.diff(book.astype(np.float32), axis=1) < 0).any(axis=1))
    if len(descending):
        raise ValueError(f"codebook rows must ascend (levels are found by a binary search); row {descending[0]} does not")
    return expand_codebook(*compact_codebook(book, value_bits), value_bits)


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
    or float16 bit patterns for ``value_bits=16``; indices at fixed width, or Elias-Fano coded with ``low_bits``
    (``low_bits_of`` gives the smaller form for a k)."""

    def __init__(self, dim: int, value_bits: int, codebook: np.ndarray | None = None,
                 low_bits: int | None = None) -> None:
        super().__init__()
        if value_bits not in VALUE_BITS:
            raise ValueError(f"value_bits must be one of {', '.join(map(str, VALUE_BITS))}; got {value_bits}")
        if value_bits != 16 and (codebook is None or codebook.shape != (dim, 2**value_bits)):
            raise ValueError(f"{value_bits}-bit values need a codebook of shape ({dim}, {2**value_bits})")
        self.dim, self.value_bits, self.low_bits = dim, value_bits, low_bits
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
        if self.low_bits is None:
            return pack_fields([(slots, index_bits(self.dim)), (levels, self.value_bits)])
        low, bitmap, levels = split_slots(slots, levels, self.dim, self.low_bits)
        return pack_fields([(low, self.low_bits), (bitmap, 1), (levels, self.value_bits)])


class PackedSparseCodes(Codes):
    """k (index, value) pairs a row over ``dim`` dimensions, bit-packed (see the module docstring)."""

    kind = "packed_sparse"
    onnx_outputs = ("packed",)
    vector_form = "sparse"
    row_bytes = staticmethod(row_bytes)
    max_k_within = staticmethod(max_k_within)
    low_bits_of = staticmethod(low_bits_of)
    index_bits = staticmethod(index_bits)
    nearest_levels = staticmethod(nearest_levels)
    storable_codebook = staticmethod(storable_codebook)
    """``PackedSparseCodes.storable_codebook(codebook, value_bits)``: the codebook as a codes file stores it."""
    packer = SparsePacker
    """``PackedSparseCodes.packer(dim, value_bits, codebook, low_bits)``: the torch module that packs (indices, values)
    (``low_bits``: ``low_bits_of(k, dim, value_bits)`` for the smaller index form, None for fixed width)."""

    def __init__(self, packed: np.ndarray, dim: int, k: int, value_bits: int, codebook: np.ndarray | None = None,
                 low_bits: int | Literal["smallest"] | None = "smallest") -> None:
        if value_bits not in VALUE_BITS:
            raise ValueError(f"value_bits must be one of {', '.join(map(str, VALUE_BITS))}; got {value_bits}")
        if k < 1 or dim < 1:
            raise ValueError(f"packed sparse codes need k >= 1 and dim >= 1; got k={k}, dim={dim}")
        low_bits = low_bits_of(k, dim, value_bits) if low_bits == "smallest" else low_bits
        if low_bits is not None and not 1 <= int(low_bits) <= int(dim).bit_length():
            raise ValueError(f"Elias-Fano low bits must lie in 1..{int(dim).bit_length()} for dim={dim}; got {low_bits}")
        width = row_bytes(k, dim, value_bits, low_bits)
        if packed.dtype != np.uint8 or packed.ndim != 2 or packed.shape[1] != width:
            raise ValueError(f"packed rows must be uint8 (n, {width}) for k={k}, dim={dim}, value_bits={value_bits}, "
                             f"{_coding_name(low_bits)} indices; got {packed.dtype} {packed.shape}")
        levels = 2**value_bits
        if value_bits == 16:
            codebook = np.zeros((dim, 0), np.float16)
        elif codebook is None or codebook.dtype != np.float16 or codebook.shape != (dim, levels):
            raise ValueError(f"{value_bits}-bit values need a float16 codebook of shape ({dim}, {levels})")
        self.packed, self.codebook = packed, codebook
        self.dim, self.k, self.value_bits = int(dim), int(k), int(value_bits)
        self.low_bits = None if low_bits is None else int(low_bits)

    @classmethod
    def from_sparse(cls, indices: np.ndarray, values: np.ndarray, dim: int, value_bits: int,
                    codebook: np.ndarray | None = None) -> PackedSparseCodes:
        """Pack fixed-k (n, k) ``indices`` / float ``values`` (``SparsePacker``); ``codebook`` (dim, 2**value_bits),
        rows ascending, for 1-8 bit values: rounded to its stored form (``storable_codebook``) before packing."""
        if indices.shape != values.shape or indices.ndim != 2:
            raise ValueError(f"indices {indices.shape} and values {values.shape} must both be (n, k)")
        if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= dim):
            raise ValueError(f"sparse indices must lie in 0..{dim - 1}")
        if codebook is not None and value_bits != 16:
            codebook = storable_codebook(codebook, value_bits)
        k = indices.shape[1]
        low_bits = low_bits_of(k, dim, value_bits)
        packer = SparsePacker(dim, value_bits, codebook, low_bits)
        if not len(indices):
            return cls(np.zeros((0, row_bytes(k, dim, value_bits, low_bits)), np.uint8), dim, k, value_bits, codebook,
                       low_bits)
        with torch.no_grad():
            packed = packer(torch.as_tensor(np.asarray(indices, np.int64)), torch.as_tensor(np.asarray(values, np.float32)))
        return cls(packed.numpy(), dim, k, value_bits, codebook, low_bits)

    def slots(self) -> tuple[np.ndarray, np.ndarray]:
        """(indices, levels), each int64 (n, k); an empty slot has index ``dim``. Elias-Fano rows come back sorted
        by index; a damaged one (its bitmap not holding k entries) is a ``ValueError``."""
        parts = list(self._slot_blocks())
        if not parts:
            return np.zeros((0, self.k), np.int64), np.zeros((0, self.k), np.int64)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def _slot_blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``slots`` ``UNPACK_ROWS`` rows at a time (bounds the unpacked bit matrix)."""
        for start in range(0, len(self), UNPACK_ROWS):
            yield self._unpack(self.packed[start : start + UNPACK_ROWS])

    def _unpack(self, packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.low_bits is None:
            indices, levels = unpack_fields(packed, [(self.k, index_bits(self.dim)), (self.k, self.value_bits)])
            return indices, levels
        width = bitmap_bits(self.k, self.dim, self.low_bits)
        low, bitmap, levels = unpack_fields(packed, [(self.k, self.low_bits), (width, 1), (self.k, self.value_bits)])
        return join_slots(low, bitmap, self.low_bits), levels

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
        return PackedSparseCodes(self.packed[select_rows(rows)], self.dim, self.k, self.value_bits, self.codebook,
                                 self.low_bits)

    @property
    def row_nbytes(self) -> int:
        return self.packed.nbytes

    @property
    def shared_nbytes(self) -> int:
        return sum(array.nbytes for name, array in self.to_arrays().items() if name != "packed")

    @property
    def shared_arrays(self) -> tuple[str, ...]:  # type: ignore[override]
        """The layout and the stored codebook (which arrays depends on the layout version written)."""
        return tuple(name for name in self.to_arrays() if name != "packed")

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
                                 None if self.value_bits == 16 else self.codebook, self.low_bits)
        indices, levels = rows.slots()
        return {"indices": np.where(indices < self.dim, indices, -1), "values": rows.level_values(indices, levels)}

    def _layout(self, version: int) -> np.ndarray:
        if self.low_bits is not None:
            return np.array([ELIAS_FANO_LAYOUT, self.k, self.value_bits, self.low_bits], dtype=np.int32)
        return np.array([version, self.k, self.value_bits], dtype=np.int32)

    @cached_property
    def _stored_codebook(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The codebook's (bounds, steps) if they expand to it bit for bit (``storable_codebook``), else None."""
        book = self.codebook
        if not np.isfinite(book).all() or (np.diff(book.astype(np.float32), axis=1) < 0).any():
            return None
        bounds, steps = compact_codebook(book, self.value_bits)
        same = np.array_equal(expand_codebook(bounds, steps, self.value_bits).view(np.uint16), book.view(np.uint16))
        return (bounds, steps) if same else None

    def to_arrays(self) -> dict[str, np.ndarray]:
        """``packed``, ``layout`` and the codebook: compact (``codebook_range``, and for 2-4 bits ``codebook_steps``)
        where it is in stored form, else the whole float16 ``codebook`` under layout version 1; none for float16.
        Elias-Fano coded indices write layout version 3 (with its low bits) and either codebook form."""
        if self.value_bits == 16:
            return {"packed": self.packed, "layout": self._layout(LAYOUT_VERSION)}
        if self._stored_codebook is None:
            return {"packed": self.packed, "layout": self._layout(FULL_CODEBOOK_LAYOUT), "codebook": self.codebook}
        bounds, steps = self._stored_codebook
        stored = {"packed": self.packed, "layout": self._layout(LAYOUT_VERSION), "codebook_range": bounds}
        return {**stored, "codebook_steps": steps} if steps.shape[1] else stored

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], dim: int) -> PackedSparseCodes:
        version, k, value_bits, low_bits = _read_layout(arrays["layout"])
        if value_bits not in VALUE_BITS or value_bits == 16:
            codebook = None
        elif version == FULL_CODEBOOK_LAYOUT or (version == ELIAS_FANO_LAYOUT and "codebook_range" not in arrays):
            codebook = arrays.get("codebook")
        else:
            codebook = _stored_codebook_of(arrays, dim, value_bits)
        codes = cls(arrays["packed"], dim, k, value_bits, codebook, low_bits)
        largest = max((int(indices.max()) for indices, _ in codes._slot_blocks() if indices.size), default=0)
        if largest > dim:
            raise ValueError(f"packed_sparse index {largest} is out of range for dim={dim}")
        return codes

    @classmethod
    def concat(cls, parts: Sequence[PackedSparseCodes]) -> PackedSparseCodes:
        first = parts[0]
        for part in parts[1:]:
            if (part.dim, part.k, part.value_bits, part.low_bits) != (first.dim, first.k, first.value_bits,
                                                                      first.low_bits) or not np.array_equal(
                    part.codebook, first.codebook):
                raise ValueError("packed_sparse codes concatenate only with the same dim, k, value bits, index coding "
                                 "and codebook")
        return cls(np.concatenate([p.packed for p in parts]), first.dim, first.k, first.value_bits, first.codebook,
                   first.low_bits)


def _coding_name(low_bits: int | None) -> str:
    return "fixed-width" if low_bits is None else f"Elias-Fano ({low_bits} low bits)"


def _read_layout(layout: np.ndarray) -> tuple[int, int, int, int | None]:
    """(version, k, value bits, Elias-Fano low bits or None) of a codes file's ``layout``, checked."""
    layout = np.asarray(layout)
    if layout.ndim != 1 or layout.dtype.kind not in "iu" or not len(layout):
        raise ValueError(f"packed_sparse layout must be integers (version, k, value bits[, low bits]); got {layout!r}")
    version = int(layout[0])
    if version not in READ_LAYOUTS:
        raise ValueError(f"packed_sparse row layout version {version}; this adaptemb reads versions "
                         f"{', '.join(map(str, READ_LAYOUTS))}")
    size = 4 if version == ELIAS_FANO_LAYOUT else 3
    if layout.shape != (size,):
        raise ValueError(f"packed_sparse layout version {version} must be {size} integers; got {layout!r}")
    return version, int(layout[1]), int(layout[2]), int(layout[3]) if size == 4 else None


def _stored_codebook_of(arrays: dict[str, np.ndarray], dim: int, value_bits: int) -> np.ndarray:
    """The codebook of a version-2 file's ``codebook_range`` and ``codebook_steps``, checked."""
    inner = 0 if value_bits == 8 else 2**value_bits - 2
    bounds, steps = arrays.get("codebook_range"), arrays.get("codebook_steps", np.zeros((dim, 0), np.uint8))
    if bounds is None or bounds.dtype != np.float16 or bounds.shape != (dim, 2):
        raise ValueError(f"{value_bits}-bit packed_sparse codes need a float16 codebook_range of shape ({dim}, 2)")
    if steps is None or steps.dtype != np.uint8 or steps.shape != (dim, inner):
        raise ValueError(f"{value_bits}-bit packed_sparse codes need uint8 codebook_steps of shape ({dim}, {inner})")
    if not np.isfinite(bounds).all() or (bounds[:, 0] > bounds[:, 1]).any():
        raise ValueError("packed_sparse codebook_range must hold finite (low, high) pairs with low <= high")
    return expand_codebook(bounds, steps, value_bits)
