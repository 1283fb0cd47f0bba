"""``mrl``: Matryoshka truncation, the first k dims re-normalised (for Matryoshka-trained models)."""

from __future__ import annotations

import torch
from pydantic import Field

from adaptemb import Budgets, Codes, Compressor, CompressorConfig, DenseCodes, hookimpl


class MRLConfig(CompressorConfig):
    k: int | None = Field(None, ge=1, description="Default prefix length; None uses all d dims.")


class MRLCompressor(Compressor):
    """Matryoshka truncation: keep the first k dims and L2-normalise them; no training."""

    name = "mrl"
    Config = MRLConfig
    budget_help = "prefix length m, 1 <= m <= d"
    config: MRLConfig

    def _fit(self, x: torch.Tensor, **supervision: object) -> None:
        if self.config.k is not None and self.config.k > x.shape[1]:
            raise ValueError(f"k={self.config.k} is longer than the embeddings (d={x.shape[1]})")

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        return DenseCodes(_Prefix(k)(x)[0].numpy())

    def _onnx_encoder(self, k: int) -> torch.nn.Module:
        return _Prefix(k)

    def _budgets(self) -> Budgets:
        assert self.dim is not None
        return Budgets(low=1, high=self.dim, default=self.config.k or self.dim)

    def _state(self) -> dict[str, torch.Tensor]:
        return {}

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        if tensors:
            raise ValueError(f"mrl stores no tensors; found {sorted(tensors)}")


class _Prefix(torch.nn.Module):
    """The encoder: the first k dims, L2-normalised (ONNX-exportable)."""

    output_names = ("values",)

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (torch.nn.functional.normalize(x[:, : self.k], dim=1),)


@hookimpl
def register_compressors(registry) -> None:  # type: ignore[no-untyped-def]
    registry.add(MRLCompressor)
