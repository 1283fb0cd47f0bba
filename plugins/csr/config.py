"""csr's settings (``CSRConfig``) and what training derives from them: the loss settings and the steps over which
k is annealed."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, model_validator

from adaptemb import ByteBudgets, StreamBatches, TrainingConfig
from adaptemb_plugins.csr.objective import LossSettings


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
    k_start: int | None = Field(
        None, ge=1, description="k annealing: training starts at k_start active latents, falling linearly to k over "
        "anneal_share of the steps (None: no annealing).")
    anneal_share: float = Field(0.7, gt=0, le=1, description="Share of the training steps over which k is annealed.")
    group_coef: float = Field(1.0, ge=0, description="With pairs or labels: weight of the asymmetric group loss in the "
                              "supervised fine-tune (csr.supervision).")
    group_temperature: float = Field(0.05, gt=0, description="τ of the asymmetric group loss.")
    pair_weight: float = Field(8.0, gt=0, description="Weight of a pair's query in the group loss (a corpus row: 1).")
    supervised_epochs: int = Field(20, ge=1, description="Fine-tune epochs with pairs or labels (at most).")
    supervised_lr: float = Field(1e-4, gt=0, description="Adam learning rate of the supervised fine-tune.")
    supervised_patience: int = Field(6, ge=1, description="The supervised fine-tune stops after this many epochs "
                                     "without a better held-out MRR (2 stopped it on noise of 100 held-out pairs).")
    query_map: bool = Field(True, description="With pairs: the fine-tune also learns a linear map of the queries "
                            "(d x d, from the identity; documents never pass through it).")
    held_out_share: float = Field(0.2, ge=0, lt=1, description="Share of the pairs (or labelled rows) held out to "
                                  "stop the fine-tune on.")
    byte_budgets: ByteBudgets = Field(
        None, description="Bytes per vector to fit heads for (fit(..., bytes=B)): for each budget whose code holds "
        "at most k/3 latents, a head fine-tuned from the main fit with k annealed down to the k it holds at 2-bit "
        "values; kept when it recalls more of the held-out slice than the main fit's code of that size.")
    head_epochs: int = Field(5, ge=1, description="Epochs of each byte-budget head's fine-tune.")
    scoring: Literal["asymmetric", "symmetric"] = Field(
        "asymmetric", description="asymmetric: a dense query (query_form) vs packed docs; symmetric: packed·packed."
    )
    query_form: Literal["encoder", "decoder"] = Field(
        "encoder", description="Asymmetric queries: the encoder's pre-activations W_enc(q - b_pre) + b_enc (measured "
        "best at 16-32 B on the default data), or the query through the decoder, scoring <q, decode(doc)>.")
    value_bits: Literal[1, 2, 3, 4, 8, 16] | None = Field(
        None, description="Bits per stored value: 1-8: levels of a per-feature codebook fitted on the fit rows; 16: "
        "float16; None: per k, the width the byte budgets fix, smallest first, from the held-out recall@10 measured "
        "at fit (csr.values: the most latents within 0.01 of a budget's best).")
    # training defaults, measured for this method (see the docs)
    epochs: int = Field(10, ge=1, description="Passes over the training rows (at most).")
    batch_size: int = Field(256, ge=2, description="Rows per optimisation step.")
    lr: float = Field(3e-3, gt=0, description="Adam learning rate.")
    adam_eps: float = Field(6.25e-10, gt=0, description="Adam epsilon (the paper's).")
    val_fraction: float = Field(0.0, ge=0, lt=0.5, description="Rows held out for early stopping (0: train on all).")

    @model_validator(mode="before")
    @classmethod
    def _legacy_value_dtype(cls, data: Any) -> Any:
        """Files written before packed codes say ``value_dtype`` (float16 / float32 values): now float16 values,
        queries through the decoder as then."""
        if isinstance(data, dict) and "value_dtype" in data:
            data = {key: value for key, value in data.items() if key != "value_dtype"}
            data.setdefault("value_bits", 16)
            data.setdefault("query_form", "decoder")
        return data


def loss_settings(cfg: CSRConfig, anneal_steps: int) -> LossSettings:
    """The loss weights and dead-latent rule of ``cfg``, k annealed over ``anneal_steps`` steps (0: none)."""
    return LossSettings(k=cfg.k, multi_k_factor=cfg.multi_k_factor, multi_k_coef=cfg.multi_k_coef, k_aux=cfg.k_aux,
                        aux_coef=cfg.aux_coef, dead_steps=cfg.dead_steps, cl_coef=cfg.cl_coef,
                        temperature=cfg.temperature, view_dropout=cfg.view_dropout,
                        k_start=cfg.k_start or 0, anneal_steps=anneal_steps)


def anneal_steps(cfg: CSRConfig, data: Any) -> int:
    """The optimisation steps over which k is annealed: ``anneal_share`` of the steps the fit may take."""
    return int(cfg.anneal_share * cfg.epochs * steps_per_epoch(cfg, data))


def steps_per_epoch(cfg: CSRConfig, data: Any) -> int:
    """Optimisation steps of one epoch over ``data`` (a stream, or tensors of which ``val_fraction`` is held out)."""
    if isinstance(data, StreamBatches):
        return data.steps_per_epoch(cfg.batch_size)
    return math.ceil(len(data[0]) * (1 - cfg.val_fraction) / cfg.batch_size)
