"""Dense inner-product search: faiss ``IndexFlatIP`` on CPU; torch matmul + top-k (or faiss-gpu) on CUDA."""

from __future__ import annotations

from typing import Any, Literal

import faiss
import numpy as np
import torch

from adaptemb.codes import Codes, DenseCodes
from adaptemb.index.base import Index, SearchResult, rows_per_block
from adaptemb.ranking import torch_top_k


def faiss_gpu_available() -> bool:
    """True when the installed faiss has GPU support and sees a GPU."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def dense_matrix(values: np.ndarray) -> np.ndarray:
    """A C-contiguous float32 copy-if-needed of ``values`` (what faiss and BLAS want)."""
    return np.ascontiguousarray(values, dtype=np.float32)


class DenseIndex(Index):
    """Exact maximum inner product search over ``DenseCodes``.

    ``backend``: ``"auto"`` (faiss on CPU; faiss-gpu if installed, else torch, on CUDA), ``"faiss"`` or
    ``"torch"``.
    """

    name = "dense-flat"
    pairs = (("dense", "dense"),)

    def __init__(
        self,
        docs: Codes,
        *,
        device: str = "cpu",
        query_batch: int = 512,
        backend: Literal["auto", "faiss", "torch"] = "auto",
        query_kind: str | None = None,
    ) -> None:
        super().__init__(docs, device=device, query_batch=query_batch, query_kind=query_kind)
        assert isinstance(docs, DenseCodes)
        self._engine = self._choose(backend)
        self._requested = backend
        values = dense_matrix(docs.values)
        if self._engine == "torch":
            dtype = torch.float16 if docs.values.dtype == np.float16 else torch.float32
            self._docs = torch.from_numpy(values).to(self.device, dtype=dtype)
        else:
            self._faiss = faiss.IndexFlatIP(self.dim)
            if self._engine == "faiss-gpu":
                self._gpu_resources = faiss.StandardGpuResources()
                self._faiss = faiss.index_cpu_to_gpu(self._gpu_resources, _gpu_id(self.device), self._faiss)
            self._faiss.add(values)

    def _choose(self, backend: str) -> str:
        if backend not in ("auto", "faiss", "torch"):
            raise ValueError(f"unknown dense backend {backend!r}; use auto, faiss or torch")
        if self.device == "cpu":
            return "torch" if backend == "torch" else "faiss-cpu"
        if backend == "faiss" or (backend == "auto" and faiss_gpu_available()):
            if not faiss_gpu_available():
                raise ValueError("backend='faiss' on CUDA needs faiss-gpu (pip install adaptemb[gpu])")
            return "faiss-gpu"
        return "torch"

    @property
    def backend(self) -> str:
        return self._engine

    def options(self) -> dict[str, Any]:
        return {"backend": self._requested}

    def _search_batch(self, queries: Codes, top_k: int) -> SearchResult:
        assert isinstance(queries, DenseCodes)
        if self._engine != "torch":
            scores, ids = self._faiss.search(dense_matrix(queries.values), top_k)
            return scores, ids.astype(np.int64)
        q = torch.from_numpy(dense_matrix(queries.values)).to(self.device, dtype=self._docs.dtype)
        block = rows_per_block(4 * len(q), cap=len(self))
        return torch_top_k(lambda s, e: (q @ self._docs[s:e].T).float(), top_k, n=len(self), block_rows=block)


def _gpu_id(device: str) -> int:
    return int(device.split(":")[1]) if ":" in device else 0
