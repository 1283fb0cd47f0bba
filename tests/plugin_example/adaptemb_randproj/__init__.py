"""randproj: a Gaussian random projection (Johnson-Lindenstrauss) compressor for adaptemb."""

from __future__ import annotations

import torch
from pydantic import Field

from adaptemb import Budgets, Codes, Compressor, CompressorConfig, CompressorRegistry, DenseCodes, hookimpl


class RandProjConfig(CompressorConfig):
    k: int | None = Field(None, ge=1, description="Default number of projected dims; None uses d.")


class RandProjCompressor(Compressor):
    """Random Gaussian projection to k dims, scaled by 1/sqrt(k); no training."""

    name = "randproj"
    Config = RandProjConfig
    budget_help = "projected dims k, 1 <= k <= d"
    doc_kind = "dense"  # encode() emits DenseCodes: searched by the dense index (faiss)
    config: RandProjConfig

    def _fit(self, x: torch.Tensor, **supervision: object) -> None:
        d = x.shape[1]
        if self.config.k is not None and self.config.k > d:
            raise ValueError(f"k={self.config.k} exceeds the embedding dimension d={d}")
        self._projection = torch.randn(d, d, generator=self.generator)

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        return DenseCodes((x @ self._projection[:, :k] / k**0.5).numpy())

    def _budgets(self) -> Budgets:
        d = self._projection.shape[0]
        return Budgets(low=1, high=d, default=self.config.k or d)

    def _state(self) -> dict[str, torch.Tensor]:
        return {"projection": self._projection}

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self._projection = tensors["projection"]


@hookimpl
def register_compressors(registry: CompressorRegistry) -> None:
    registry.add(RandProjCompressor)
