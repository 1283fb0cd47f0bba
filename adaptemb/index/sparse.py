"""Sparse search: posting lists + scipy on CPU, torch sparse CSR on CUDA; and dense-query-vs-sparse-doc.

CPU layout. The documents are stored transposed, as posting lists: per dimension, the documents with
that dimension active, in increasing id order. A query with ``k`` active dimensions touches only its
``k`` posting lists and scatter-adds ``k · nnz/dim`` products into a score buffer, instead of the
``n · dim`` multiply-adds of dense search. Two CPU engines: ``numba`` (default when numba is
installed: blocked lists, a compiled fused scatter + top-k kernel, queries over threads, see
``adaptemb.index.postings``) and ``scipy`` (one (dim, n) CSR matrix; per query a row slice and a CSC
mat-vec, then ``threshold_top_k``). Both are exact and rank identically.
"""

from __future__ import annotations

import warnings
from typing import ClassVar, Literal

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
from adaptemb.index.postings import BlockedPostings, numba_available, search_postings

SparseBackend = Literal["auto", "numba", "scipy", "torch"]


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
    engines: ClassVar[tuple[str, ...]] = ("auto", "scipy", "torch")

    def __init__(
        self, docs: Codes, *, device: str = "cpu", query_batch: int = 512, backend: SparseBackend = "auto"
    ) -> None:
        super().__init__(docs, device=device, query_batch=query_batch)
        assert isinstance(docs, SparseCodes)
        self._engine = self._choose_engine(backend)
        csr = docs.to_csr()
        if self._engine == "torch":
            self._docs_torch = torch_csr(csr, self.device)
        else:
            self._store(csr)

    def _choose_engine(self, backend: str) -> str:
        if backend not in self.engines:
            raise ValueError(f"unknown backend {backend!r} for {type(self).__name__}; use one of {', '.join(self.engines)}")
        if backend == "auto":
            return "torch" if self.device != "cpu" else "scipy"
        return backend

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
    engines = ("auto", "numba", "scipy", "torch")

    def __init__(
        self, docs: Codes, *, device: str = "cpu", query_batch: int = 512, backend: SparseBackend = "auto",
        threads: int | None = None,
    ) -> None:
        self.threads = threads
        super().__init__(docs, device=device, query_batch=query_batch, backend=backend)

    def _choose_engine(self, backend: str) -> str:
        engine = super()._choose_engine(backend)
        if backend == "auto" and engine == "scipy" and numba_available():
            return "numba"
        if engine == "numba" and not numba_available():
            raise ValueError("sparse backend 'numba' needs numba (pip install numba); use 'scipy' without it")
        return engine

    def _store(self, csr: sp.csr_matrix) -> None:
        if self._engine == "numba":
            self._blocked = BlockedPostings.from_csr(csr)
        else:
            super()._store(csr)

    @property
    def backend(self) -> str:
        return "numba-postings" if self._engine == "numba" else super().backend

    def _search_batch(self, queries: Codes, top_k: int) -> SearchResult:
        assert isinstance(queries, SparseCodes)
        q = queries.to_csr()
        if self._engine == "numba":
            return search_postings(self._blocked, q, top_k, threads=self.threads)
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

