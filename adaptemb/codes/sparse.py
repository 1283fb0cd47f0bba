"""Sparse (index, value) codes over ``dim`` dimensions, fixed-k or ragged, scored by sparse dot product."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from adaptemb.codes.base import Codes, index_dtype, select_rows
from adaptemb.codes.graph import torch_index_dtype
from adaptemb.errors import UnsupportedExportError


class SparseCodes(Codes):
    """Sparse vectors as (index, value) pairs over ``dim`` dimensions; scored by sparse dot product.

    Two layouts: fixed-k (``indices`` and ``values`` of shape (n, k)) and ragged (1-D ``indices`` and
    ``values`` with per-row ``counts``). Indices use the smallest unsigned dtype that fits ``dim``;
    ``counts`` of a ragged layout are part of the per-row payload. Zero values are kept as stored.
    """

    kind = "sparse"
    onnx_outputs = ("indices", "values")
    vector_form = "sparse"

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
            sel = select_rows(rows)
            return SparseCodes(self.indices[sel], self.values[sel], self.dim)
        return SparseCodes.from_csr(self.to_csr()[select_rows(rows)], self.values.dtype)

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

    def vector_rows(self) -> sp.csr_matrix:
        return self.to_csr()

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

    @classmethod
    def onnx_graph(cls, outputs: dict[str, Any], dim: int) -> tuple[Any, ...]:
        return outputs["indices"].to(torch_index_dtype(dim)), outputs["values"]

    def onnx_arrays(self, head_outputs: Sequence[str]) -> dict[str, np.ndarray]:
        if self.counts is not None:
            raise UnsupportedExportError("sparse codes with a variable count per row (ragged) cannot be exported")
        return {"indices": self.indices, "values": self.values}
