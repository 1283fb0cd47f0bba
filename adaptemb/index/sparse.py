"""Search over sparse document codes (``sparse`` and ``binary_sparse``) through posting lists.

One index serves every query kind that scores such documents:

* sparse queries of the same kind (the symmetric case: a sparse dot product, the CSR paper's protocol;
  for binary codes the overlap count ``|A ∩ B|`` or, with ``metric="cosine"``, ``|A ∩ B| / sqrt(|A| |B|)``);
* ``ProjectedQueries`` (the asymmetric case: a dense query over the code dimensions plus an offset,
  ``<values, z> + offset``, e.g. a query projected through a method's decoder).

Scores may be multiplied by a per-document weight ``doc_scale`` computed once at build time (a method's
normalisation, such as ``1 / |decode(z)|``). Engines: ``numba`` (CPU default: compiled fused kernels over
blocked posting lists for sparse queries and over the documents' rows for projected queries, see
``adaptemb.index.postings``), ``scipy`` (CPU, no compiler needed) and ``torch`` (sparse CSR products; the
default on CUDA). All are exact. The numba layouts are built for the query kind the index is made for
(``query_kind``, which ``Compressor.index`` passes), or on the first search of a kind.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
import torch

from adaptemb.codes import BinarySparseCodes, Codes, ProjectedQueries, SparseCodes
from adaptemb.index.base import Index, SearchResult, rows_per_block
from adaptemb.index.postings import (
    BlockedPostings,
    ForwardCodes,
    numba_available,
    search_projected,
    search_sparse,
)
from adaptemb.ranking import threshold_top_k, torch_top_k

SparseBackend = Literal["auto", "numba", "scipy", "torch"]
ENGINES = ("auto", "numba", "scipy", "torch")
METRICS = ("dot", "cosine")


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


def code_matrix(codes: Codes) -> sp.csr_matrix:
    """The float32 CSR matrix of sparse or binary-sparse codes (binary entries are 1.0)."""
    if not isinstance(codes, (SparseCodes, BinarySparseCodes)):
        raise TypeError(f"expected sparse or binary_sparse codes; got {codes.kind}")
    return codes.to_csr()


def inverse_sqrt_counts(counts: np.ndarray) -> np.ndarray:
    """``1 / sqrt(count)`` per row, 0 for an empty row (the cosine weights of binary codes)."""
    counts = counts.astype(np.float64)
    return np.where(counts > 0, 1.0 / np.sqrt(np.maximum(counts, 1.0)), 0.0).astype(np.float32)


class SparseIndex(Index):
    """Exact search of sparse or binary-sparse documents through posting lists (see the module docstring).

    ``doc_scale`` (n,) multiplies each document's score; ``metric="cosine"`` (binary-sparse documents
    only) divides overlap counts by ``sqrt(|A| |B|)``; ``threads`` caps the numba engine's workers.
    """

    name = "sparse-postings"
    pairs = (
        ("sparse", "sparse"),
        ("projected", "sparse"),
        ("binary_sparse", "binary_sparse"),
        ("projected", "binary_sparse"),
    )

    def __init__(
        self,
        docs: Codes,
        *,
        device: str = "cpu",
        query_batch: int = 512,
        backend: SparseBackend = "auto",
        metric: Literal["dot", "cosine"] = "dot",
        doc_scale: np.ndarray | None = None,
        threads: int | None = None,
        query_kind: str | None = None,
    ) -> None:
        super().__init__(docs, device=device, query_batch=query_batch, query_kind=query_kind)
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; use one of {', '.join(METRICS)}")
        if metric == "cosine" and not isinstance(docs, BinarySparseCodes):
            raise ValueError("metric='cosine' is defined for binary_sparse codes; sparse codes score by dot product")
        self.metric, self.threads, self._requested = metric, threads, backend
        self._engine = self._choose_engine(backend)
        self._doc_scale = None if doc_scale is None else self._checked_scale(doc_scale)
        self._scale = self._combined_scale(docs)
        self._postings: BlockedPostings | None = None
        self._forward: ForwardCodes | None = None
        if self._engine == "torch":
            self._docs_torch = torch_csr(code_matrix(docs), self.device)
            self._scale_torch = torch.from_numpy(self._scale).to(self.device)
        elif self._engine == "scipy":
            csr = code_matrix(docs)
            self._docs_csr, self._lists = csr, csr.T.tocsr()  # lists: (dim, n), ids ascending
        elif query_kind is not None:
            self._layout_for(query_kind)

    def _choose_engine(self, backend: str) -> str:
        if backend not in ENGINES:
            raise ValueError(f"unknown backend {backend!r} for {type(self).__name__}; use one of {', '.join(ENGINES)}")
        if backend == "auto":
            if self.device != "cpu":
                return "torch"
            return "numba" if numba_available() else "scipy"
        if backend == "numba" and not numba_available():
            raise ValueError("sparse backend 'numba' needs numba (pip install numba); use 'scipy' without it")
        if backend in ("numba", "scipy") and self.device != "cpu":
            raise ValueError(f"backend {backend!r} runs on the CPU; use 'torch' or 'auto' on {self.device}")
        return backend

    def _checked_scale(self, doc_scale: np.ndarray) -> np.ndarray:
        scale = np.asarray(doc_scale, dtype=np.float32)
        if scale.shape != (len(self),) or not np.isfinite(scale).all():
            raise ValueError(f"doc_scale must be {len(self)} finite numbers (one per document); got shape {scale.shape}")
        return scale

    def _combined_scale(self, docs: Codes) -> np.ndarray:
        scale = np.ones(len(docs), np.float32) if self._doc_scale is None else self._doc_scale.copy()
        if self.metric == "cosine":
            scale *= inverse_sqrt_counts(docs.active_counts())
        return scale

    def _layout_for(self, query_kind: str) -> BlockedPostings | ForwardCodes:
        """The numba layout that serves ``query_kind`` queries, built on first need."""
        if query_kind == "projected":
            if self._forward is None:
                self._forward = ForwardCodes.from_csr(code_matrix(self.docs), self._scale)
            return self._forward
        if self._postings is None:
            self._postings = BlockedPostings.from_csr(code_matrix(self.docs), self._scale)
        return self._postings

    @property
    def backend(self) -> str:
        if self._engine == "numba":
            return "numba-rows" if self.query_kind == "projected" else "numba-postings"
        return {"scipy": "scipy-postings", "torch": "torch-sparse-csr"}[self._engine]

    @property
    def nbytes(self) -> int:
        """Bytes of the search structures built so far (posting lists or rows, weights) on their device."""
        if self._engine == "numba":
            return sum(layout.nbytes for layout in (self._postings, self._forward) if layout is not None)
        if self._engine == "scipy":
            lists, docs = self._lists, self._docs_csr
            return int(lists.data.nbytes + lists.indices.nbytes + lists.indptr.nbytes + docs.data.nbytes
                       + docs.indices.nbytes + docs.indptr.nbytes + self._scale.nbytes)
        t = self._docs_torch
        return int(sum(x.numel() * x.element_size() for x in (t.crow_indices(), t.col_indices(), t.values())))

    def options(self) -> dict[str, Any]:
        return {"backend": self._requested, "metric": self.metric, "threads": self.threads}

    def arrays(self) -> dict[str, np.ndarray]:
        return {} if self._doc_scale is None else {"doc_scale": self._doc_scale}

    # -- search ---------------------------------------------------------------------------------

    def _search_batch(self, queries: Codes, top_k: int) -> SearchResult:
        if isinstance(queries, ProjectedQueries):
            if self.metric == "cosine":
                raise ValueError("metric='cosine' compares binary codes; projected queries score by dot product")
            values = np.ascontiguousarray(queries.values, dtype=np.float32)
            return self._search_projected(values, queries.offset.astype(np.float32), top_k)
        q = code_matrix(queries)
        if self.metric == "cosine":
            q = sp.csr_matrix(sp.diags(inverse_sqrt_counts(queries.active_counts())) @ q)
        return self._search_sparse(q, top_k)

    def _search_sparse(self, q: sp.csr_matrix, top_k: int) -> SearchResult:
        if self._engine == "numba":
            postings = self._layout_for("sparse")
            assert isinstance(postings, BlockedPostings)
            return search_sparse(postings, q, top_k, threads=self.threads)
        if self._engine == "torch":
            dense = torch.from_numpy(q.toarray()).to(self.device)
            return self._torch_top_k(dense, torch.zeros(len(dense), device=self.device), top_k)
        parts = [self._posting_query(q, row, top_k) for row in range(q.shape[0])]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def _posting_query(self, q: sp.csr_matrix, row: int, top_k: int) -> SearchResult:
        """scipy: one query's posting lists scatter-added into a score row, then the row's exact top-k."""
        lo, hi = q.indptr[row], q.indptr[row + 1]
        scores = np.zeros(len(self), dtype=np.float32)
        if hi > lo:
            scores = np.asarray(self._lists[q.indices[lo:hi]].T @ q.data[lo:hi], dtype=np.float32)
        return threshold_top_k((scores * self._scale)[None, :], top_k)

    def _search_projected(self, values: np.ndarray, offset: np.ndarray, top_k: int) -> SearchResult:
        if self._engine == "numba":
            rows = self._layout_for("projected")
            assert isinstance(rows, ForwardCodes)
            return search_projected(rows, values, offset, top_k, threads=self.threads)
        if self._engine == "torch":
            dense = torch.from_numpy(values).to(self.device)
            return self._torch_top_k(dense, torch.from_numpy(offset).to(self.device), top_k)
        step, parts = rows_per_block(4 * len(self), cap=len(values)), []
        for s in range(0, len(values), step):
            scores = np.asarray((self._docs_csr @ values[s : s + step].T).T, dtype=np.float32)
            scores = (scores + offset[s : s + step, None]) * self._scale[None, :]
            parts.append(threshold_top_k(np.ascontiguousarray(scores), top_k))
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def _torch_top_k(self, dense: torch.Tensor, offset: torch.Tensor, top_k: int) -> SearchResult:
        """Top-k of ``((docs @ dense^T)^T + offset) * doc_scale`` on the device, queries in memory-bounded blocks."""
        step, parts = rows_per_block(4 * len(self), cap=len(dense)), []
        for s in range(0, len(dense), step):
            scores = torch.sparse.mm(self._docs_torch, dense[s : s + step].T).T
            scores = (scores + offset[s : s + step, None]) * self._scale_torch[None, :]
            parts.append(torch_top_k(scores, top_k))
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
