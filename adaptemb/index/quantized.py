"""Search over quantised codes: binary (faiss ``IndexBinaryFlat``, Hamming) and int8 (exact, blockwise)."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar, Literal

import faiss
import numpy as np
import torch

from adaptemb import ranking
from adaptemb.codes import BinaryCodes, Codes, QuantizedCodes
from adaptemb.index.base import Index, SearchResult, rows_per_block

Backend = Literal["auto", "faiss", "numpy", "torch"]
_BITS = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8)  # np.packbits order: MSB first


class _TwoEngineIndex(Index):
    """A backend with one CPU engine (``cpu_engine``, reported as ``cpu_backend``) and torch, which runs on CUDA
    and wherever ``backend="torch"`` asks for it."""

    cpu_engine: ClassVar[str]
    cpu_backend: ClassVar[str]

    def __init__(self, docs: Codes, *, device: str = "cpu", query_batch: int = 512, backend: Backend = "auto",
                 query_kind: str | None = None) -> None:
        super().__init__(docs, device=device, query_batch=query_batch, query_kind=query_kind)
        if backend not in ("auto", "faiss", "numpy", "torch"):
            raise ValueError(f"unknown backend {backend!r}; use auto, {self.cpu_engine} or torch")
        self._engine = "torch" if backend == "torch" or self.device != "cpu" else self.cpu_engine
        self._requested = backend
        self._hold(docs)

    @abstractmethod
    def _hold(self, docs: Codes) -> None:
        """Keep the documents in the form the chosen engine (``self._engine``) searches."""

    @property
    def backend(self) -> str:
        return "torch" if self._engine == "torch" else self.cpu_backend

    def options(self) -> dict[str, Any]:
        return {"backend": self._requested}


class BinaryIndex(_TwoEngineIndex):
    """Exact Hamming search of ``BinaryCodes``; scores are ``dim - 2 * hamming`` like ``BinaryCodes.similarity``.

    CPU: faiss ``IndexBinaryFlat`` over the packed bits (padding bits are 0 on both sides, so they add
    no distance). CUDA: bits unpacked to ±1 per block of documents and scored by a half-precision matmul.
    """

    name = "binary-hamming"
    pairs = (("binary", "binary"),)
    cpu_engine, cpu_backend = "faiss", "faiss-binary"

    def _hold(self, docs: Codes) -> None:
        assert isinstance(docs, BinaryCodes)
        if self._engine == "torch":
            self._packed = torch.from_numpy(docs.packed).to(self.device)
        else:
            self._faiss = faiss.IndexBinaryFlat(8 * docs.packed.shape[1])
            self._faiss.use_heap = False  # counting by distance: exact, ~3x faster than the heap here
            self._faiss.add(np.ascontiguousarray(docs.packed))

    def _signs(self, packed: torch.Tensor) -> torch.Tensor:
        bits = (packed.unsqueeze(-1) & _BITS.to(packed.device)).ne(0).reshape(len(packed), -1)[:, : self.dim]
        dtype = torch.float16 if packed.device.type == "cuda" else torch.float32  # ±1 sums are exact in fp16 up to 2048
        return bits.to(dtype) * 2 - 1

    def _search_batch(self, queries: Codes, top_k: int) -> SearchResult:
        assert isinstance(queries, BinaryCodes)
        if self._engine != "torch":
            hamming, ids = self._faiss.search(np.ascontiguousarray(queries.packed), top_k)
            return (self.dim - 2.0 * hamming).astype(np.float32), ids.astype(np.int64)
        q = self._signs(torch.from_numpy(queries.packed).to(self.device))
        block = rows_per_block(4 * len(q) + 2 * self.dim, cap=len(self))
        return ranking.torch_top_k(lambda s, e: (q @ self._signs(self._packed[s:e]).T).float(), top_k, n=len(self), block_rows=block)


class Int8Index(_TwoEngineIndex):
    """Exact search of int8 ``QuantizedCodes``: the inner product of the dequantised vectors.

    ``<o + s*a, o + s*b> = <o + s*a, o> + <(o + s*a) * s, b>``: the int8 documents are never expanded
    beyond one block; each block is converted to float32 and multiplied (numpy BLAS on CPU, torch on
    CUDA). The ranking equals ``QuantizedCodes.similarity`` up to float rounding.
    """

    name = "int8-flat"
    pairs = (("int8", "int8"),)
    cpu_engine, cpu_backend = "numpy", "numpy-blas"

    def _hold(self, docs: Codes) -> None:
        assert isinstance(docs, QuantizedCodes)
        self._scale, self._offset = docs.scale, docs.offset
        self._codes = docs.codes if self._engine == "numpy" else torch.from_numpy(docs.codes).to(self.device)

    def _search_batch(self, queries: Codes, top_k: int) -> SearchResult:
        assert isinstance(queries, QuantizedCodes)
        if not (np.array_equal(queries.scale, self._scale) and np.array_equal(queries.offset, self._offset)):
            raise ValueError("query and document int8 codes come from different calibrations")
        left = queries.to_dense()
        bias = left @ self._offset  # (b,): <q, o>
        weights = left * self._scale  # (b, d): q * s, to multiply with the int8 codes
        block = rows_per_block(4 * (len(left) + self.dim), cap=len(self))
        if self._engine == "torch":
            w = torch.from_numpy(weights).to(self.device)
            b = torch.from_numpy(bias).to(self.device)[:, None]
            return ranking.torch_top_k(lambda s, e: b + w @ self._codes[s:e].float().T, top_k, n=len(self), block_rows=block)
        return ranking.blockwise_top_k(lambda s, e: bias[:, None] + weights @ self._codes[s:e].astype(np.float32).T,
                                       top_k, n=len(self), block_rows=block)
