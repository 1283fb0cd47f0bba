"""``binary``: 1-bit sign quantisation packed 8 per byte, Hamming scoring, optional float rescoring."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field

from adaptemb import BinaryCodes, Budgets, Codes, Compressor, CompressorConfig, as_matrix, hookimpl

_RESCORE_QUERY_BLOCK = 64


class BinaryConfig(CompressorConfig):
    threshold: Literal["mean", "zero"] = Field(
        "mean",
        description="Bit = x > the per-dimension mean of the fit data (default; balances the bits), or x > 0.",
    )
    rescore: int = Field(
        0, ge=0, description="search(): shortlist this many by Hamming, rerank with the float query; 0 = off."
    )


class BinaryCompressor(Compressor):
    """Sign bits packed 8 per byte (32x smaller than float32); +-1 dot / Hamming scoring."""

    name = "binary"
    Config = BinaryConfig
    budget_help = "no budget: keeps 1 bit for each of the d dims"
    config: BinaryConfig

    def _fit(self, x: torch.Tensor, **supervision: object) -> None:
        mean = x.double().mean(dim=0).float()
        self._threshold = mean if self.config.threshold == "mean" else torch.zeros_like(mean)

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        (packed,) = self._onnx_encoder(k)(x)
        return BinaryCodes(packed.numpy(), x.shape[1])

    def _onnx_encoder(self, k: int) -> torch.nn.Module:
        return _SignBits(self._threshold)

    def _decode(self, codes: Codes) -> torch.Tensor:
        return torch.from_numpy(codes.to_dense())

    def _budgets(self) -> Budgets:
        assert self.dim is not None
        return Budgets.unbudgeted(self.dim)

    def _state(self) -> dict[str, torch.Tensor]:
        return {"threshold": self._threshold.contiguous()}

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self._threshold = tensors["threshold"]
        if self._threshold.ndim != 1:
            raise ValueError("threshold must be a 1-D tensor")

    def search(self, queries, doc_codes, top_k=10, *, k=None):  # type: ignore[no-untyped-def]
        """Hamming search; with ``rescore > 0`` the Hamming shortlist is reranked by <q, +-1 doc>."""
        if self.config.rescore == 0:
            return super().search(queries, doc_codes, top_k, k=k)
        shortlist = min(max(self.config.rescore, top_k), len(doc_codes))
        _, candidates = super().search(queries, doc_codes, shortlist, k=k)
        float_queries = self.encode_float(queries)
        scores = np.empty(candidates.shape, dtype=np.float32)
        for start in range(0, len(candidates), _RESCORE_QUERY_BLOCK):
            block = candidates[start : start + _RESCORE_QUERY_BLOCK]
            signs = doc_codes[block.reshape(-1)].to_dense().reshape(*block.shape, -1)
            scores[start : start + len(block)] = np.einsum("qd,qsd->qs", float_queries[start : start + len(block)], signs)
        order = np.argsort(-scores, axis=1, kind="stable")[:, :top_k]
        return np.take_along_axis(scores, order, axis=1), np.take_along_axis(candidates, order, axis=1)

    def encode_float(self, queries) -> np.ndarray:  # type: ignore[no-untyped-def]
        """Queries shifted by the threshold, the float side of asymmetric rescoring."""
        self._require_fitted()
        return (as_matrix(queries, name="queries", dim=self.dim) - self._threshold).numpy()


class _SignBits(torch.nn.Module):
    """The encoder: bits x > threshold packed 8 per byte, most significant bit first (ONNX-exportable)."""

    output_names = ("packed",)

    def __init__(self, threshold: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("threshold", threshold.clone())
        self.register_buffer("weights", 2 ** torch.arange(7, -1, -1, dtype=torch.int32))
        self.padding = (-threshold.shape[0]) % 8

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        bits = (x > self.threshold).to(torch.int32)
        bits = torch.nn.functional.pad(bits, (0, self.padding))
        packed = (bits.reshape(bits.shape[0], -1, 8) * self.weights).sum(dim=2)
        return (packed.to(torch.uint8),)


@hookimpl
def register_compressors(registry) -> None:  # type: ignore[no-untyped-def]
    registry.add(BinaryCompressor)
