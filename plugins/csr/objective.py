"""The csr training objective (fit only): L(k) + c·L(m·k) + β·aux-k + γ·NCL, the dead-latent counters and, for
untied decoders, the unit-norm constraint; the training rows of unsupervised rows and the activation statistics the
fit reports. Loading a compressor rebuilds only the model (``csr.model``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from adaptemb import info_nce, normalized_mse
from adaptemb_plugins.csr.model import CSRModel, row_blocks


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
    group_coef: float = 0.0
    """Weight of the asymmetric group loss (supervised fine-tune; 0: off): see ``group_loss``."""
    group_temperature: float = 0.05
    k_start: int = 0
    """k annealing: the first training step keeps ``k_start`` latents (0: ``k`` throughout) ..."""
    anneal_steps: int = 0
    """... and k falls linearly to ``k`` over this many steps; evaluation always uses ``k``."""

    def k_at(self, step: int) -> int:
        """The active latents a training step keeps: ``k_start`` falling linearly to ``k`` over ``anneal_steps``."""
        if self.k_start <= self.k or step >= self.anneal_steps:
            return self.k
        return round(self.k_start - (self.k_start - self.k) * step / max(self.anneal_steps, 1))


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
        x, partner, group = batch[:3]
        s, model = self.losses, self.model
        k = s.k_at(step) if self.training else s.k
        pre = model.pre_activations(x)
        wide = min(k * s.multi_k_factor, pre.shape[1])
        values, indices = torch.topk(pre, wide, dim=1)
        values = torch.relu(values)
        x_k = model.decode_sparse(indices[:, :k], values[:, :k]) + model.pre_bias
        x_wide = x_k + model.decode_sparse(indices[:, k:], values[:, k:]) if wide > k else x_k
        parts = {"recon_k": row_relative_mse(x_k, x), "recon_multi_k": row_relative_mse(x_wide, x)}
        parts["aux"] = self._aux_loss(pre, x - x_k.detach().float())
        z_k = torch.zeros_like(pre).scatter(1, indices[:, :k], values[:, :k])
        parts["contrastive"] = self._contrastive_loss(x, z_k, partner, group, k)
        if s.group_coef:
            weight = batch[3] if len(batch) > 3 else torch.ones(len(x), device=x.device)
            parts["group"] = self.group_loss(pre, x, z_k, partner, group, weight, k)
        if self.training:
            self._update_dead(indices[:, :k], values[:, :k])
        total = (
            parts["recon_k"] + s.multi_k_coef * parts["recon_multi_k"]
            + s.aux_coef * parts["aux"] + s.cl_coef * parts["contrastive"] + s.group_coef * parts.get("group", 0.0)
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

    def _contrastive_loss(self, x: torch.Tensor, z_k: torch.Tensor, partner: torch.Tensor, group: torch.Tensor,
                          k: int) -> torch.Tensor:
        """NCL: InfoNCE between the codes of ``x`` and of a view of its partner (same group = positive)."""
        if self.losses.cl_coef == 0:
            return z_k.new_zeros((), dtype=torch.float32)
        positives = group[:, None] == group[None, :]
        if self.losses.view_dropout == 0 and torch.equal(partner, x):
            return info_nce(z_k, z_k, self.losses.temperature, positives=positives)  # the identical pass
        view = F.dropout(partner, p=self.losses.view_dropout, training=True) if self.losses.view_dropout else partner
        return info_nce(z_k, self.model.dense_codes(view, k), self.losses.temperature, positives=positives)

    def group_loss(self, pre: torch.Tensor, x: torch.Tensor, z_k: torch.Tensor, partner: torch.Tensor,
                   group: torch.Tensor, weight: torch.Tensor, k: int) -> torch.Tensor:
        """The loss of the codes as they are searched: each row's query form (its encoder pre-activations) against
        the k-sparse codes of every partner in the batch, ``<pre(x_i), z(p_j)> / τ``, InfoNCE with the rows of
        ``x_i``'s group as positives (a query and its relevant documents share a group; an unpaired row is its own
        partner, alone in its group), weighted per anchor (pairs weigh ``weight``)."""
        keys = z_k if torch.equal(partner, x) else self.model.dense_codes(partner, k)
        anchors = pre if self.model.query_map is None else self.model.query_pre_activations(x)
        return info_nce(anchors, keys, self.losses.group_temperature, positives=group[:, None] == group[None, :],
                        normalize=False, weights=weight)

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


def own_partners(rows: torch.Tensor) -> list[torch.Tensor]:
    """Training tensors of rows with no supervision: each row its own partner, alone in its group."""
    return [rows, rows, torch.arange(len(rows))]


@torch.no_grad()
def activation_frequency(model: CSRModel, x: torch.Tensor, k: int) -> torch.Tensor:
    """Fraction of the (normalised) rows ``x`` on which each latent is among the k active ones (value > 0)."""
    counts = torch.zeros(model.hidden)
    for block in row_blocks(x, counts.numel()):
        values, indices = model.sparse_codes(block, k)
        counts += torch.bincount(indices[values > 0], minlength=counts.numel()).float()
    return counts / max(len(x), 1)


def dead_fraction(model: CSRModel, x: torch.Tensor, k: int) -> float:
    """Share of latents never among the k active ones on the rows ``x``."""
    return float((activation_frequency(model, x, k) == 0).float().mean())


def frequency_summary(frequency: torch.Tensor) -> dict[str, float]:
    """Quantiles, mean and the share below 1e-3 of the latents' activation frequencies (the fit report's)."""
    q = torch.quantile(frequency, torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0]))
    return {
        "min": float(q[0]), "p10": float(q[1]), "median": float(q[2]), "p90": float(q[3]), "max": float(q[4]),
        "mean": float(frequency.mean()),
        "below_1e-3": float((frequency < 1e-3).float().mean()),
    }
