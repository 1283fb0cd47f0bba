"""The CSR TopK sparse autoencoder (a torch module) and the losses it trains with.

Encoder ``z = ReLU(TopK_k(W_enc (x − b_pre) + b_enc))``; decoder ``x̂ = W_dec z + b_pre`` with
``W_dec`` either tied to ``W_enc`` (the CSR paper) or a separate matrix whose latent directions
are kept at unit norm with the gradient component along each direction projected out (OpenAI's
TopK SAE). Weights are stored as (h, d) matrices: row ``i`` is latent ``i``'s direction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from adaptemb import info_nce, normalized_mse


@dataclass(frozen=True)
class LossSettings:
    """Loss weights and the dead-latent rule (see ``CSRConfig`` for meanings and defaults)."""

    k: int
    multi_k_factor: int
    multi_k_coef: float
    k_aux: int
    aux_coef: float
    dead_steps: int
    cl_coef: float
    temperature: float
    view_dropout: float


def geometric_median(x: torch.Tensor, iterations: int = 50, tol: float = 1e-6) -> torch.Tensor:
    """Weiszfeld's algorithm: the point minimising the summed Euclidean distance to the rows of ``x``."""
    point = x.mean(dim=0)
    for _ in range(iterations):
        weights = 1.0 / (x - point).norm(dim=1).clamp_min(1e-8)
        new = (weights[:, None] * x).sum(dim=0) / weights.sum()
        if (new - point).norm() <= tol * max(float(point.norm()), 1.0):
            return new
        point = new
    return point


def row_relative_mse(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over rows of ``‖target − prediction‖² / ‖target‖²`` (OpenAI's normalised MSE)."""
    error = (target.float() - prediction.float()).pow(2).sum(dim=1)
    return (error / target.float().pow(2).sum(dim=1).clamp_min(1e-12)).mean()


class CSRModule(nn.Module):
    """TopK sparse autoencoder with pre-bias, encoder bias and a tied or unit-norm untied decoder."""

    def __init__(self, directions: torch.Tensor, pre_bias: torch.Tensor, *, tied: bool, losses: LossSettings) -> None:
        super().__init__()
        hidden, _ = directions.shape
        self.tied = tied
        self.losses = losses
        self.pre_bias = nn.Parameter(pre_bias.clone().float())
        self.enc_bias = nn.Parameter(torch.zeros(hidden))
        self.enc_weight = nn.Parameter(directions.clone().float())
        self.dec_weight = None if tied else nn.Parameter(F.normalize(directions.clone().float(), dim=1))
        self.register_buffer("steps_since_fired", torch.zeros(hidden, dtype=torch.long))

    @property
    def decoder(self) -> torch.Tensor:
        """The (h, d) decoder directions (the encoder's when tied)."""
        return self.enc_weight if self.dec_weight is None else self.dec_weight

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """``W_enc (x − b_pre) + b_enc`` for a batch of rows."""
        return (x - self.pre_bias) @ self.enc_weight.T + self.enc_bias

    def sparse_codes(self, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Values (ReLU'd, descending) and indices of the top-k latents: plain matmul/topk/relu ops."""
        values, indices = torch.topk(self.pre_activations(x), k, dim=1)
        return torch.relu(values), indices

    def decode_dense(self, z: torch.Tensor) -> torch.Tensor:
        """``W_dec z + b_pre`` for dense (B, h) codes."""
        return z @ self.decoder.to(z.dtype) + self.pre_bias.to(z.dtype)

    def decode_sparse(self, indices: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """``Σ_j values_j · W_dec[indices_j]`` (no bias): costs B·k·d, not B·h·d as a dense product."""
        weight = self.decoder
        return F.embedding_bag(indices, weight, per_sample_weights=values.to(weight.dtype), mode="sum")

    # -- training -------------------------------------------------------------------------------

    def training_loss(self, batch: Sequence[torch.Tensor], step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """L(k) + c·L(m·k) + β·aux-k + γ·NCL for a batch ``(x, partner, group)``."""
        x, partner, group = batch
        s = self.losses
        pre = self.pre_activations(x)
        wide = min(s.k * s.multi_k_factor, pre.shape[1])
        values, indices = torch.topk(pre, wide, dim=1)
        values = torch.relu(values)
        x_k = self.decode_sparse(indices[:, : s.k], values[:, : s.k]) + self.pre_bias
        x_wide = x_k + self.decode_sparse(indices[:, s.k :], values[:, s.k :]) if wide > s.k else x_k
        parts = {"recon_k": row_relative_mse(x_k, x), "recon_multi_k": row_relative_mse(x_wide, x)}
        parts["aux"] = self._aux_loss(pre, x - x_k.detach().float())
        z_k = torch.zeros_like(pre).scatter(1, indices[:, : s.k], values[:, : s.k])
        parts["contrastive"] = self._contrastive_loss(x, z_k, partner, group)
        if self.training:
            self._update_dead(indices[:, : s.k], values[:, : s.k])
        total = (
            parts["recon_k"] + s.multi_k_coef * parts["recon_multi_k"]
            + s.aux_coef * parts["aux"] + s.cl_coef * parts["contrastive"]
        )
        parts["dead_fraction"] = self.dead_mask().float().mean()
        return total, parts

    def dead_mask(self) -> torch.Tensor:
        """Latents that have not fired for ``dead_steps`` optimisation steps."""
        return self.steps_since_fired >= self.losses.dead_steps

    def _aux_loss(self, pre: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        dead = self.dead_mask()
        n_dead = int(dead.sum())
        if n_dead == 0 or self.losses.aux_coef == 0:
            return pre.new_zeros((), dtype=torch.float32)
        dead_ids = dead.nonzero().squeeze(1)
        values = pre[:, dead_ids]
        if n_dead > self.losses.k_aux:
            values, positions = torch.topk(values, self.losses.k_aux, dim=1)
            indices = dead_ids[positions]
        else:  # every dead latent takes part: no top-k needed
            indices = dead_ids.expand(len(pre), -1)
        return normalized_mse(self.decode_sparse(indices, torch.relu(values)), residual)

    def _contrastive_loss(self, x: torch.Tensor, z_k: torch.Tensor, partner: torch.Tensor,
                          group: torch.Tensor) -> torch.Tensor:
        """NCL: InfoNCE between the codes of ``x`` and of a view of its partner (same group = positive)."""
        if self.losses.cl_coef == 0:
            return z_k.new_zeros((), dtype=torch.float32)
        positives = group[:, None] == group[None, :]
        if self.losses.view_dropout == 0 and torch.equal(partner, x):
            return info_nce(z_k, z_k, self.losses.temperature, positives=positives)  # the identical pass
        view = F.dropout(partner, p=self.losses.view_dropout, training=True) if self.losses.view_dropout else partner
        values, indices = torch.topk(self.pre_activations(view), self.losses.k, dim=1)
        keys = torch.zeros_like(z_k).scatter(1, indices, torch.relu(values))
        return info_nce(z_k, keys, self.losses.temperature, positives=positives)

    @torch.no_grad()
    def _update_dead(self, indices: torch.Tensor, values: torch.Tensor) -> None:
        fired = torch.zeros_like(self.steps_since_fired, dtype=torch.bool)
        fired[indices[values > 0]] = True
        self.steps_since_fired += 1
        self.steps_since_fired[fired] = 0

    @torch.no_grad()
    def before_optimizer_step(self) -> None:
        """Untied: remove the gradient component parallel to each unit-norm decoder direction."""
        if self.dec_weight is None or self.dec_weight.grad is None:
            return
        weight, grad = self.dec_weight, self.dec_weight.grad
        grad -= (grad * weight).sum(dim=1, keepdim=True) * weight

    @torch.no_grad()
    def after_optimizer_step(self) -> None:
        """Untied: put each decoder direction back on the unit sphere."""
        if self.dec_weight is not None:
            self.dec_weight.copy_(F.normalize(self.dec_weight, dim=1))


class CSREncoder(nn.Module):
    """The inference encoder at a fixed k (normalise → matmul → topk → relu): what ONNX export traces."""

    output_names = ("indices", "values")

    def __init__(self, module: CSRModule, k: int, *, normalize: str, shift: torch.Tensor, scale: torch.Tensor,
                 value_dtype: torch.dtype) -> None:
        super().__init__()
        self.module, self.k, self.normalize, self.value_dtype = module, k, normalize, value_dtype
        self.register_buffer("shift", shift.clone())
        self.register_buffer("scale", scale.clone())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.normalize == "l2":
            x = F.normalize(x, dim=1)
        else:
            x = (x - self.shift) / self.scale
        values, indices = self.module.sparse_codes(x, self.k)
        return indices, values.to(self.value_dtype)
