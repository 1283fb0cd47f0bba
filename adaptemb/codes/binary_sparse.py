"""Sets of active indices (binary sparse vectors), stored in the smallest of three layouts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
import torch

from adaptemb.codes.base import Codes, index_dtype, select_rows
from adaptemb.codes.graph import pack_bits


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
    onnx_outputs = ("bits",)
    vector_form = "sparse"

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
        return BinarySparseCodes.from_csr(self.to_csr()[select_rows(rows)])

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

    def vector_rows(self) -> sp.csr_matrix:
        return self.to_csr()

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

    @classmethod
    def onnx_graph(cls, outputs: dict[str, Any], dim: int) -> tuple[Any, ...]:
        """Packed bits, from a head's ``bitmap`` or from its (n, k) ``indices`` (-1 in every slot of a row with
        no active feature: an all-zero embedding)."""
        if "bitmap" in outputs:
            return (outputs["bitmap"].to(torch.uint8),)
        indices = outputs["indices"].long()
        mask = torch.zeros(indices.shape[0], dim, dtype=torch.float32, device=indices.device)
        return (pack_bits(mask.scatter(1, indices.clamp_min(0), (indices >= 0).float())),)

    def onnx_arrays(self, head_outputs: Sequence[str]) -> dict[str, np.ndarray]:
        return {"bits": np.packbits(self.to_dense() > 0, axis=1)}

    def _check_sorted_unique(self) -> None:
        if self.indices.size < 2:
            return
        steps = np.diff(self.indices.astype(np.int64))
        row_starts = np.zeros(self.indices.size - 1, dtype=bool)
        starts = self.indptr[1:-1]
        row_starts[starts[(starts > 0) & (starts < self.indices.size)] - 1] = True
        if np.any((steps <= 0) & ~row_starts):
            raise ValueError("indices must be strictly increasing within each row (sorted, no duplicates)")


def _lgamma(x: np.ndarray | float) -> np.ndarray:
    from scipy.special import gammaln

    return np.asarray(gammaln(x), dtype=np.float64)
