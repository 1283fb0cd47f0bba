"""``csr``: Contrastive Sparse Representation — a TopK sparse autoencoder whose codes serve any k.

One fit trains with L(k) + L(4k)/8 + β·aux-k + γ·NCL (see ``docs/methods/csr.md``); ``encode`` then
keeps the top-k latents for any k from 1 to h. Scoring is either the paper's sparse·sparse dot
product or asymmetric: a dense query projected once through the decoder against sparse document
codes, ``⟨q, x̂_doc⟩ = ⟨W_decᵀq, z_doc⟩ + ⟨q, b_pre⟩``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field

from adaptemb import (
    Budgets,
    Codes,
    Compressor,
    DenseCodes,
    SparseCodes,
    TrainingConfig,
    as_matrix,
    hookimpl,
    train,
)
from adaptemb_plugins.csr_model import CSREncoder, CSRModule, LossSettings, geometric_median

_ENCODE_BLOCK = 1 << 24  # pre-activation floats per encode block (64 MB in float32)
_EVAL_ROWS = 2048  # rows the before/after loss measurement uses
_MEDIAN_ROWS = 8192  # rows the geometric median is estimated from


class CSRConfig(TrainingConfig):
    """CSR settings; defaults chosen by measurement (``docs/methods/csr.md``)."""

    k: int = Field(32, ge=1, description="Active latents trained for, and the default encode budget.")
    hidden: int | None = Field(None, ge=1, description="Latent size h; None means 4·d (the paper's peak).")
    decoder: Literal["tied", "untied"] = Field(
        "tied", description="untied: unit-norm decoder with gradient projection (OpenAI); tied: W_dec = W_encᵀ (paper)."
    )
    init: Literal["random", "data"] = Field(
        "random", description="Latent directions start at random unit vectors, or at (centred) training rows."
    )
    pre_bias_init: Literal["median", "mean"] = Field("median", description="b_pre starts at the geometric median or the mean.")
    normalize: Literal["l2", "none", "standardize"] = Field("l2", description="Input normalisation before encoding.")
    multi_k_factor: int = Field(4, ge=1, description="Multi-TopK: the second reconstruction uses factor·k latents.")
    multi_k_coef: float = Field(0.125, ge=0, description="Weight of the factor·k reconstruction loss.")
    k_aux: int = Field(512, ge=1, description="Dead latents the auxiliary loss reconstructs the residual with.")
    aux_coef: float = Field(1 / 32, ge=0, description="β: weight of the aux-k loss.")
    dead_steps: int = Field(50, ge=1, description="A latent is dead after this many steps without firing.")
    cl_coef: float = Field(1.0, ge=0, description="γ: weight of the non-negative contrastive loss.")
    temperature: float = Field(0.2, gt=0, description="τ of the InfoNCE over L2-normalised sparse codes.")
    view_dropout: float = Field(
        0.0, ge=0, lt=1, description="Dropout on the contrastive second view (0: the identical pass, measured best)."
    )
    scoring: Literal["asymmetric", "symmetric"] = Field(
        "asymmetric", description="asymmetric: dense query through the decoder vs sparse docs; symmetric: sparse·sparse."
    )
    value_dtype: Literal["float16", "float32"] = Field("float16", description="Stored dtype of code values.")
    # training defaults, measured for this method (see the docs)
    epochs: int = Field(10, ge=1, description="Passes over the training rows (at most).")
    batch_size: int = Field(256, ge=2, description="Rows per optimisation step.")
    lr: float = Field(3e-3, gt=0, description="Adam learning rate.")
    adam_eps: float = Field(6.25e-10, gt=0, description="Adam epsilon (the paper's).")
    val_fraction: float = Field(0.0, ge=0, lt=0.5, description="Rows held out for early stopping (0: train on all).")


class CSRCompressor(Compressor):
    """TopK sparse autoencoder with Multi-TopK, aux-k and a non-negative contrastive loss."""

    name = "csr"
    Config = CSRConfig
    budget_help = "active latents k, 1 <= k <= h (h = 4·d by default); one fit serves every k"
    fit_inputs = frozenset({"pairs", "labels"})
    test_params: ClassVar[dict[str, Any]] = {"hidden": 64, "k": 4, "epochs": 2, "batch_size": 64, "k_aux": 16, "progress": False}
    config: CSRConfig

    def __init__(self, config: CSRConfig | None = None, **params: Any) -> None:
        super().__init__(config, **params)
        self._module: CSRModule | None = None
        self._shift = torch.zeros(0)
        self._scale = torch.ones(0)

    # -- fitting --------------------------------------------------------------------------------

    def _fit(self, x: torch.Tensor, **supervision: Any) -> None:
        cfg = self.config
        hidden = cfg.hidden or 4 * x.shape[1]
        if cfg.k > hidden:
            raise ValueError(f"k={cfg.k} is larger than the latent size h={hidden}")
        self._fit_normalisation(x)
        rows, partners, groups = self._training_rows(x, **supervision)
        module = self._build_module(self._normalise(x), hidden)
        before = self._measure(module, rows, partners, groups)
        report = train(module, [rows, partners, groups], cfg, description="csr")
        self._module = module.cpu().eval()
        after = self._measure(self._module, rows, partners, groups)
        self.fit_report = self._report(report.as_dict(), before, after, self._normalise(x))

    def _fit_normalisation(self, x: torch.Tensor) -> None:
        if self.config.normalize == "standardize":
            self._shift, self._scale = x.mean(dim=0), x.std(dim=0).clamp_min(1e-6)
        else:
            self._shift, self._scale = torch.zeros(x.shape[1]), torch.ones(x.shape[1])

    def _normalise(self, x: torch.Tensor) -> torch.Tensor:
        if self.config.normalize == "l2":
            return F.normalize(x, dim=1)
        return (x - self._shift) / self._scale

    def _training_rows(self, x: torch.Tensor, pairs: tuple[torch.Tensor, torch.Tensor] | None = None,
                       labels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rows to reconstruct, each row's contrastive partner, and a group id (same group = positive)."""
        n = len(x)
        groups = labels.long() if labels is not None else torch.arange(n)
        rows, partners = [self._normalise(x)], [self._normalise(x)]
        if pairs is not None:
            rows.append(self._normalise(pairs[0]))
            partners.append(self._normalise(pairs[1]))
            offset = int(groups.max()) + 1 if n else 0
            groups = torch.cat([groups, offset + torch.arange(len(pairs[0]))])
        return torch.cat(rows), torch.cat(partners), groups

    def _build_module(self, x: torch.Tensor, hidden: int) -> CSRModule:
        cfg = self.config
        gen = self.generator
        sample = x[torch.randperm(len(x), generator=gen)[:_MEDIAN_ROWS]]
        pre_bias = geometric_median(sample) if cfg.pre_bias_init == "median" else x.mean(dim=0)
        directions = self._initial_directions(x, pre_bias, hidden, gen)
        settings = LossSettings(
            k=cfg.k, multi_k_factor=cfg.multi_k_factor, multi_k_coef=cfg.multi_k_coef, k_aux=cfg.k_aux,
            aux_coef=cfg.aux_coef, dead_steps=cfg.dead_steps, cl_coef=cfg.cl_coef,
            temperature=cfg.temperature, view_dropout=cfg.view_dropout,
        )
        return CSRModule(directions, pre_bias, tied=cfg.decoder == "tied", losses=settings)

    def _initial_directions(self, x: torch.Tensor, pre_bias: torch.Tensor, hidden: int,
                            gen: torch.Generator) -> torch.Tensor:
        """Unit-norm (h, d) latent directions: centred training rows (``init="data"``) or random."""
        directions = torch.randn(hidden, x.shape[1], generator=gen)
        if self.config.init == "data":
            take = min(hidden, len(x))
            directions[:take] = x[torch.randperm(len(x), generator=gen)[:take]] - pre_bias
        return F.normalize(directions, dim=1)

    @torch.no_grad()
    def _measure(self, module: CSRModule, rows: torch.Tensor, partners: torch.Tensor,
                 groups: torch.Tensor) -> dict[str, float]:
        """Loss components on a fixed sample, in eval mode and with a fixed seed (before vs after)."""
        device = next(module.parameters()).device
        module.eval()
        order = torch.randperm(len(rows), generator=self.generator)[:_EVAL_ROWS]
        sums: dict[str, float] = {}
        batches = 0
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(self.config.seed)
            for start in range(0, len(order), self.config.batch_size):
                idx = order[start : start + self.config.batch_size]
                if len(idx) < 2:
                    continue
                batch = [t[idx].to(device) for t in (rows, partners, groups)]
                total, parts = module.training_loss(batch, 0)
                for name, value in {"loss": total, **parts}.items():
                    sums[name] = sums.get(name, 0.0) + float(value)
                batches += 1
        return {name: value / max(batches, 1) for name, value in sums.items()}

    def _report(self, loop: dict[str, Any], before: dict[str, float], after: dict[str, float],
                x: torch.Tensor) -> dict[str, Any]:
        frequency = self._activation_frequency(x)
        loop["extra"] = {
            "hidden": int(frequency.numel()),
            "k": self.config.k,
            "losses_before": before,
            "losses_after": after,
            "dead_fraction": float((frequency == 0).float().mean()),
            "activation_frequency": _summary(frequency),
        }
        return loop

    @torch.no_grad()
    def _activation_frequency(self, x: torch.Tensor) -> torch.Tensor:
        """Fraction of training rows on which each latent is among the k active ones (value > 0)."""
        assert self._module is not None
        counts = torch.zeros(self._module.enc_bias.numel())
        for block in _blocks(x, counts.numel()):
            values, indices = self._module.sparse_codes(block, self.config.k)
            counts += torch.bincount(indices[values > 0], minlength=counts.numel()).float()
        return counts / max(len(x), 1)

    # -- encoding and scoring -----------------------------------------------------------------

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        encoder = self._onnx_encoder(k)
        parts = [encoder(block) for block in _blocks(x, self._hidden)]
        indices = np.concatenate([i.numpy() for i, _ in parts])
        return SparseCodes(indices, np.concatenate([v.numpy() for _, v in parts]), self._hidden)

    def _onnx_encoder(self, k: int) -> CSREncoder:
        """The encode path as one module (normalise, matmul, topk, relu), exported to ONNX as is."""
        assert self._module is not None
        dtype = torch.float16 if self.config.value_dtype == "float16" else torch.float32
        return CSREncoder(self._module, k, normalize=self.config.normalize, shift=self._shift,
                          scale=self._scale, value_dtype=dtype).eval()

    @property
    def _hidden(self) -> int:
        assert self._module is not None
        return self._module.enc_bias.numel()

    def encode_queries(self, x: Any, k: int | None = None) -> Codes:
        """Sparse codes (symmetric) or ``[W_dec·(σ⊙q), ⟨q, σ⊙b_pre + μ⟩]`` as dense (h + 1) codes."""
        if self.config.scoring == "symmetric":
            return self.encode(x, k=k)
        self._require_fitted()
        self.budgets().resolve(k, self.name)
        q = as_matrix(x, dim=self.dim)
        assert self._module is not None
        with torch.inference_mode():
            projected = (q * self._scale) @ self._module.decoder.T
            offset = q @ (self._module.pre_bias * self._scale + self._shift)
        return DenseCodes(torch.cat([projected, offset[:, None]], dim=1).numpy())

    def score(self, query_codes: Codes, doc_codes: Codes) -> np.ndarray:
        """Asymmetric ⟨q, x̂_doc⟩ for dense query codes; the sparse dot product otherwise."""
        if not isinstance(query_codes, DenseCodes) or not isinstance(doc_codes, SparseCodes):
            return query_codes.similarity(doc_codes)
        if query_codes.dim != doc_codes.dim + 1:
            raise ValueError(f"query codes have dim {query_codes.dim}; expected h + 1 = {doc_codes.dim + 1}")
        dense = query_codes.to_dense()
        projected, offset = dense[:, :-1], dense[:, -1:]
        docs = doc_codes.to_csr()
        return np.asarray((docs @ projected.T).T, dtype=np.float32) + offset

    def _decode(self, codes: Codes) -> torch.Tensor:
        assert self._module is not None
        z = torch.from_numpy(codes.to_dense())
        return self._module.decode_dense(z) * self._scale + self._shift

    # -- state ----------------------------------------------------------------------------------

    def _budgets(self) -> Budgets:
        assert self._module is not None
        return Budgets(low=1, high=self._module.enc_bias.numel(), default=self.config.k)

    def _state(self) -> dict[str, torch.Tensor]:
        assert self._module is not None
        m = self._module
        state = {"enc_weight": m.enc_weight, "enc_bias": m.enc_bias, "pre_bias": m.pre_bias,
                 "shift": self._shift, "scale": self._scale}
        if m.dec_weight is not None:
            state["dec_weight"] = m.dec_weight
        return state

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        weight = tensors["enc_weight"].float()
        hidden, dim = weight.shape
        if tensors["enc_bias"].shape != (hidden,) or tensors["pre_bias"].shape != (dim,):
            raise ValueError(f"csr biases do not match the (h={hidden}, d={dim}) encoder")
        tied = "dec_weight" not in tensors
        if tied != (self.config.decoder == "tied"):
            raise ValueError(f"csr file has {'no' if tied else 'a'} separate decoder but decoder={self.config.decoder!r}")
        cfg = self.config
        settings = LossSettings(cfg.k, cfg.multi_k_factor, cfg.multi_k_coef, cfg.k_aux, cfg.aux_coef,
                                cfg.dead_steps, cfg.cl_coef, cfg.temperature, cfg.view_dropout)
        module = CSRModule(weight, tensors["pre_bias"], tied=tied, losses=settings)
        with torch.no_grad():
            module.enc_bias.copy_(tensors["enc_bias"])
            if module.dec_weight is not None:
                module.dec_weight.copy_(tensors["dec_weight"])
        self._module = module.eval()
        self._shift, self._scale = tensors["shift"].float(), tensors["scale"].float()


def _blocks(x: torch.Tensor, hidden: int) -> list[torch.Tensor]:
    rows = max(1, _ENCODE_BLOCK // max(hidden, 1))
    return [x[i : i + rows] for i in range(0, len(x), rows)]


def _summary(frequency: torch.Tensor) -> dict[str, float]:
    q = torch.quantile(frequency, torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0]))
    return {
        "min": float(q[0]), "p10": float(q[1]), "median": float(q[2]), "p90": float(q[3]), "max": float(q[4]),
        "mean": float(frequency.mean()),
        "below_1e-3": float((frequency < 1e-3).float().mean()),
    }


@hookimpl
def register_compressors(registry) -> None:  # type: ignore[no-untyped-def]
    registry.add(CSRCompressor)
