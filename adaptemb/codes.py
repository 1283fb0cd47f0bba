"""Code types: what a compressor emits. Each knows its exact storage and how to score against its own kind.

Storage accounting is exact and split in two:

* ``row_nbytes``: bytes that grow with the number of vectors (the per-row payload);
* ``shared_nbytes``: bytes stored once for all rows (for example int8 scales).

``nbytes`` is their sum and equals the bytes of the arrays ``to_arrays()`` returns, which is what
``adaptemb.save_codes`` writes. ``bytes_per_vector`` is ``row_nbytes / len(codes)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np
import scipy.sparse as sp

_C = TypeVar("_C", bound="Codes")
_SCORE_BLOCK_ROWS = 16384  # rows decoded at a time when scoring, to bound memory


class Codes(ABC):
    """Compressed vectors of one kind. Subclasses register themselves by ``kind``."""

    kind: ClassVar[str]
    shared_arrays: ClassVar[tuple[str, ...]] = ()
    """Names in ``to_arrays()`` stored once for all rows (int8's calibration); every other array is per row:
    (n, …) arrays, or 1-D arrays of length ``counts.sum()`` split by a per-row ``counts`` array."""
    _kinds: ClassVar[dict[str, type[Codes]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            Codes._kinds[cls.kind] = cls

    @classmethod
    def for_kind(cls, kind: str) -> type[Codes]:
        """The code class registered under ``kind``."""
        if kind not in cls._kinds:
            raise ValueError(f"unknown code kind {kind!r}; known kinds: {', '.join(sorted(cls._kinds))}")
        return cls._kinds[kind]

    dim: int
    """Dimension of the code space (d for dense prefixes, h for sparse codes)."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __getitem__(self: _C, rows: slice | np.ndarray | Sequence[int]) -> _C:
        """The codes of the selected rows."""

    @property
    @abstractmethod
    def row_nbytes(self) -> int:
        """Bytes of per-row payload, summed over all rows."""

    @property
    def shared_nbytes(self) -> int:
        """Bytes stored once for all rows (0 unless the kind has shared tables)."""
        return 0

    @property
    def nbytes(self) -> int:
        """Exact bytes of everything the codes hold: ``row_nbytes + shared_nbytes``."""
        return self.row_nbytes + self.shared_nbytes

    @property
    def bytes_per_vector(self) -> float:
        """Per-row payload bytes, the number to compare with ``4 * d`` for float32."""
        return self.row_nbytes / len(self)

    @abstractmethod
    def active_counts(self) -> np.ndarray:
        """Number of stored (active) dimensions of each row, shape (n,)."""

    @abstractmethod
    def to_dense(self) -> np.ndarray:
        """A float32 (n, dim) array of the values the codes stand for, for inspection and tests."""

    @abstractmethod
    def similarity(self, other: Codes) -> np.ndarray:
        """Scores (len(self), len(other)) of the kind's own metric; larger means more similar."""

    @abstractmethod
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays that fully describe the codes (what is saved)."""

    @classmethod
    @abstractmethod
    def from_arrays(cls: type[_C], arrays: dict[str, np.ndarray], dim: int) -> _C:
        """Rebuild codes from ``to_arrays()`` output."""

    @classmethod
    @abstractmethod
    def concat(cls: type[_C], parts: Sequence[_C]) -> _C:
        """Stack codes of the same kind row-wise."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n={len(self)}, dim={self.dim}, "
            f"bytes_per_vector={self.bytes_per_vector:.1f})"
        )

    def _check_same_kind(self, other: Codes) -> None:
        if type(other) is not type(self):
            raise TypeError(
                f"cannot score {type(self).__name__} against {type(other).__name__}; "
                "encode queries and documents with the same compressor"
            )
        if other.dim != self.dim:
            raise ValueError(f"code dimensions differ: {self.dim} vs {other.dim}")


class DenseCodes(Codes):
    """Dense float vectors (a prefix, a projection); scored by dot product."""

    kind = "dense"

    def __init__(self, values: np.ndarray) -> None:
        if values.ndim != 2 or values.dtype not in (np.float16, np.float32):
            raise ValueError(f"dense codes need a 2-D float16/float32 array; got {values.dtype} {values.shape}")
        self.values = values
        self.dim = values.shape[1]

    def __len__(self) -> int:
        return self.values.shape[0]

    def __getitem__(self, rows: slice | np.ndarray | Sequence[int]) -> DenseCodes:
        return DenseCodes(self.values[_rows(rows)])

    @property
    def row_nbytes(self) -> int:
        return self.values.nbytes

    def active_counts(self) -> np.ndarray:
        return np.full(len(self), self.dim, dtype=np.int64)

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


def index_dtype(dim: int) -> np.dtype:
    """The smallest unsigned integer dtype that holds indices ``0 .. dim - 1``."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if dim - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.uint64)


class SparseCodes(Codes):
    """Sparse vectors as (index, value) pairs over ``dim`` dimensions; scored by sparse dot product.

    Two layouts: fixed-k (``indices`` and ``values`` of shape (n, k)) and ragged (1-D ``indices`` and
    ``values`` with per-row ``counts``). Indices use the smallest unsigned dtype that fits ``dim``;
    ``counts`` of a ragged layout are part of the per-row payload. Zero values are kept as stored.
    """

    kind = "sparse"

    def __init__(
        self, indices: np.ndarray, values: np.ndarray, dim: int, counts: np.ndarray | None = None
    ) -> None:
        if indices.shape != values.shape:
            raise ValueError(f"indices {indices.shape} and values {values.shape} must have the same shape")
        if values.dtype not in (np.float16, np.float32):
            raise ValueError(f"sparse values must be float16 or float32; got {values.dtype}")
        if counts is None and indices.ndim != 2:
            raise ValueError("fixed-k sparse codes need 2-D indices and values of shape (n, k)")
        if counts is not None and (indices.ndim != 1 or int(counts.sum()) != indices.shape[0]):
            raise ValueError("ragged sparse codes need 1-D indices/values whose length is counts.sum()")
        if indices.size and int(indices.max()) >= dim:
            raise ValueError(f"sparse index {int(indices.max())} is out of range for dim={dim}")
        self.indices = indices.astype(index_dtype(dim), copy=False)
        self.values = values
        self.counts = counts
        self.dim = int(dim)

    @classmethod
    def from_csr(cls, matrix: sp.csr_matrix, value_dtype: np.dtype = np.float32) -> SparseCodes:
        """Ragged codes from a scipy CSR matrix (every stored entry is kept)."""
        counts = np.diff(matrix.indptr).astype(index_dtype(matrix.shape[1] + 1))
        return cls(matrix.indices, matrix.data.astype(value_dtype), matrix.shape[1], counts=counts)

    @property
    def is_fixed_k(self) -> bool:
        return self.counts is None

    def __len__(self) -> int:
        return self.indices.shape[0] if self.counts is None else self.counts.shape[0]

    def __getitem__(self, rows: slice | np.ndarray | Sequence[int]) -> SparseCodes:
        if self.counts is None:
            sel = _rows(rows)
            return SparseCodes(self.indices[sel], self.values[sel], self.dim)
        return SparseCodes.from_csr(self.to_csr()[_rows(rows)], self.values.dtype)

    @property
    def row_nbytes(self) -> int:
        counts = 0 if self.counts is None else self.counts.nbytes
        return self.indices.nbytes + self.values.nbytes + counts

    def active_counts(self) -> np.ndarray:
        if self.counts is None:
            return np.full(len(self), self.indices.shape[1], dtype=np.int64)
        return self.counts.astype(np.int64)

    def to_csr(self) -> sp.csr_matrix:
        """A float32 scipy CSR matrix of shape (n, dim)."""
        counts = self.active_counts()
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        matrix = sp.csr_matrix(
            (self.values.reshape(-1).astype(np.float32), self.indices.reshape(-1).astype(np.int64), indptr),
            shape=(len(self), self.dim),
        )
        matrix.sum_duplicates()
        return matrix

    def to_dense(self) -> np.ndarray:
        return self.to_csr().toarray()

    def similarity(self, other: Codes) -> np.ndarray:
        self._check_same_kind(other)
        assert isinstance(other, SparseCodes)
        return np.asarray((self.to_csr() @ other.to_csr().T).toarray(), dtype=np.float32)

    def to_arrays(self) -> dict[str, np.ndarray]:
        arrays = {"indices": self.indices, "values": self.values}
        if self.counts is not None:
            arrays["counts"] = self.counts
        return arrays

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], dim: int) -> SparseCodes:
        return cls(arrays["indices"], arrays["values"], dim, counts=arrays.get("counts"))

    @classmethod
    def concat(cls, parts: Sequence[SparseCodes]) -> SparseCodes:
        if all(p.is_fixed_k for p in parts) and len({p.indices.shape[1] for p in parts}) == 1:
            return cls(
                np.concatenate([p.indices for p in parts]),
                np.concatenate([p.values for p in parts]),
                parts[0].dim,
            )
        return cls.from_csr(sp.vstack([p.to_csr() for p in parts]).tocsr(), parts[0].values.dtype)


class BinaryCodes(Codes):
    """Sign bits packed 8 per byte (bit set = positive); stands for a vector of +1/-1.

    ``similarity`` is the +1/-1 dot product, ``dim - 2 * hamming``: it ranks exactly as Hamming
    distance does and is on the scale of a dot product.
    """

    kind = "binary"

    def __init__(self, packed: np.ndarray, dim: int) -> None:
        if packed.dtype != np.uint8 or packed.ndim != 2 or packed.shape[1] != (dim + 7) // 8:
            raise ValueError(f"binary codes need uint8 of shape (n, {(dim + 7) // 8}); got {packed.dtype} {packed.shape}")
        self.packed = packed
        self.dim = int(dim)

    @classmethod
    def from_signs(cls, x: np.ndarray) -> BinaryCodes:
        """Pack ``x > 0`` of a 2-D array."""
        return cls(np.packbits(x > 0, axis=1), x.shape[1])

    def __len__(self) -> int:
        return self.packed.shape[0]

    def __getitem__(self, rows: slice | np.ndarray | Sequence[int]) -> BinaryCodes:
        return BinaryCodes(self.packed[_rows(rows)], self.dim)

    @property
    def row_nbytes(self) -> int:
        return self.packed.nbytes

    def active_counts(self) -> np.ndarray:
        return np.full(len(self), self.dim, dtype=np.int64)

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
        out = np.empty((len(self), len(other)), dtype=np.float32)
        for start in range(0, len(other), _SCORE_BLOCK_ROWS):
            ones_b = other[start : start + _SCORE_BLOCK_ROWS].bits().astype(np.float32)
            common = ones_a @ ones_b.T  # |a AND b|, exact in float32 for dim < 2**24
            hamming = ones_a.sum(1, keepdims=True) + ones_b.sum(1)[None, :] - 2.0 * common
            out[:, start : start + len(ones_b)] = self.dim - 2.0 * hamming
        return out

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"packed": self.packed}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], dim: int) -> BinaryCodes:
        return cls(arrays["packed"], dim)

    @classmethod
    def concat(cls, parts: Sequence[BinaryCodes]) -> BinaryCodes:
        return cls(np.concatenate([p.packed for p in parts]), parts[0].dim)


class QuantizedCodes(Codes):
    """int8 codes with per-dimension affine calibration: ``x ≈ offset + scale * code``.

    ``scale`` and ``offset`` (float32, shape (dim,)) are shared by all rows. ``similarity`` is the
    exact inner product of the dequantised vectors, computed blockwise in float32.
    """

    kind = "int8"
    shared_arrays = ("scale", "offset")

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
        return QuantizedCodes(self.codes[_rows(rows)], self.scale, self.offset)

    @property
    def row_nbytes(self) -> int:
        return self.codes.nbytes

    @property
    def shared_nbytes(self) -> int:
        return self.scale.nbytes + self.offset.nbytes

    def active_counts(self) -> np.ndarray:
        return np.full(len(self), self.dim, dtype=np.int64)

    def to_dense(self) -> np.ndarray:
        return self.offset + self.scale * self.codes.astype(np.float32)

    def similarity(self, other: Codes) -> np.ndarray:
        self._check_same_kind(other)
        assert isinstance(other, QuantizedCodes)
        if not (np.array_equal(self.scale, other.scale) and np.array_equal(self.offset, other.offset)):
            raise ValueError("int8 codes come from different calibrations; encode both with one compressor")
        left = self.to_dense()
        out = np.empty((len(self), len(other)), dtype=np.float32)
        for start in range(0, len(other), _SCORE_BLOCK_ROWS):
            right = other[start : start + _SCORE_BLOCK_ROWS].to_dense()
            out[:, start : start + len(right)] = left @ right.T
        return out

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"codes": self.codes, "scale": self.scale, "offset": self.offset}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], dim: int) -> QuantizedCodes:
        return cls(arrays["codes"], arrays["scale"], arrays["offset"])

    @classmethod
    def concat(cls, parts: Sequence[QuantizedCodes]) -> QuantizedCodes:
        return cls(np.concatenate([p.codes for p in parts]), parts[0].scale, parts[0].offset)


def _rows(rows: slice | np.ndarray | Sequence[int]) -> slice | np.ndarray:
    if isinstance(rows, slice):
        return rows
    if isinstance(rows, (int, np.integer)):
        raise TypeError("index codes with a slice or an array of row numbers, e.g. codes[[i]]")
    return np.asarray(rows)


class BinarySparseCodes(Codes):
    """Sets of active indices over ``dim`` features (binary sparse vectors), e.g. BSA codes.

    Each row stands for a 0/1 vector. The codes are held as CSR pieces (``indptr``, sorted
    ``indices``) and stored in whichever layout is smallest for the whole collection:

    * ``"fixed"``: every row has the same count k: ``indices`` (n, k), no counts;
    * ``"ragged"``: 1-D ``indices`` plus per-row ``counts``;
    * ``"bitmap"``: ``bitmap`` bits packed 8 per byte, (n, ceil(dim / 8)).

    ``row_nbytes`` is the bytes of that layout (what ``to_arrays`` returns); ``storage`` also reports
    the ideal bit-packed size (``ceil(log2 dim)`` bits per index). Scoring: ``"dot"`` = |A ∩ B| and
    ``"cosine"`` = |A ∩ B| / sqrt(|A| |B|) (0 for an empty row), via scipy sparse products.
    """

    kind = "binary_sparse"
    metrics: ClassVar[tuple[str, ...]] = ("dot", "cosine")

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, dim: int) -> None:
        indptr = np.asarray(indptr, dtype=np.int64)
        if indptr.ndim != 1 or indptr.size < 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
            raise ValueError("indptr must be 1-D, start at 0 and never decrease")
        if indices.ndim != 1 or indices.shape[0] != indptr[-1]:
            raise ValueError(f"indices must be 1-D with indptr[-1]={int(indptr[-1])} entries; got {indices.shape}")
        if indices.size and (int(indices.max()) >= dim or int(indices.min()) < 0):
            raise ValueError(f"binary sparse indices must lie in [0, {dim}); got {int(indices.min())}..{int(indices.max())}")
        self.dim = int(dim)
        self.indptr = indptr
        self.indices = indices.astype(index_dtype(self.dim), copy=False)
        self._check_sorted_unique()

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

    # -- shape and storage ----------------------------------------------------------------------

    def __len__(self) -> int:
        return self.indptr.shape[0] - 1

    def __getitem__(self, rows: slice | np.ndarray | Sequence[int]) -> BinarySparseCodes:
        return BinarySparseCodes.from_csr(self.to_csr()[_rows(rows)])

    def active_counts(self) -> np.ndarray:
        return np.diff(self.indptr)

    @property
    def layout(self) -> str:
        """The stored layout: ``"fixed"``, ``"ragged"`` or ``"bitmap"`` (the smallest, in that order of ties)."""
        sizes = self._layout_nbytes()
        return min(sizes, key=sizes.__getitem__)

    @property
    def row_nbytes(self) -> int:
        return self._layout_nbytes()[self.layout]

    @property
    def storage(self) -> dict[str, Any]:
        """Practical and ideal storage, per vector: the stored layout and its bytes, the bitmap size,
        ``ceil(log2 dim)`` bits per index (plus ``ceil(log2(dim + 1))`` count bits for variable counts),
        and the combinatorial bound ``log2 C(dim, count)`` bits."""
        n = max(len(self), 1)
        counts = self.active_counts().astype(np.float64)
        index_bits = max(1, int(np.ceil(np.log2(self.dim))))
        count_bits = 0 if self.layout == "fixed" else int(np.ceil(np.log2(self.dim + 1)))
        ideal_bits = float(counts.sum()) * index_bits / n + count_bits
        log2_choose = (_lgamma(self.dim + 1) - _lgamma(counts + 1) - _lgamma(self.dim - counts + 1)) / np.log(2)
        return {
            "layout": self.layout,
            "bytes_per_vector": self.row_nbytes / n,
            "bitmap_bytes_per_vector": float((self.dim + 7) // 8),
            "index_bits": index_bits,
            "ideal_bits_per_vector": ideal_bits,
            "ideal_bytes_per_vector": ideal_bits / 8,
            "entropy_bound_bits_per_vector": float(log2_choose.mean()) if len(self) else 0.0,
            "mean_active": float(counts.mean()) if len(self) else 0.0,
        }

    def _layout_nbytes(self) -> dict[str, int]:
        n, counts = len(self), self.active_counts()
        sizes = {}
        if n and np.all(counts == counts[0]):
            sizes["fixed"] = int(self.indices.nbytes)
        sizes["ragged"] = int(self.indices.nbytes) + n * index_dtype(self.dim + 1).itemsize
        sizes["bitmap"] = n * ((self.dim + 7) // 8)
        return sizes

    # -- values and scoring ---------------------------------------------------------------------

    def to_csr(self) -> sp.csr_matrix:
        """A float32 0/1 scipy CSR matrix of shape (n, dim)."""
        data = np.ones(self.indices.shape[0], dtype=np.float32)
        return sp.csr_matrix((data, self.indices.astype(np.int64), self.indptr), shape=(len(self), self.dim))

    def to_dense(self) -> np.ndarray:
        return self.to_csr().toarray()

    def similarity(self, other: Codes, metric: str = "dot") -> np.ndarray:
        """``"dot"``: |A ∩ B|; ``"cosine"``: |A ∩ B| / sqrt(|A| |B|), 0 where a row is empty."""
        self._check_same_kind(other)
        assert isinstance(other, BinarySparseCodes)
        if metric not in self.metrics:
            raise ValueError(f"unknown metric {metric!r} for binary sparse codes; use one of {self.metrics}")
        common = np.asarray((self.to_csr() @ other.to_csr().T).toarray(), dtype=np.float32)
        if metric == "dot":
            return common
        norms = np.sqrt(np.outer(self.active_counts(), other.active_counts()).astype(np.float64))
        return np.where(norms > 0, common / np.maximum(norms, 1.0), 0.0).astype(np.float32)

    # -- saving ---------------------------------------------------------------------------------

    def to_arrays(self) -> dict[str, np.ndarray]:
        layout = self.layout
        if layout == "fixed":
            return {"indices": self.indices.reshape(len(self), -1)}
        if layout == "ragged":
            return {"indices": self.indices, "counts": self.active_counts().astype(index_dtype(self.dim + 1))}
        return {"bitmap": self._packed_bitmap()}

    def _packed_bitmap(self, block_rows: int = 65536) -> np.ndarray:
        """(n, ceil(dim / 8)) uint8 bitmaps, built block by block (one bool block at a time, never floats)."""
        out = np.empty((len(self), (self.dim + 7) // 8), dtype=np.uint8)
        for start in range(0, len(self), block_rows):
            stop = min(start + block_rows, len(self))
            lo, hi = self.indptr[start], self.indptr[stop]
            mask = np.zeros((stop - start, self.dim), dtype=bool)
            rows = np.repeat(np.arange(stop - start), np.diff(self.indptr[start : stop + 1]))
            mask[rows, self.indices[lo:hi]] = True
            out[start:stop] = np.packbits(mask, axis=1)
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], dim: int) -> BinarySparseCodes:
        if "bitmap" in arrays:
            packed = arrays["bitmap"]
            if packed.dtype != np.uint8 or packed.ndim != 2 or packed.shape[1] != (dim + 7) // 8:
                raise ValueError(f"bitmap must be uint8 of shape (n, {(dim + 7) // 8}); got {packed.dtype} {packed.shape}")
            return cls.from_mask(np.unpackbits(packed, axis=1, count=dim).astype(bool))
        indices = arrays["indices"]
        if "counts" in arrays:
            counts = arrays["counts"].astype(np.int64)
            return cls(np.concatenate([[0], np.cumsum(counts)]), indices, dim)
        if indices.ndim != 2:
            raise ValueError(f"fixed-count indices must be 2-D (n, k); got shape {indices.shape}")
        return cls(np.arange(indices.shape[0] + 1, dtype=np.int64) * indices.shape[1], indices.reshape(-1), dim)

    @classmethod
    def concat(cls, parts: Sequence[BinarySparseCodes]) -> BinarySparseCodes:
        if len({p.dim for p in parts}) != 1:
            raise ValueError("cannot concatenate binary sparse codes of different dims")
        return cls.from_csr(sp.vstack([p.to_csr() for p in parts]).tocsr())

    def _check_sorted_unique(self) -> None:
        if self.indices.size < 2:
            return
        steps = np.diff(self.indices.astype(np.int64))
        row_starts = np.zeros(self.indices.size - 1, dtype=bool)
        starts = self.indptr[1:-1]
        row_starts[starts[(starts > 0) & (starts < self.indices.size)] - 1] = True
        if np.any((steps <= 0) & ~row_starts):
            raise ValueError("indices must be strictly increasing within each row (sorted, no duplicates)")


class ProjectedQueries(Codes):
    """Queries projected into a code space, for asymmetric search against sparse or binary-sparse documents.

    Row ``i`` holds a dense vector ``values[i]`` over the ``dim`` code dimensions and a scalar
    ``offset[i]``: its score against a document code ``z`` is ``<values[i], z> + offset[i]``. A
    compressor whose decoder is linear emits these (``values = W_dec q``, ``offset = <q, b>``), so the
    score equals ``<q, decode(z)>`` while the documents stay sparse. Indexes add the offset themselves;
    methods that normalise per document (``bsa``) also pass document weights to their index.
    """

    kind = "projected"

    def __init__(self, values: np.ndarray, offset: np.ndarray | None = None) -> None:
        if values.ndim != 2 or values.dtype != np.float32:
            raise ValueError(f"projected queries need a 2-D float32 array; got {values.dtype} {values.shape}")
        offset = np.zeros(len(values), np.float32) if offset is None else offset
        if offset.shape != (len(values),) or offset.dtype != np.float32:
            raise ValueError(f"offset must be float32 of shape ({len(values)},); got {offset.dtype} {offset.shape}")
        self.values = values
        self.offset = offset
        self.dim = values.shape[1]

    def __len__(self) -> int:
        return self.values.shape[0]

    def __getitem__(self, rows: slice | np.ndarray | Sequence[int]) -> ProjectedQueries:
        sel = _rows(rows)
        return ProjectedQueries(self.values[sel], self.offset[sel])

    @property
    def row_nbytes(self) -> int:
        return self.values.nbytes + self.offset.nbytes

    def active_counts(self) -> np.ndarray:
        return np.full(len(self), self.dim, dtype=np.int64)

    def to_dense(self) -> np.ndarray:
        return self.values

    def similarity(self, other: Codes) -> np.ndarray:
        """``<values, z> + offset`` against sparse or binary-sparse document codes of the same dim."""
        if not isinstance(other, (SparseCodes, BinarySparseCodes)):
            raise TypeError(f"projected queries score sparse or binary_sparse documents; got {type(other).__name__}")
        if other.dim != self.dim:
            raise ValueError(f"code dimensions differ: {self.dim} vs {other.dim}")
        out = np.empty((len(self), len(other)), dtype=np.float32)
        for start in range(0, len(other), _SCORE_BLOCK_ROWS):
            block = other[start : start + _SCORE_BLOCK_ROWS].to_csr()
            out[:, start : start + block.shape[0]] = np.asarray((block @ self.values.T).T) + self.offset[:, None]
        return out

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"values": self.values, "offset": self.offset}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], dim: int) -> ProjectedQueries:
        return cls(arrays["values"], arrays["offset"])

    @classmethod
    def concat(cls, parts: Sequence[ProjectedQueries]) -> ProjectedQueries:
        return cls(np.concatenate([p.values for p in parts]), np.concatenate([p.offset for p in parts]))


def _lgamma(x: np.ndarray | float) -> np.ndarray:
    from scipy.special import gammaln

    return np.asarray(gammaln(x), dtype=np.float64)
