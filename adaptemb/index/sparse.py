"""Sparse search: posting lists + scipy on CPU, torch sparse CSR on CUDA; and dense-query-vs-sparse-doc.

CPU layout. The documents are stored transposed, as one posting list per dimension (a (dim, n) CSR
matrix whose row ``j`` lists, in increasing id order, the documents with dimension ``j`` active). A
query with ``k`` active dimensions touches only its ``k`` posting lists: slicing them out and
multiplying by the query's values (``scipy.sparse`` CSR row slice, then a CSC mat-vec) scatter-adds
``k · nnz/dim`` products into a dense score row, instead of the ``n · dim`` multiply-adds of dense
search. The exact top-k of each row is then found with ``threshold_top_k``.
"""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np
import scipy.sparse as sp
import torch

from adaptemb.codes import Codes, DenseCodes, SparseCodes
from adaptemb.index.base import (
    Index,
    SearchResult,
    rows_per_block,
    threshold_top_k,
    torch_top_k,
)

SparseBackend = Literal["auto", "scipy", "torch"]


def torch_csr(matrix: sp.csr_matrix, device: str) -> torch.Tensor:
    """A scipy CSR matrix as a float32 torch sparse CSR tensor on ``device``."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(
            torch.from_numpy(matrix.indptr.astype(np.int64)),
            torch.from_numpy(matrix.indices.astype(np.int64)),
            torch.from_numpy(matrix.data.astype(np.float32)),
            size=matrix.shape,
            device=device,
            check_invariants=False,  # built from a valid scipy CSR matrix
        )


class _SparseDocs(Index):
    """Shared set-up: documents as posting lists (scipy) or as a torch sparse CSR matrix."""

    doc_kind = "sparse"

    def __init__(
        self, docs: Codes, *, device: str = "cpu", query_batch: int = 512, backend: SparseBackend = "auto"
    ) -> None:
        super().__init__(docs, device=device, query_batch=query_batch)
        assert isinstance(docs, SparseCodes)
        if backend not in ("auto", "scipy", "torch"):
            raise ValueError(f"unknown sparse backend {backend!r}; use auto, scipy or torch")
        self._engine = "torch" if backend == "torch" or (backend == "auto" and self.device != "cpu") else "scipy"
        csr = docs.to_csr()
        if self._engine == "torch":
            self._docs_torch = torch_csr(csr, self.device)
        else:
            self._store(csr)

    def _store(self, csr: sp.csr_matrix) -> None:
        self._postings = csr.T.tocsr()  # (dim, n): posting list per dimension, ids ascending

    @property
    def backend(self) -> str:
        return "torch-sparse-csr" if self._engine == "torch" else "scipy-postings"

    def _torch_scores(self, dense_queries: torch.Tensor) -> torch.Tensor:
        """(b, n) scores of dense (b, dim) queries on the device: sparse docs @ queries^T."""
        return torch.sparse.mm(self._docs_torch, dense_queries.T).T


class SparseIndex(_SparseDocs):
    """Exact sparse dot-product search of ``SparseCodes`` queries against ``SparseCodes`` documents."""

    query_kind = "sparse"

    def _search_batch(self, queries: Codes, top_k: int) -> SearchResult:
        assert isinstance(queries, SparseCodes)
        q = queries.to_csr()
        if self._engine == "torch":
            dense = torch.from_numpy(q.toarray()).to(self.device)
            return torch_top_k(self._torch_scores(dense), top_k)
        parts = [self._posting_query(q, row, top_k) for row in range(q.shape[0])]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def _posting_query(self, q: sp.csr_matrix, row: int, top_k: int) -> SearchResult:
        """One query: scatter-add its posting lists into a score row, then the row's exact top-k.

        Query by query, so the (n,) score row is still in cache when its top-k is selected.
        """
        lo, hi = q.indptr[row], q.indptr[row + 1]
        if hi == lo:
            return threshold_top_k(np.zeros((1, len(self)), dtype=np.float32), top_k)
        lists = self._postings[q.indices[lo:hi]]  # the query's posting lists, (k, n)
        scores = np.asarray(lists.T @ q.data[lo:hi], dtype=np.float32)  # scatter-add along each list
        return threshold_top_k(scores[None, :], top_k)


class AsymmetricIndex(_SparseDocs):
    """Dense query codes (dim h) against sparse document codes (dim h): score = <query, doc>.

    For methods whose ``encode_queries`` returns ``DenseCodes`` in the sparse code space. On CPU each
    block of queries is one scipy CSR × dense product (cost nnz(docs) per query).
    """

    query_kind = "dense"

    def _store(self, csr: sp.csr_matrix) -> None:
        self._docs_csr = csr

    @property
    def backend(self) -> str:
        return "torch-sparse-csr" if self._engine == "torch" else "scipy-csr"

    def _search_batch(self, queries: Codes, top_k: int) -> SearchResult:
        assert isinstance(queries, DenseCodes)
        values = np.ascontiguousarray(queries.values, dtype=np.float32)
        if self._engine == "torch":
            return torch_top_k(self._torch_scores(torch.from_numpy(values).to(self.device)), top_k)
        block = rows_per_block(4 * len(self), cap=len(values))
        parts = []
        for s in range(0, len(values), block):
            scores = np.ascontiguousarray((self._docs_csr @ values[s : s + block].T).T)
            parts.append(threshold_top_k(scores, top_k))
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

