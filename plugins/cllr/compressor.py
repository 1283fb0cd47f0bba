"""``cllr``: Contrastive Learning with Low-dimensional Reconstruction — a learned low-rank / sparse projection.

A projection ``L`` (h × d, initialised with the top-h principal directions) maps a centred embedding to
``z = L (x − μ)``. The fit minimises ``NCE(L x̃) + λ (E‖LᵀL x̃ − x̃‖² / E‖x̃‖² + α Ω(L) / Ω(L₀))`` by proximal SGD:
momentum steps on the smooth part, then the proximal operator of Ω, singular-value thresholding for the nuclear
norm (low rank) or group soft-thresholding of the columns for the ℓ2,1 norm (feature selection), so zeros are
exact (``cllr/model.py``). The NCE is InfoNCE over L2-normalised codes: query → document ``pairs``, same-``labels``
rows, or, with neither, two noisy views of each row. With pairs, ``val_fraction`` (a fifth) of them is held out and
the fit keeps the L under which those held-out queries rank their documents best against fit rows (early stopping).

One fit serves every budget: L's rows are rotated (a left rotation, which keeps zero columns zero) so that code
dimensions are ordered by their spread on the fit data (the singular values of ``L C^{1/2}``, C the data
covariance). Then (adaptemb's extension, ``prefix_steps`` > 0) the rows are re-based, ``W = B L``, so that the
prefixes in ``prefixes`` (16, 32, 64, 128) are trained to rank neighbours like the full code (a soft-target NCE,
self-distillation of L's own codes), and ordered by spread inside each block between them. ``encode(x, k=r)``
keeps the first r rows and L2-normalises. ``values="int8"`` stores those r values in one byte each. Maths,
defaults and measurements: ``docs/methods/cllr.md``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, field_validator
from torch import nn

from adaptemb import (
    Budgets,
    Codes,
    Compressor,
    CompressorConfig,
    DenseCodes,
    InvalidConfigError,
    QuantizedCodes,
    adds_compressors,
    principal_components,
)
from adaptemb_plugins.cllr.model import (
    CLLRObjective,
    Validation,
    measure,
    optimise,
    ordered_directions,
    relative_covariance,
)
from adaptemb_plugins.cllr.nesting import block_spread_order, nest_prefixes
from adaptemb_plugins.value_storage import StoredValuesProjection

_LEVELS = 127  # int8 codes lie in [-127, 127]
_MIN_HELD_OUT = 8  # fewer held-out pairs measure nothing: no early stopping
_DISTRACTORS = 2048  # fit rows each held-out query's document competes with


class CLLRConfig(CompressorConfig):
    """CLLR settings; defaults chosen by measurement (``docs/methods/cllr.md``)."""

    k: int | None = Field(None, ge=1, description="Default budget (code dims); None: every direction kept.")
    rank: int = Field(256, ge=1, description="h: rows of L (directions learned, capped at d): the largest budget.")
    regularizer: Literal["nuclear", "l21"] = Field(
        "nuclear", description="Ω: nuclear norm (low rank) or l2,1 norm of the columns of L (feature selection)."
    )
    lam: float = Field(0.1, ge=0, description="λ: weight of the regulariser R = reconstruction + α·Ω.")
    alpha: float = Field(0.3, ge=0, description="α: weight of Ω (relative to Ω at the PCA start) inside R; paper: 10.")
    temperature: float = Field(0.05, gt=0, description="τ of the InfoNCE over L2-normalised codes (pairs, labels).")
    view_temperature: float = Field(0.1, gt=0, description="τ of the InfoNCE between views (no pairs, no labels).")
    view_dropout: float = Field(0.1, ge=0, lt=1, description="Views (no pairs, no labels): input dropout of each view.")
    view_noise: float = Field(0.1, ge=0, description="Views: Gaussian noise of each view, in per-dimension std units.")
    values: Literal["float32", "int8"] = Field(
        "float32", description="Code values: float32, or int8 (1 byte per dim, per-dimension scale fitted on the fit rows)."
    )
    steps: int = Field(300, ge=1, description="Proximal SGD steps.")
    batch_size: int = Field(512, ge=2, description="Rows (or pairs) per step: the in-batch negatives of the NCE.")
    lr: float = Field(0.1, gt=0, description="SGD step size (the proximal threshold scales with it).")
    momentum: float = Field(0.9, ge=0, lt=1, description="Heavy-ball momentum of the SGD steps.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: CUDA when available, else CPU.")
    loop_threads: int | None = Field(
        1, ge=1, description="CPU threads of the optimisation loop (its ops are small); None: adaptemb's choice."
    )
    progress: bool = Field(True, description="Show a progress bar while fitting.")
    prefix_steps: int = Field(
        150, ge=0, description="Steps of the prefix-nesting stage (self-distillation of L's full code into its "
        "prefixes; adaptemb's extension); 0: prefixes ordered by spread only, as in the plain method."
    )
    prefixes: tuple[int, ...] = Field(
        (16, 32, 64, 128), description="Prefix lengths the nesting stage trains (those below the learned rank)."
    )
    prefix_temperature: float = Field(0.05, gt=0, description="τ of the prefixes' (student) NCE in the nesting stage.")
    teacher_temperature: float = Field(0.02, gt=0, description="τ of the full code's (teacher) neighbour distribution.")
    prefix_candidates: int = Field(1024, ge=2, description="Fit rows sampled per nesting step as the candidates.")
    val_fraction: float = Field(
        0.2, ge=0, lt=0.5, description="Pairs held out for early stopping (at least 8, else none; 0: none): the "
        "fit keeps the L whose held-out pairs rank best against fit rows."
    )
    eval_every: int = Field(2, ge=1, description="Steps between measurements of the held-out pairs.")
    patience: int = Field(50, ge=1, description="Measurements without improvement before the fit stops (50 x 2 = 100 steps).")

    @field_validator("prefixes", mode="before")
    @classmethod
    def _list_as_tuple(cls, value: Any) -> Any:
        """JSON (saved configs, CLI ``-p prefixes=[32,64]``) gives a list; the items stay strict ints."""
        return tuple(value) if isinstance(value, list) else value

    @field_validator("prefixes")
    @classmethod
    def _positive_prefixes(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(p < 1 for p in value):
            raise ValueError(f"prefixes must be positive code lengths; got {value}")
        return value


class CLLRCompressor(StoredValuesProjection, Compressor):
    """Learned projection z = L(x − μ) (NCE + λ·(reconstruction + α·Ω)), prefixes ordered by strength."""

    name = "cllr"
    # in every default bench, fitted without pairs unless given: cllr+binary / cllr+rabitq led the 768-d stand-in at
    # 16 / 32 B (0.158 / 0.191 against svd+binary 0.154 / 0.185), docs/results.md
    bench_partner = "always"
    Config = CLLRConfig
    budget_help = "code dims r, 1 <= r <= rank of the learned L (<= h = 256 by default); one fit serves every r"
    fit_inputs = frozenset({"pairs", "labels"})
    test_params: ClassVar[dict[str, Any]] = {"rank": 16, "steps": 20, "batch_size": 64, "progress": False}
    config: CLLRConfig

    def __init__(self, config: CLLRConfig | None = None, **params: Any) -> None:
        super().__init__(config, **params)
        self._mean: torch.Tensor | None = None
        self._weight: torch.Tensor | None = None
        self._scale: torch.Tensor | None = None

    # -- fitting --------------------------------------------------------------------------------

    def _fit(self, x: torch.Tensor, **supervision: Any) -> None:
        cfg = self.config
        h = min(cfg.rank, x.shape[1])
        if cfg.k is not None and cfg.k > h:
            raise InvalidConfigError(f"cllr: k={cfg.k} exceeds the directions learned (rank={cfg.rank}, d={x.shape[1]}); "
                                     f"valid: k=1..{h}, or a larger rank", parameter="k", value=cfg.k, valid=f"1..{h}")
        fit_rows = torch.cat([x, *supervision["pairs"]]) if supervision.get("pairs") is not None else x
        trained, validation = _hold_out_pairs(x, supervision, cfg)
        tensors, mode = _training_rows(x, **trained)
        mean, components, _ = principal_components(fit_rows, h)
        covariance = relative_covariance(fit_rows, mean)
        objective = CLLRObjective(components, mean, covariance, fit_rows.std(dim=0), cfg, views=mode == "views")
        before = measure(objective, tensors, cfg.seed, cfg.batch_size)
        report = optimise(objective, tensors, cfg, validation)
        after = measure(objective, tensors, cfg.seed, cfg.batch_size)
        weight, strength, singular = ordered_directions(objective.weight.detach(), covariance, objective.kept_rank)
        if len(weight) == 0:
            raise InvalidConfigError(f"cllr: the {cfg.regularizer} proximal step removed every direction of L; lower "
                                     f"alpha (now {cfg.alpha}) or lam (now {cfg.lam})", parameter="alpha", value=cfg.alpha)
        anchors, anchor_ids = _nesting_anchors(x, **supervision)
        basis, nesting = nest_prefixes(weight, mean, anchors, x, anchor_ids, cfg)
        if nesting:
            weight, strength = block_spread_order(basis @ weight, covariance, nesting["prefixes"])
        if cfg.k is not None and cfg.k > len(weight):
            raise InvalidConfigError(f"cllr: the regulariser left rank {len(weight)} < k={cfg.k}; valid: k=1..{len(weight)}, "
                                     "or lower alpha or lam", parameter="k", value=cfg.k, valid=f"1..{len(weight)}")
        self._mean, self._weight = mean, weight.contiguous()
        self._scale = _int8_scale(self._weight, fit_rows - mean)
        report.extra.update(_report_extra(cfg, mode, before, after, weight, strength, singular), nesting=nesting)
        if validation is not None:
            report.extra["held_out_pairs"] = len(validation.anchors)
        self.fit_report = report.as_dict()

    # -- encoding -------------------------------------------------------------------------------

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        (values,) = self.encoder(k)(x)
        if self.config.values == "int8":
            scale = self._fitted_scale[:k].numpy()
            return QuantizedCodes(values.numpy(), scale, np.zeros_like(scale))
        return DenseCodes(values.numpy())

    def encoder(self, k: int) -> nn.Module:
        """The encode path at budget k: ``(x − μ) W[:k]ᵀ``, L2-normalised (then int8 with values="int8")."""
        scale = self._fitted_scale[:k] if self.config.values == "int8" else None
        return _Projection(self._fitted_mean, self._fitted_weight[:k], scale).eval()

    @property
    def _fitted_weight(self) -> torch.Tensor:
        assert self._weight is not None, "fit first"
        return self._weight

    @property
    def _fitted_mean(self) -> torch.Tensor:
        assert self._mean is not None, "fit first"
        return self._mean

    @property
    def _fitted_scale(self) -> torch.Tensor:
        assert self._scale is not None, "fit first"
        return self._scale

    @property
    def projection(self) -> torch.Tensor:
        """The learned directions W (rank × d), in prefix order: codes are ``normalize((x − μ) W[:r]ᵀ)``."""
        self._require_fitted()
        return self._fitted_weight

    def _budgets(self) -> Budgets:
        kept = self._fitted_weight.shape[0]
        return Budgets(low=1, high=kept, default=min(self.config.k or kept, kept))

    def _state(self) -> dict[str, torch.Tensor]:
        return {"mean": self._fitted_mean, "weight": self._fitted_weight, "int8_scale": self._fitted_scale}

    def _state_shapes(self, dim: int) -> dict[str, tuple[int | str, ...]]:
        return {"mean": (dim,), "weight": ("r", dim), "int8_scale": ("r",)}  # r: the rank the fit kept

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        if set(tensors) != {"mean", "weight", "int8_scale"}:
            raise ValueError(f"cllr stores mean, weight and int8_scale; found {sorted(tensors)}")
        mean, weight, scale = tensors["mean"], tensors["weight"], tensors["int8_scale"]
        if weight.ndim != 2 or mean.shape != (weight.shape[1],) or scale.shape != (weight.shape[0],):
            raise ValueError(f"weight {tuple(weight.shape)}, mean {tuple(mean.shape)} and int8_scale "
                             f"{tuple(scale.shape)} do not fit together")
        self._mean, self._weight, self._scale = mean, weight, scale


# -- encoder ------------------------------------------------------------------------------------


class _Projection(nn.Module):
    """ONNX-exportable encoder: ``normalize((x − μ) Wᵀ)``, then, with a scale, ``round(z / scale)`` as int8."""

    def __init__(self, mean: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None) -> None:
        super().__init__()
        self.register_buffer("mean", mean.clone())
        self.register_buffer("weight", weight.clone())
        self.register_buffer("scale", None if scale is None else scale.clone())
        self.output_names = ("values",) if scale is None else ("codes",)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        z = F.normalize((x - self.mean) @ self.weight.T, dim=1)
        if self.scale is None:
            return (z,)
        return (torch.round(z / self.scale).clamp(-_LEVELS, _LEVELS).to(torch.int8),)


# -- helpers ------------------------------------------------------------------------------------


def _training_rows(x: torch.Tensor, pairs: tuple[torch.Tensor, torch.Tensor] | None = None,
                   labels: torch.Tensor | None = None) -> tuple[list[torch.Tensor], str]:
    """([anchors, keys, group ids], mode): same group = positive. Pairs and labels are the NCE's supervision;
    with neither, each row is its own positive under two noisy views."""
    if pairs is None and labels is None:
        return [x, x, torch.arange(len(x))], "views"
    anchors, keys, groups = [], [], []
    if labels is not None:
        anchors.append(x)
        keys.append(x)
        groups.append(labels.long())
    if pairs is not None:
        offset = int(labels.max()) + 1 if labels is not None and len(labels) else 0
        anchors.append(pairs[0])
        keys.append(pairs[1])
        groups.append(offset + torch.arange(len(pairs[0])))
    mode = "+".join(name for name, given in (("labels", labels is not None), ("pairs", pairs is not None)) if given)
    return [torch.cat(anchors), torch.cat(keys), torch.cat(groups)], mode


def _hold_out_pairs(x: torch.Tensor, supervision: dict[str, Any], cfg: CLLRConfig,
                    ) -> tuple[dict[str, Any], Validation | None]:
    """(the supervision to train on, the held-out pairs for early stopping or None).

    A seeded ``val_fraction`` of the pairs (when that is at least ``_MIN_HELD_OUT`` pairs) is held out; their
    documents, with up to ``_DISTRACTORS`` sampled fit rows (rows equal to one of those documents left out), are the
    keys each held-out query must rank its own document first among."""
    pairs = supervision.get("pairs")
    held = round(cfg.val_fraction * len(pairs[0])) if pairs is not None else 0
    if held < _MIN_HELD_OUT:
        return supervision, None
    generator = torch.Generator().manual_seed(cfg.seed + 2)
    order = torch.randperm(len(pairs[0]), generator=generator)
    held_ids, kept_ids = order[:held], order[held:]
    documents = pairs[1][held_ids]
    seen = {row.numpy().tobytes() for row in documents}
    distractors = x[torch.randperm(len(x), generator=generator)[:_DISTRACTORS]]
    distractors = distractors[[row.numpy().tobytes() not in seen for row in distractors]]
    validation = Validation(pairs[0][held_ids], torch.cat([documents, distractors]), torch.arange(held),
                            torch.cat([torch.arange(held), torch.full((len(distractors),), -1)]))
    return {**supervision, "pairs": (pairs[0][kept_ids], pairs[1][kept_ids])}, validation


def _nesting_anchors(x: torch.Tensor, pairs: tuple[torch.Tensor, torch.Tensor] | None = None,
                     labels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Anchors of the prefix-nesting stage: the fit rows (each its own index, left out of its candidates) and
    the pairs' queries (-1: no candidate is them). Labels add nothing here: the labelled rows are the fit rows."""
    del labels
    ids = torch.arange(len(x))
    if pairs is None:
        return x, ids
    return torch.cat([x, pairs[0]]), torch.cat([ids, torch.full((len(pairs[0]),), -1)])


def _int8_scale(weight: torch.Tensor, centred: torch.Tensor) -> torch.Tensor:
    """Per-dimension int8 step: the largest |z_j| / ‖z_{:j+1}‖ over the fit rows, over 127.

    A normalised r-prefix has ``|u_j| = |z_j| / ‖z_{:r}‖ <= |z_j| / ‖z_{:j+1}‖`` for every r > j, so one scale per
    dimension serves every budget and never clips a fit row (other rows are clamped to ±127).
    """
    peak = torch.zeros(weight.shape[0], dtype=torch.float64)
    for start in range(0, len(centred), 65536):
        z = (centred[start : start + 65536] @ weight.T).double()
        prefix_norm = z.square().cumsum(dim=1).sqrt()
        ratio = z.abs() / prefix_norm.clamp_min(1e-300)
        peak = torch.maximum(peak, ratio.max(dim=0).values)
    return (torch.where(peak > 0, peak, torch.ones_like(peak)) / _LEVELS).float()


def _report_extra(cfg: CLLRConfig, mode: str, before: dict[str, float], after: dict[str, float], weight: torch.Tensor,
                  strength: torch.Tensor, singular: torch.Tensor) -> dict[str, Any]:
    """The fit report's method part: supervision, kept rank and active input columns, losses, spectra."""
    return {
        "supervision": mode,
        "regularizer": cfg.regularizer,
        "rank": int(weight.shape[0]),
        "active_columns": int((weight.abs().sum(dim=0) > 0).sum()),
        "input_dim": int(weight.shape[1]),
        "losses_before": before,
        "losses_after": after,
        "singular_values_top": [round(float(v), 4) for v in singular[:8]],
        "singular_value_min_kept": round(float(singular[: weight.shape[0]].min()), 6),
        "code_std_relative_top": [round(float(v), 4) for v in strength[:8]],
    }


register_compressors = adds_compressors(CLLRCompressor)
