"""``svd``: PCA (exact, mean-centred); one fit serves every rank."""

from __future__ import annotations

import torch
from pydantic import Field

from adaptemb import (
    Budgets,
    Codes,
    Compressor,
    CompressorConfig,
    DenseCodes,
    InvalidConfigError,
    adds_compressors,
    principal_components,
)

from .value_storage import VALUES_HELP, StoredValuesProjection, StoreValues, Values, as_codes, calibrate


class SVDConfig(CompressorConfig):
    k: int | None = Field(None, ge=1, description="Principal components kept, and the default rank; None keeps d.")
    values: Values = Field("float32", description=VALUES_HELP)


class SVDCompressor(StoredValuesProjection, Compressor):
    """PCA: project mean-centred embeddings on the top-r principal directions (dot-product scoring)."""

    name = "svd"
    bench_partner = "always"
    Config = SVDConfig
    budget_help = "rank r, 1 <= r <= components kept (all d by default)"
    decodes = True
    config: SVDConfig

    @property
    def affine_values(self) -> bool:  # type: ignore[override]  # int8 values are rounded: not affine
        return self.config.values != "int8"

    def _fit(self, x: torch.Tensor, **supervision: object) -> None:
        d = x.shape[1]
        kept = self.config.k or d
        if kept > d:
            raise InvalidConfigError(f"svd: k={kept} components, but the embeddings have only d={d} dims; "
                                     f"valid: k=1..{d}, or None for all {d}", parameter="k", value=kept, valid=f"1..{d}")
        self._mean, self._components, self._variance = principal_components(x, kept)
        self._scale = self._offset = None
        if self.config.values == "int8":
            self._scale, self._offset = calibrate((x - self._mean) @ self._components.T)

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        if self.config.values == "float32":
            return DenseCodes(((x - self._mean) @ self._components[:k].T).numpy())
        (stored,) = self.encoder(k)(x)
        return as_codes(stored, self.config.values, *self._calibration(k))

    def _calibration(self, k: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        if self._scale is None or self._offset is None:
            return None, None
        return self._scale[:k], self._offset[:k]

    def _decode(self, codes: Codes) -> torch.Tensor:
        values = torch.from_numpy(codes.to_dense())
        return values @ self._components[: values.shape[1]] + self._mean

    def encoder(self, k: int) -> torch.nn.Module:
        projection = _Projection(self._mean, self._components[:k])
        if self.config.values == "float32":
            return projection
        return StoreValues(projection, self.config.values, *self._calibration(k))

    def _budgets(self) -> Budgets:
        kept = self._components.shape[0]
        return Budgets(low=1, high=kept, default=kept)

    def _state(self) -> dict[str, torch.Tensor]:
        state = {"mean": self._mean, "components": self._components, "explained_variance": self._variance}
        if self._scale is not None and self._offset is not None:
            state.update(value_scale=self._scale, value_offset=self._offset)
        return state

    def _state_shapes(self, dim: int) -> dict[str, tuple[int | str, ...]]:
        kept = self.config.k or dim
        shapes: dict[str, tuple[int | str, ...]] = {"mean": (dim,), "components": (kept, dim), "explained_variance": (kept,)}
        if self.config.values == "int8":
            shapes.update(value_scale=(kept,), value_offset=(kept,))
        return shapes

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self._mean, self._components = tensors["mean"], tensors["components"]
        self._variance = tensors["explained_variance"]
        self._scale, self._offset = tensors.get("value_scale"), tensors.get("value_offset")
        if (self.config.values == "int8") != (self._scale is not None and self._offset is not None):
            raise ValueError(f"svd with values={self.config.values!r} stores value_scale/value_offset only for int8")
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


register_compressors = adds_compressors(SVDCompressor)
