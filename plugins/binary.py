"""``binary``: 1-bit sign quantisation packed 8 per byte, Hamming scoring, optional float rescoring."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field

from adaptemb import (
    BinaryCodes,
    Codes,
    CompressedIndex,
    Compressor,
    CompressorConfig,
    IntegerEmbeddings,
    InvalidConfigError,
    Rerank,
    adds_compressors,
    as_matrix,
)

from .unbudgeted import Unbudgeted


class BinaryConfig(CompressorConfig):
    threshold: Literal["mean", "zero"] = Field(
        "mean",
        description="Bit = x > the per-dimension mean of the fit data (default; balances the bits), or x > 0.",
    )
    rescore: int = Field(
        0, ge=0, description="index()/search(): shortlist this many by Hamming, rerank with the float query; 0 = off."
    )


class BinaryCompressor(Unbudgeted, Compressor):
    """Sign bits packed 8 per byte (32x smaller than float32); +-1 dot / Hamming scoring."""

    name = "binary"
    role, sign_bits, bench_partner = "quantizer", True, "always"
    Config = BinaryConfig
    budget_help = "no budget: keeps 1 bit for each of the d dims"
    exportable = True
    doc_kind = "binary"
    accepts_input_kinds = ("ubinary",)
    config: BinaryConfig

    def _fit(self, x: torch.Tensor, **supervision: object) -> None:
        mean = x.double().mean(dim=0).float()
        self._threshold = mean if self.config.threshold == "mean" else torch.zeros_like(mean)

    def _fit_passthrough(self, given: IntegerEmbeddings, **supervision: object) -> None:
        """Packed sign bits (``input_kind="ubinary"``) are the codes of ``threshold="zero"``; no calibration."""
        self._require_sign_bits("fit on")
        self._threshold = torch.zeros(given.dim)

    def _encode_passthrough(self, given: IntegerEmbeddings) -> Codes:
        """The given bits as the codes, bit for bit (what this compressor gives the float rows they are x > 0 of)."""
        self._require_sign_bits("encode")
        return BinaryCodes(given.values.copy(), given.dim)

    def _require_sign_bits(self, action: str) -> None:
        if self.config.threshold != "zero":
            raise InvalidConfigError(
                f"binary cannot {action} packed sign bits (input_kind='ubinary') with threshold={self.config.threshold!r}: "
                "the bits are x > 0, while this threshold sets bit j when x_j exceeds the per-dimension mean of the float "
                "rows, which the bits no longer tell. Use binary with threshold='zero' to keep the given bits as the codes"
            )

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        (packed,) = self.encoder(k)(x)
        return BinaryCodes(packed.numpy(), x.shape[1])

    def encoder(self, k: int) -> torch.nn.Module:
        return _SignBits(self._threshold)

    def _state(self) -> dict[str, torch.Tensor]:
        return {"threshold": self._threshold.contiguous()}

    def _state_shapes(self, dim: int) -> dict[str, tuple[int | str, ...]]:
        return {"threshold": (dim,)}

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self._threshold = tensors["threshold"]
        if self._threshold.ndim != 1:
            raise ValueError("threshold must be a 1-D tensor")

    def index(self, doc_codes: Codes, *, device: str = "auto", k: int | None = None, **options: Any) -> CompressedIndex:
        """Hamming search through faiss; with ``rescore > 0`` the Hamming shortlist of that many is reranked
        by ``<q - threshold, ±1 doc>`` with the float query (raw query embeddings must then be passed)."""
        index = super().index(doc_codes, device=device, k=k, **options)
        if self.config.rescore == 0:
            return index
        return CompressedIndex(self, index.inner, budget=index.budget,
                               second_stage=Rerank(doc_codes, self.encode_float, shortlist=self.config.rescore))

    def encode_float(self, queries: Any) -> np.ndarray:
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


register_compressors = adds_compressors(BinaryCompressor)
