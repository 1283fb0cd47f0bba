"""``mrl``: Matryoshka truncation (first k dims, re-normalised), with an optional learned adapter.

``adapter="none"`` (default) is plain truncation, right for Matryoshka-trained models (OpenAI
text-embedding-3, nomic-embed v1.5, ...). For other models ``adapter="linear"`` learns a map
``z = W (x/‖x‖ − b)``, initialised with the PCA rotation, so that every prefix of z keeps the
neighbourhoods of x: the loss sums, over prefixes m ∈ {8, 16, 32, …, d}, the KL divergence between
in-batch softmax similarities of the normalised prefix and of the input (temperature τ).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from adaptemb import (
    Budgets,
    Codes,
    Compressor,
    DenseCodes,
    InvalidConfigError,
    RowStream,
    StreamBatches,
    TrainingConfig,
    adds_compressors,
    has_direction,
    principal_components,
    train,
    unit_rows,
)

from .value_storage import LEVELS, StoredValuesProjection, StoreValues, Values, as_codes


class MRLConfig(TrainingConfig):
    k: int | None = Field(None, ge=1, description="Default prefix length; None uses all d dims.")
    adapter: Literal["none", "linear"] = Field(
        "none", description="none: truncate the input; linear: learn a nested linear map first (non-Matryoshka models)."
    )
    temperature: float = Field(0.1, gt=0, description="Adapter only: softmax temperature of the similarity KL loss.")
    epochs: int = Field(5, ge=1, description="Adapter only: passes over the rows (at most).")
    batch_size: int = Field(512, ge=2, description="Adapter only: rows per step (the in-batch neighbourhood).")
    values: Values = Field(
        "float32", description="How each kept value is stored: float32 (4 B), float16 (2 B) or int8 (1 B; per prefix "
        "length, one range: the largest |value| of the fit rows' normalised prefixes).")


class MRLCompressor(StoredValuesProjection, Compressor):
    """Matryoshka truncation: keep the first k dims and L2-normalise (optionally after a learned adapter)."""

    name = "mrl"
    bench_partner = "matryoshka"
    Config = MRLConfig
    budget_help = "prefix length m, 1 <= m <= d"
    test_params: ClassVar[dict[str, Any]] = {"epochs": 1, "progress": False}
    config: MRLConfig
    normalizes_rows = True

    @property
    def trains_on_stream(self) -> bool:  # type: ignore[override]  # depends on the adapter option
        return self.config.adapter == "linear"  # plain truncation learns nothing but the int8 range (a sample)

    def _fit(self, x: torch.Tensor, **supervision: object) -> None:
        self._learn(x, lambda unit: [unit])

    def _fit_stream(self, stream: RowStream, **supervision: object) -> None:
        """The adapter trains on every row of the stream; its PCA start and the int8 range use a uniform sample."""
        positions, sample = stream.sample(self.stream_sample_rows, self.config.seed)
        self._learn(sample, lambda unit: StreamBatches.holding_out(
            stream, lambda rows: [unit_rows(rows)], (positions, unit), self.config.val_fraction, self.config.seed))

    def _learn(self, x: torch.Tensor, training_data: Callable[[torch.Tensor], Any]) -> None:
        """Fit the adapter (when configured) on ``training_data(unit rows of x)``; the int8 range on ``x``."""
        if self.config.k is not None and self.config.k > x.shape[1]:
            raise InvalidConfigError(f"mrl: k={self.config.k} is longer than the embeddings (d={x.shape[1]}); valid: "
                                     f"k=1..{x.shape[1]}, or None for all", parameter="k", value=self.config.k,
                                     valid=f"1..{x.shape[1]}")
        self._adapter: _Prefix | None = None
        if self.config.adapter == "linear":
            x = unit_rows(x)  # the adapter maps directions, like the truncation it replaces
            mean, rotation, _ = principal_components(x)
            model = _NestedAdapter(rotation, mean, nested_prefixes(x.shape[1]), self.config.temperature)
            report = train(model, training_data(x), self.config, description="mrl adapter")
            self.fit_report = report.as_dict()
            self._adapter = _Prefix(x.shape[1], model.weight.detach().cpu(), model.bias.detach().cpu())
        self._range = prefix_ranges(self._float_encoder(x.shape[1])(x)[0]) if self.config.values == "int8" else None

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        if self.config.values == "float32":
            return DenseCodes(self.encoder(k)(x)[0].numpy())
        return as_codes(self.encoder(k)(x)[0], self.config.values, *self._calibration(k))

    def _float_encoder(self, k: int) -> torch.nn.Module:
        if self._adapter is None:
            return _Prefix(k)
        return _Prefix(k, self._adapter.weight[:k], self._adapter.bias)

    def _calibration(self, k: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        if self._range is None:
            return None, None
        return torch.full((k,), float(self._range[k - 1]) / LEVELS), torch.zeros(k)

    def encoder(self, k: int) -> torch.nn.Module:
        if self.config.values == "float32":
            return self._float_encoder(k)
        return StoreValues(self._float_encoder(k), self.config.values, *self._calibration(k))

    def _budgets(self) -> Budgets:
        assert self.dim is not None
        return Budgets(low=1, high=self.dim, default=self.config.k or self.dim)

    def _state(self) -> dict[str, torch.Tensor]:
        state = {} if self._range is None else {"value_range": self._range}
        if self._adapter is None:
            return state
        return {**state, "weight": self._adapter.weight, "bias": self._adapter.bias}

    def _state_shapes(self, dim: int) -> dict[str, tuple[int | str, ...]]:
        linear = self.config.adapter == "linear"
        shapes: dict[str, tuple[int | str, ...]] = {"weight": (dim, dim), "bias": (dim,)} if linear else {}
        return {**shapes, "value_range": (dim,)} if self.config.values == "int8" else shapes

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        expected = {"weight", "bias"} if self.config.adapter == "linear" else set()
        if self.config.values == "int8":
            expected.add("value_range")
        if set(tensors) != expected:
            raise ValueError(f"mrl with adapter={self.config.adapter!r}, values={self.config.values!r} stores "
                             f"{sorted(expected)}; found {sorted(tensors)}")
        self._range = tensors.get("value_range")
        self._adapter = None if "weight" not in tensors else _Prefix(
            tensors["weight"].shape[0], tensors["weight"], tensors["bias"])


def prefix_ranges(z: torch.Tensor) -> torch.Tensor:
    """For each prefix length m = 1..d: the largest |value| in the unit-normalised first m dims of any row
    of ``z`` (running maximum of |z| over the running norm), the int8 range of that prefix length."""
    magnitude = z.abs().double()
    peak = torch.cummax(magnitude, dim=1).values
    norm = torch.sqrt(torch.cumsum(magnitude**2, dim=1))
    ratio = torch.where(norm > 0, peak / norm.clamp_min(1e-30), torch.zeros_like(norm))
    return ratio.max(dim=0).values.clamp_min(1e-12).float()


def nested_prefixes(dim: int) -> list[int]:
    """The prefix lengths the adapter trains: 8, 16, 32, ... below ``dim``, then ``dim``."""
    prefixes, m = [], 8
    while m < dim:
        prefixes.append(m)
        m *= 2
    return [*prefixes, dim]


class _Prefix(torch.nn.Module):
    """The encoder: optionally ``(unit(x) − bias) @ weight.T``, then the first k dims, L2-normalised. An all-zero
    row (no direction) encodes to zeros, with the adapter too (its bias would otherwise give it a direction)."""

    output_names = ("values",)

    def __init__(self, k: int, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        self.k = k
        self.register_buffer("weight", None if weight is None else weight.contiguous())
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        if self.weight is None:
            return (unit_rows(x[:, : self.k]),)
        z = (unit_rows(x) - self.bias) @ self.weight[: self.k].T
        return (unit_rows(z) * has_direction(x),)


class _NestedAdapter(torch.nn.Module):
    """Trainable ``W (x − b)`` whose every prefix should keep the input's in-batch neighbourhoods."""

    def __init__(self, rotation: torch.Tensor, mean: torch.Tensor, prefixes: list[int], temperature: float) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(rotation.clone())
        self.bias = torch.nn.Parameter(mean.clone())
        self.prefixes, self.temperature = prefixes, temperature

    def training_loss(self, batch: list[torch.Tensor], step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        (x,) = batch
        unit = x.float()  # rows are unit-normalised before training
        target = F.log_softmax(unit @ unit.T / self.temperature, dim=1)
        z = (x - self.bias) @ self.weight.T
        losses = {}
        for m in self.prefixes:
            prefix = F.normalize(z[:, :m].float(), dim=1)
            logits = F.log_softmax(prefix @ prefix.T / self.temperature, dim=1)
            losses[f"kl@{m}"] = F.kl_div(logits, target, log_target=True, reduction="batchmean")
        total = torch.stack(list(losses.values())).mean()
        return total, losses


register_compressors = adds_compressors(MRLCompressor)
