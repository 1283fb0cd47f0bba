"""``svd``: PCA (exact, mean-centred); one fit serves every rank."""

from __future__ import annotations

import torch
from pydantic import Field

from adaptemb import (
    Budgets,
    Codes,
    Compressor,
    CompressorConfig,
    CompressorRegistry,
    DenseCodes,
    hookimpl,
    principal_components,
)


class SVDConfig(CompressorConfig):
    k: int | None = Field(None, ge=1, description="Principal components kept, and the default rank; None keeps d.")


class SVDCompressor(Compressor):
    """PCA: project mean-centred embeddings on the top-r principal directions (dot-product scoring)."""

    name = "svd"
    Config = SVDConfig
    budget_help = "rank r, 1 <= r <= components kept (all d by default)"
    doc_kind = "dense"
    config: SVDConfig

    def _fit(self, x: torch.Tensor, **supervision: object) -> None:
        d = x.shape[1]
        kept = self.config.k or d
        if kept > d:
            raise ValueError(f"k={kept} components requested, but the embeddings have only d={d} dims")
        self._mean, self._components, self._variance = principal_components(x, kept)

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        return DenseCodes(((x - self._mean) @ self._components[:k].T).numpy())

    def _decode(self, codes: Codes) -> torch.Tensor:
        values = torch.from_numpy(codes.to_dense())
        return values @ self._components[: values.shape[1]] + self._mean

    def encoder(self, k: int) -> torch.nn.Module:
        return _Projection(self._mean, self._components[:k])

    def _budgets(self) -> Budgets:
        kept = self._components.shape[0]
        return Budgets(low=1, high=kept, default=kept)

    def _state(self) -> dict[str, torch.Tensor]:
        return {"mean": self._mean, "components": self._components, "explained_variance": self._variance}

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self._mean, self._components = tensors["mean"], tensors["components"]
        self._variance = tensors["explained_variance"]
        if self._components.ndim != 2 or self._components.shape[1] != self._mean.shape[0]:
            raise ValueError(f"components {tuple(self._components.shape)} do not match mean {tuple(self._mean.shape)}")

    @property
    def explained_variance(self) -> torch.Tensor:
        """Variance along each kept component, strongest first."""
        self._require_fitted()
        return self._variance


class _Projection(torch.nn.Module):
    """ONNX-exportable encoder: (x - mean) @ components.T."""

    output_names = ("values",)

    def __init__(self, mean: torch.Tensor, components: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", mean.clone())
        self.register_buffer("components", components.clone())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        return ((x - self.mean) @ self.components.T,)


@hookimpl
def register_compressors(registry: CompressorRegistry) -> None:
    registry.add(SVDCompressor)
