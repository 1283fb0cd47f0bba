"""Sets of active indices (binary sparse vectors), held at their true size in the smallest of three layouts.

The codes are held (in memory and in files alike) in whichever layout is smallest for the collection, ties
going to the first:

* ``"packed"``: rows of one width w: a row's sorted indices at ``index_bits(dim)`` bits each, most significant
  bit first (``np.packbits`` order), then the empty slot ``dim`` in every remaining slot of the row's
  ``⌊8 w / index_bits⌋``, zero bits to a whole byte. The row with most indices sets w; rows with fewer (an
  all-zero embedding's empty set) hold empty slots, which cost nothing more.
* ``"ragged"``: per-row ``counts`` (the smallest unsigned integer type that holds the largest) and each row's
  indices packed the same way into ``⌈count × index_bits / 8⌉`` bytes (no empty slots), rows one after another
  (1-D ``packed``): for counts that vary (bsa's natural mode), at most one byte a row above the bit-exact size.
* ``"bitmap"``: one bit per feature, (n, ⌈dim / 8⌉).

An index takes ``index_bits(dim)`` = ⌈log2(dim + 1)⌉ bits (``PackedSparseCodes``' width and packing helpers):
⌈log2 dim⌉ unless ``dim`` is a power of two, where one bit more makes room for the empty slot ``dim``.
``row_nbytes`` is the bytes of the layout held (what ``to_arrays`` returns); the one shared array is
``layout`` (int32: layout version, index bits). Files of earlier releases, without ``layout`` (``indices``
(n, k) or 1-D with ``counts``, or ``bitmap``), still load; a newer layout version is refused with its number.
Scoring: ``"dot"`` = |A ∩ B| and ``"cosine"`` = |A ∩ B| / sqrt(|A| |B|) (0 for an empty row), via scipy sparse
products of the rows unpacked.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
import torch

from adaptemb.codes.base import Codes, RowColumn, index_dtype, select_rows
from adaptemb.codes.graph import pack_bits
from adaptemb.codes.packed_sparse import index_bits
from adaptemb.codes.sparse_layouts import (
    BLOCK_BITS,
    LAYOUTS,
    bitmap_rows,
    fixed_layout,
    graph_slots,
    pack_slots,
    packed_rows,
    packed_width,
    ragged_rows,
    smallest_layout,
    unpack_slots,
)

LAYOUT_VERSION = 1
"""The layouts this code writes (``layout[0]``); files without a ``layout`` array are the earlier releases'."""


class BinarySparseCodes(Codes):
    """Sets of active indices over ``dim`` features (binary sparse vectors), e.g. BSA codes, held in the
    smallest layout (see the module docstring): ``layout``, the uint8 ``packed`` rows (or bitmap) and, for
    ``"ragged"``, the row ``counts``. Built from CSR pieces (``indptr``, sorted ``indices`` of each row), a
    mask, an (n, k) index array or a CSR matrix; a slice keeps its codes' layout."""

    kind = "binary_sparse"
    metrics: ClassVar[tuple[str, ...]] = ("dot", "cosine")
    shared_arrays = ("layout",)
    onnx_outputs = ("bits",)
    parity_set_bits = True
    vector_form = "sparse"
    value_bits = 1
    layouts: ClassVar[tuple[str, ...]] = LAYOUTS
    index_bits = staticmethod(index_bits)
    packed_width = staticmethod(packed_width)
    pack_slots = staticmethod(pack_slots)
    fixed_layout = staticmethod(fixed_layout)
    """``BinarySparseCodes.pack_slots(slots, dim)`` and ``fixed_layout(k, dim)``: what a fixed-k encoder emits."""

    layout: str
    packed: np.ndarray
    counts: np.ndarray | None

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, dim: int, *, layout: str | None = None,
                 slots: int | None = None) -> None:
        """Codes of rows ``indices[indptr[i]:indptr[i + 1]]`` (sorted, distinct, in ``[0, dim)``), held in
        ``layout`` (default: the smallest); ``slots``: the ``"packed"`` rows' room (default: the largest count)."""
        indptr = np.asarray(indptr, dtype=np.int64)
        indices = np.asarray(indices)
        if indptr.ndim != 1 or indptr.size < 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
            raise ValueError("indptr must be 1-D, start at 0 and never decrease")
        if indices.ndim != 1 or indices.shape[0] != indptr[-1]:
            raise ValueError(f"indices must be 1-D with indptr[-1]={int(indptr[-1])} entries; got {indices.shape}")
        if dim < 1:
            raise ValueError(f"binary sparse codes need dim >= 1; got {dim}")
        if indices.size and (int(indices.max()) >= dim or int(indices.min()) < 0):
            raise ValueError(f"binary sparse indices must lie in [0, {dim}); got {int(indices.min())}..{int(indices.max())}")
        _check_sorted_unique(indptr, indices)
        counts = np.diff(indptr)
        layout = layout or smallest_layout(counts, dim)
        if layout not in LAYOUTS:
            raise ValueError(f"unknown binary_sparse layout {layout!r}; layouts: {', '.join(LAYOUTS)}")
        if slots is not None and counts.size and slots < int(counts.max()):
            raise ValueError(f"packed rows of {slots} slots cannot hold a row of {int(counts.max())} indices")
        self.dim, self.layout, self.counts = int(dim), layout, None
        indices = indices.astype(np.int64, copy=False)
        if layout == "bitmap":
            self.packed = bitmap_rows(indptr, indices, self.dim)
        elif layout == "packed":
            self.packed = packed_rows(indptr, indices, self.dim, int(slots or counts.max(initial=0)))
        else:
            self.counts = counts.astype(index_dtype(int(counts.max(initial=0)) + 1))
            self.packed = ragged_rows(indptr, indices, self.dim)

    @classmethod
    def _held(cls, dim: int, layout: str, packed: np.ndarray, counts: np.ndarray | None = None) -> BinarySparseCodes:
        """Codes around storage arrays already in ``layout`` (not checked: see ``from_arrays``)."""
        codes = cls.__new__(cls)
        codes.dim, codes.layout, codes.packed, codes.counts = int(dim), layout, packed, counts
        return codes

    # -- constructors ---------------------------------------------------------------------------

    @classmethod
    def from_mask(cls, mask: np.ndarray) -> BinarySparseCodes:
        """Codes of a boolean (n, dim) array: row i holds the columns where ``mask[i]`` is true."""
        if mask.ndim != 2:
            raise ValueError(f"mask must be 2-D (n, dim); got shape {mask.shape}")
        rows, cols = np.nonzero(mask)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=mask.shape[0]))])
        return cls(indptr, cols, mask.shape[1])

    @classmethod
    def from_indices(cls, indices: np.ndarray, dim: int) -> BinarySparseCodes:
        """Fixed-count codes from an (n, k) array of distinct column ids per row (any order)."""
        if indices.ndim != 2:
            raise ValueError(f"indices must be 2-D (n, k); got shape {indices.shape}")
        n, k = indices.shape
        ordered = np.sort(indices.astype(np.int64), axis=1)
        return cls(np.arange(n + 1, dtype=np.int64) * k, ordered.reshape(-1), dim)

    @classmethod
    def from_csr(cls, matrix: sp.csr_matrix) -> BinarySparseCodes:
        """Codes of the stored entries of a CSR matrix (their values are ignored)."""
        matrix = sp.csr_matrix(matrix)
        matrix.sum_duplicates()
        matrix.sort_indices()
        return cls(matrix.indptr, matrix.indices, matrix.shape[1])

    def as_layout(self, layout: str, slots: int | None = None) -> BinarySparseCodes:
        """The same sets held in ``layout`` (``slots``: the room of ``"packed"`` rows, default the largest count)."""
        matrix = self.to_csr()
        return BinarySparseCodes(matrix.indptr, matrix.indices, self.dim, layout=layout, slots=slots)

    # -- shape and storage ----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.counts) if self.counts is not None else self.packed.shape[0]

    def __getitem__(self, rows: slice | np.ndarray | Sequence[int]) -> BinarySparseCodes:
        selected = select_rows(rows)
        if self.counts is None:
            return self._held(self.dim, self.layout, self.packed[selected])
        positions = np.arange(len(self))[selected]
        widths, offsets = self._row_widths(), self._row_offsets()
        take = widths[positions]
        starts = np.repeat(offsets[positions] - (np.cumsum(take) - take), take)
        return self._held(self.dim, "ragged", self.packed[starts + np.arange(int(take.sum()))], self.counts[positions])

    @property
    def indptr(self) -> np.ndarray:
        """Row starts of the unpacked indices (int64, n + 1)."""
        return np.concatenate([[0], np.cumsum(self.active_counts())]).astype(np.int64)

    @property
    def indices(self) -> np.ndarray:
        """Every row's sorted indices, one after another, unpacked on each access (``index_dtype(dim)``)."""
        return self.to_csr().indices.astype(index_dtype(self.dim))

    def active_counts(self) -> np.ndarray:
        if self.counts is not None:
            return self.counts.astype(np.int64)
        if self.layout == "bitmap":
            return np.bitwise_count(self.packed).sum(axis=1, dtype=np.int64)
        parts = [keep.sum(axis=1, dtype=np.int64) for _, keep in self._slot_blocks()]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    @property
    def row_nbytes(self) -> int:
        return int(self.packed.nbytes + (0 if self.counts is None else self.counts.nbytes))

    @property
    def shared_nbytes(self) -> int:
        return self._layout_array().nbytes

    @property
    def storage(self) -> dict[str, Any]:
        """Storage per vector: the layout held and its bytes, the bitmap's size, the bits of an index, the ideal
        bit-packed size (``ceil(log2 dim)`` bits per index, plus ``ceil(log2(dim + 1))`` count bits where counts
        vary) and the combinatorial bound ``log2 C(dim, count)`` bits."""
        n = max(len(self), 1)
        counts = self.active_counts().astype(np.float64)
        ideal_index_bits = max(1, int(np.ceil(np.log2(self.dim))))
        varies = counts.size > 0 and bool(np.any(counts != counts[0]))
        ideal_bits = float(counts.sum()) * ideal_index_bits / n + (index_bits(self.dim) if varies else 0)
        log2_choose = (_lgamma(self.dim + 1) - _lgamma(counts + 1) - _lgamma(self.dim - counts + 1)) / np.log(2)
        return {
            "layout": self.layout,
            "bytes_per_vector": self.row_nbytes / n,
            "bitmap_bytes_per_vector": float((self.dim + 7) // 8),
            "index_bits": index_bits(self.dim),
            "ideal_bits_per_vector": ideal_bits,
            "ideal_bytes_per_vector": ideal_bits / 8,
            "entropy_bound_bits_per_vector": float(log2_choose.mean()) if len(self) else 0.0,
            "mean_active": float(counts.mean()) if len(self) else 0.0,
        }

    def _row_widths(self) -> np.ndarray:
        """Bytes of each ``"ragged"`` row."""
        assert self.counts is not None
        return -(-self.counts.astype(np.int64) * index_bits(self.dim) // 8)

    def _row_offsets(self) -> np.ndarray:
        """Where each ``"ragged"`` row starts in ``packed`` (n + 1 offsets)."""
        return np.concatenate([[0], np.cumsum(self._row_widths())]).astype(np.int64)

    def _layout_array(self) -> np.ndarray:
        return np.array([LAYOUT_VERSION, index_bits(self.dim)], dtype=np.int32)

    # -- values and scoring ---------------------------------------------------------------------

    def to_csr(self) -> sp.csr_matrix:
        """A float32 0/1 scipy CSR matrix of shape (n, dim), unpacked a block of rows at a time."""
        blocks = [sp.csr_matrix(block) for block in self._index_blocks()]
        if not blocks:
            return sp.csr_matrix((len(self), self.dim), dtype=np.float32)
        matrix = sp.vstack(blocks, format="csr") if len(blocks) > 1 else blocks[0]
        return sp.csr_matrix((np.ones(matrix.nnz, np.float32), matrix.indices, matrix.indptr), shape=(len(self), self.dim))

    def _index_blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(data, indices, indptr) of consecutive blocks of rows (scipy's CSR triple; data all ones)."""
        if self.layout == "bitmap":
            step = max(1, BLOCK_BITS // max(self.dim, 1))
            for start in range(0, len(self), step):
                rows, cols = np.nonzero(np.unpackbits(self.packed[start : start + step], axis=1, count=self.dim))
                size = min(step, len(self) - start)
                yield _csr_triple(cols, np.bincount(rows, minlength=size), self.dim)
            return
        for slots, keep in self._slot_blocks():
            yield _csr_triple(slots[keep], keep.sum(axis=1), self.dim)

    def _slot_blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Unpacked slots (int64 (rows, slots)) of consecutive blocks of ``"packed"`` or ``"ragged"`` rows, with
        which of them are indices (the rest: empty slots, or beyond a ragged row's count)."""
        if self.counts is None:
            step = max(1, BLOCK_BITS // (8 * max(self.packed.shape[1], 1)))
            for start in range(0, len(self), step):
                slots = unpack_slots(self.packed[start : start + step], self.dim)
                yield slots, slots < self.dim
            return
        counts, widths, offsets = self.counts.astype(np.int64), self._row_widths(), self._row_offsets()
        most = int(counts.max(initial=1)) or 1
        step = max(1, BLOCK_BITS // (most * index_bits(self.dim)))
        for start in range(0, len(self), step):
            stop = min(start + step, len(self))
            room = int(counts[start:stop].max(initial=1)) or 1
            rows = np.zeros((stop - start, packed_width(room, self.dim)), np.uint8)
            rows[np.arange(rows.shape[1]) < widths[start:stop, None]] = self.packed[offsets[start] : offsets[stop]]
            yield unpack_slots(rows, self.dim, room), np.arange(room) < counts[start:stop, None]

    def to_dense(self) -> np.ndarray:
        return self.to_csr().toarray()

    def vector_rows(self) -> sp.csr_matrix:
        return self.to_csr()

    def similarity(self, other: Codes, metric: str = "dot") -> np.ndarray:
        """``"dot"``: |A ∩ B|; ``"cosine"``: |A ∩ B| / sqrt(|A| |B|), 0 where a row is empty."""
        self._check_same_kind(other)
        assert isinstance(other, BinarySparseCodes)
        if metric not in self.metrics:
            raise ValueError(f"unknown metric {metric!r} for binary sparse codes; use one of {self.metrics}")
        mine, theirs = self.to_csr(), other.to_csr()
        common = np.asarray((mine @ theirs.T).toarray(), dtype=np.float32)
        if metric == "dot":
            return common
        norms = np.sqrt(np.outer(np.diff(mine.indptr), np.diff(theirs.indptr)).astype(np.float64))
        return np.where(norms > 0, common / np.maximum(norms, 1.0), 0.0).astype(np.float32)

    # -- saving ---------------------------------------------------------------------------------

    def to_arrays(self) -> dict[str, np.ndarray]:
        if self.layout == "bitmap":
            return {"bitmap": self.packed, "layout": self._layout_array()}
        if self.counts is None:
            return {"packed": self.packed, "layout": self._layout_array()}
        return {"packed": self.packed, "counts": self.counts, "layout": self._layout_array()}

    def row_columns(self) -> dict[str, RowColumn]:
        """As ``to_arrays``; a ``"ragged"`` row's bytes are a variable-length run (its ``counts`` give its width)."""
        if self.counts is None:
            return super().row_columns()
        return {"packed": RowColumn(self.packed, self._row_offsets()), "counts": RowColumn(self.counts)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], dim: int) -> BinarySparseCodes:
        """Codes from ``to_arrays()`` output, or from the arrays of an earlier release (no ``layout``); every
        index is checked (in range, sorted, distinct; empty slots only after a row's indices)."""
        if "layout" not in arrays:
            return cls._from_earlier_arrays(arrays, dim)
        layout = np.asarray(arrays["layout"])
        if layout.ndim != 1 or layout.size < 1 or layout.dtype.kind not in "iu":
            raise ValueError(f"binary_sparse layout must be integers (version, index bits); got {layout!r}")
        if int(layout[0]) != LAYOUT_VERSION:
            raise ValueError(f"binary_sparse layout version {int(layout[0])}; this adaptemb reads version "
                             f"{LAYOUT_VERSION} and the unversioned layouts of earlier releases (a newer adaptemb wrote it?)")
        if layout.size != 2 or int(layout[1]) != index_bits(dim):
            raise ValueError(f"binary_sparse layout {layout.tolist()} does not fit dim={dim}: expected "
                             f"[{LAYOUT_VERSION}, {index_bits(dim)}] (version, index bits)")
        codes = cls._held(dim, *_stored_form(arrays, dim))
        codes._check_stored()
        return codes

    @classmethod
    def _from_earlier_arrays(cls, arrays: dict[str, np.ndarray], dim: int) -> BinarySparseCodes:
        """The layouts written before ``layout`` existed: ``bitmap``; ``indices`` (n, k); 1-D ``indices`` + ``counts``."""
        if "bitmap" in arrays:
            codes = cls._held(dim, "bitmap", _bitmap_array(arrays["bitmap"], dim))
            codes._check_stored()
            return codes.as_layout(smallest_layout(codes.active_counts(), dim))
        if "indices" not in arrays:
            raise ValueError(f"binary_sparse codes hold 'packed' rows (with 'counts' when ragged) or a 'bitmap', "
                             f"with a 'layout'; or, as written by earlier releases, 'indices' or 'bitmap'; got {sorted(arrays)}")
        indices = np.asarray(arrays["indices"])
        if indices.dtype.kind not in "iu":
            raise ValueError(f"binary_sparse indices must be integers; got {indices.dtype}")
        if "counts" in arrays:
            counts = np.asarray(arrays["counts"]).astype(np.int64)
            return cls(np.concatenate([[0], np.cumsum(counts)]), indices, dim)
        if indices.ndim != 2:
            raise ValueError(f"fixed-count indices must be 2-D (n, k); got shape {indices.shape}")
        return cls(np.arange(indices.shape[0] + 1, dtype=np.int64) * indices.shape[1], indices.reshape(-1), dim)

    def _check_stored(self) -> None:
        """``ValueError`` unless every row holds sorted, distinct indices below ``dim`` (empty slots after them)."""
        if self.layout == "bitmap":
            spare = (-self.dim) % 8
            if spare and np.any(self.packed[:, -1] & np.uint8((1 << spare) - 1)):
                raise ValueError(f"binary_sparse bitmap has bits set beyond dim={self.dim}")
            return
        for slots, keep in self._slot_blocks():
            if np.any(slots[keep] >= self.dim) or np.any(slots > self.dim):
                raise ValueError(f"binary_sparse index {int(slots.max())} is out of range for dim={self.dim}")
            if np.any(keep[:, 1:] & ~keep[:, :-1]):
                raise ValueError("binary_sparse packed rows hold an index after an empty slot")
            if np.any((np.diff(slots, axis=1) <= 0) & keep[:, 1:]):
                raise ValueError("binary_sparse indices must be strictly increasing within each row (sorted, no duplicates)")

    @classmethod
    def concat(cls, parts: Sequence[BinarySparseCodes]) -> BinarySparseCodes:
        """The rows of ``parts`` in order: the storage joined as it is when every part has the same layout (and
        width), else rebuilt in the smallest layout."""
        first = parts[0]
        if len({p.dim for p in parts}) != 1:
            raise ValueError("cannot concatenate binary sparse codes of different dims")
        same = {(p.layout, p.packed.shape[1:], None if p.counts is None else p.counts.dtype) for p in parts}
        if len(same) == 1:
            counts = None if first.counts is None else np.concatenate([p.counts for p in parts if p.counts is not None])
            return cls._held(first.dim, first.layout, np.concatenate([p.packed for p in parts]), counts)
        return cls.from_csr(sp.vstack([p.to_csr() for p in parts]).tocsr())

    # -- the storage form of an exported (ONNX) encoder -----------------------------------------

    @classmethod
    def onnx_graph(cls, outputs: dict[str, Any], dim: int) -> tuple[Any, ...]:
        """Packed bits, from a head's ``bitmap``, its ``packed`` rows (``pack_slots``) or its (n, k) ``indices``
        (-1 in every slot of a row with no active feature: an all-zero embedding)."""
        if "bitmap" in outputs:
            return (outputs["bitmap"].to(torch.uint8),)
        if "packed" in outputs:
            slots = graph_slots(outputs["packed"], dim)
        else:
            indices = outputs["indices"].long()
            slots = torch.where(indices >= 0, indices, torch.full_like(indices, dim))
        mask = torch.zeros(slots.shape[0], dim + 1, dtype=torch.float32, device=slots.device)
        return (pack_bits(mask.scatter(1, slots.clamp(0, dim), 1.0)[:, :dim]),)

    def onnx_arrays(self, head_outputs: Sequence[str]) -> dict[str, np.ndarray]:
        return {"bits": self.packed if self.layout == "bitmap" else self.as_layout("bitmap").packed}

    def from_onnx_arrays(self, arrays: dict[str, np.ndarray]) -> BinarySparseCodes:
        """The ``bits`` bitmap an exported encoder emits, in its smallest layout."""
        return BinarySparseCodes.from_arrays({"bitmap": arrays["bits"]}, self.dim)

    def parity_arrays(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``packed`` rows (a fixed-k head's) as the ``bits`` they stand for; other arrays as they are."""
        if "packed" not in arrays or np.asarray(arrays["packed"]).ndim != 2:
            return dict(arrays)
        rows = self._held(self.dim, "packed", np.ascontiguousarray(arrays["packed"], np.uint8))
        return {"bits": rows.as_layout("bitmap").packed}


def _stored_form(arrays: dict[str, np.ndarray], dim: int) -> tuple[str, np.ndarray, np.ndarray | None]:
    """(layout, packed, counts) of versioned arrays, their types and shapes checked (not their contents)."""
    if "bitmap" in arrays:
        return "bitmap", _bitmap_array(arrays["bitmap"], dim), None
    if "packed" not in arrays:
        raise ValueError(f"binary_sparse codes hold 'packed' rows (with 'counts' when ragged) or a 'bitmap'; got {sorted(arrays)}")
    packed = np.asarray(arrays["packed"])
    if packed.dtype != np.uint8:
        raise ValueError(f"binary_sparse packed rows must be uint8; got {packed.dtype}")
    if "counts" not in arrays:
        if packed.ndim != 2 or packed.shape[1] < packed_width(1, dim):
            raise ValueError(f"binary_sparse packed rows must be (n, w) with w >= {packed_width(1, dim)}; got {packed.shape}")
        return "packed", packed, None
    counts = np.asarray(arrays["counts"])
    if counts.ndim != 1 or counts.dtype.kind != "u" or packed.ndim != 1:
        raise ValueError(f"ragged binary_sparse codes need 1-D unsigned counts and 1-D packed bytes; got counts "
                         f"{counts.dtype} {counts.shape}, packed {packed.shape}")
    expected = int((-(-counts.astype(np.int64) * index_bits(dim) // 8)).sum())
    if packed.size != expected:
        raise ValueError(f"ragged binary_sparse codes of these counts take {expected} bytes; got {packed.size}")
    return "ragged", packed, counts


def _bitmap_array(bitmap: np.ndarray, dim: int) -> np.ndarray:
    bitmap = np.asarray(bitmap)
    if bitmap.dtype != np.uint8 or bitmap.ndim != 2 or bitmap.shape[1] != (dim + 7) // 8:
        raise ValueError(f"bitmap must be uint8 of shape (n, {(dim + 7) // 8}); got {bitmap.dtype} {bitmap.shape}")
    return bitmap


def _csr_triple(indices: np.ndarray, counts: np.ndarray, dim: int) -> sp.csr_matrix:
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return sp.csr_matrix((np.ones(len(indices), np.float32), indices.astype(np.int64), indptr), shape=(len(counts), dim))


def _check_sorted_unique(indptr: np.ndarray, indices: np.ndarray) -> None:
    if indices.size < 2:
        return
    steps = np.diff(indices.astype(np.int64))
    row_starts = np.zeros(indices.size - 1, dtype=bool)
    starts = indptr[1:-1]
    row_starts[starts[(starts > 0) & (starts < indices.size)] - 1] = True
    if np.any((steps <= 0) & ~row_starts):
        raise ValueError("indices must be strictly increasing within each row (sorted, no duplicates)")


def _lgamma(x: np.ndarray | float) -> np.ndarray:
    from scipy.special import gammaln

    return np.asarray(gammaln(x), dtype=np.float64)
