"""The csr training objective (fit only): L(k) + c·L(m·k) + β·aux-k + γ·NCL, the dead-latent counters and, for
untied decoders, the unit-norm constraint. Loading a compressor rebuilds only the model (``csr_model``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from adaptemb import info_nce, normalized_mse
from adaptemb_plugins.csr_model import CSRModel


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


def row_relative_mse(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over rows of ``‖target − prediction‖² / ‖target‖²`` (OpenAI's normalised MSE)."""
    error = (target.float() - prediction.float()).pow(2).sum(dim=1)
    return (error / target.float().pow(2).sum(dim=1).clamp_min(1e-12)).mean()


class CSRObjective(nn.Module):
    """What ``train`` optimises: the model plus L(k) + c·L(m·k) + β·aux-k + γ·NCL, the dead-latent counters
    and (untied decoders) the unit-norm constraint. Not saved: loading rebuilds only the model."""

    def __init__(self, model: CSRModel, losses: LossSettings) -> None:
        super().__init__()
        self.model = model
        self.losses = losses
        self.register_buffer("steps_since_fired", torch.zeros(model.hidden, dtype=torch.long))

    def training_loss(self, batch: Sequence[torch.Tensor], step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """L(k) + c·L(m·k) + β·aux-k + γ·NCL for a batch ``(x, partner, group)`` of normalised rows."""
        x, partner, group = batch
        s, model = self.losses, self.model
        pre = model.pre_activations(x)
        wide = min(s.k * s.multi_k_factor, pre.shape[1])
        values, indices = torch.topk(pre, wide, dim=1)
        values = torch.relu(values)
        x_k = model.decode_sparse(indices[:, : s.k], values[:, : s.k]) + model.pre_bias
        x_wide = x_k + model.decode_sparse(indices[:, s.k :], values[:, s.k :]) if wide > s.k else x_k
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
        return normalized_mse(self.model.decode_sparse(indices, torch.relu(values)), residual)

    def _contrastive_loss(self, x: torch.Tensor, z_k: torch.Tensor, partner: torch.Tensor,
                          group: torch.Tensor) -> torch.Tensor:
        """NCL: InfoNCE between the codes of ``x`` and of a view of its partner (same group = positive)."""
        if self.losses.cl_coef == 0:
            return z_k.new_zeros((), dtype=torch.float32)
        positives = group[:, None] == group[None, :]
        if self.losses.view_dropout == 0 and torch.equal(partner, x):
            return info_nce(z_k, z_k, self.losses.temperature, positives=positives)  # the identical pass
        view = F.dropout(partner, p=self.losses.view_dropout, training=True) if self.losses.view_dropout else partner
        values, indices = torch.topk(self.model.pre_activations(view), self.losses.k, dim=1)
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
        weight = self.model.dec_weight
        if weight is None or weight.grad is None:
            return
        weight.grad -= (weight.grad * weight).sum(dim=1, keepdim=True) * weight

    @torch.no_grad()
    def after_optimizer_step(self) -> None:
        """Untied: put each decoder direction back on the unit sphere."""
        if self.model.dec_weight is not None:
            self.model.dec_weight.copy_(F.normalize(self.model.dec_weight, dim=1))
