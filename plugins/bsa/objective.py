"""The BSA training objective (fit only, never saved): ``BSAObjective`` adds to the model the reconstruction
``1 - cos(x_hat, x)`` and sparsity alignment losses (and the optional fixed-K term), weighted by ``LossWeights``,
with input noise and code dropout; ``SparseCodeDecode`` decodes the mostly-zero training codes cheaply."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from adaptemb import cosine_distance

from .model import THRESHOLD, BSAModel


@dataclass(frozen=True)
class LossWeights:
    """How the BSA loss terms are combined; ``alpha`` rises linearly over ``ramp_steps`` when > 0."""

    k: int
    alpha: float = 1.0
    epsilon: float = 0.125
    detach_target: bool = True
    target: str = "values"
    fixed_k_weight: float = 0.0
    ramp_steps: int = 0
    input_noise: float = 0.0
    code_dropout: float = 0.0

    def alpha_at(self, step: int) -> float:
        if self.ramp_steps <= 0:
            return self.alpha
        return self.alpha * min(1.0, (step + 1) / self.ramp_steps)


def straight_through_round(s: torch.Tensor) -> torch.Tensor:
    """Forward: ``1[s >= 0.5]``; backward: identity (``hard + s - sg(s)``)."""
    hard = (s >= THRESHOLD).to(s.dtype)
    return hard + s - s.detach()


def top_k_mask(s: torch.Tensor, k: int) -> torch.Tensor:
    """A 0/1 tensor with ones at the ``k`` largest entries of each row of ``s``."""
    idx = torch.topk(s, k, dim=1).indices
    return torch.zeros_like(s).scatter(1, idx, 1.0)



SPARSE_DECODE_DENSITY = 0.05
"""Codes with at most this fraction of active entries are decoded by gathering rows (early in training,
about half the features fire and the dense product is faster)."""


def decode_training_code(code: torch.Tensor, model: BSAModel) -> torch.Tensor:
    """``model.decode(code)`` with the same gradients, by the cheaper path for the code's density."""
    if float((code != 0).float().mean()) > SPARSE_DECODE_DENSITY:
        return model.decode(code)
    return SparseCodeDecode.apply(code, model.decoder, model.decoder_bias)


class SparseCodeDecode(torch.autograd.Function):
    """``code @ D + c`` for a code that is mostly zero (a binary code, ~1 % active), with the dense product's
    gradients. The forward product goes through torch's sparse CSR kernel (work proportional to the active
    entries); the gradients are the two dense products of the backward pass, in the autocast dtype when
    autocast is on, like the matmuls they replace."""

    @staticmethod
    def forward(ctx: Any, code: torch.Tensor, decoder: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        device = code.device.type
        ctx.low = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        with torch.autocast(device_type=device, enabled=False), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            out = torch.sparse.mm(code.float().to_sparse_csr(), decoder.float()) + bias.float()
        ctx.save_for_backward(code, decoder)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        code, decoder = ctx.saved_tensors
        dtype = ctx.low or torch.float32
        low_grad = grad.to(dtype)
        grad_code = (low_grad @ decoder.to(dtype).T).float()
        grad_decoder = (code.to(dtype).T @ low_grad).to(decoder.dtype)
        return grad_code, grad_decoder, grad.sum(dim=0).to(decoder.dtype)


class BSAObjective(nn.Module):
    """What ``train`` optimises: the model plus reconstruction ``1 - cos(x_hat, x)`` and sparsity alignment
    (and the optional fixed-K term), with input noise and code dropout. Not saved: loading rebuilds the model."""

    def __init__(self, model: BSAModel, weights: LossWeights, seed: int = 0) -> None:
        super().__init__()
        self.model = model
        self.weights = weights
        self._rng = np.random.default_rng(seed)

    def _keep_mask(self, like: torch.Tensor) -> torch.Tensor:
        """Which code entries dropout keeps (probability ``1 - code_dropout`` each). On the CPU the draws come from
        numpy's PCG64 (about 5x faster than torch's CPU generator here), seeded with the fit's seed."""
        if like.device.type == "cpu":
            draws = torch.from_numpy(self._rng.random(tuple(like.shape), dtype=np.float32))
        else:
            draws = torch.rand(like.shape, device=like.device)
        return draws >= self.weights.code_dropout

    def training_loss(self, batch: Sequence[torch.Tensor], step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Total BSA loss of a batch of unit-norm rows, with its named parts (see ``LossWeights``)."""
        w, model = self.weights, self.model
        x = batch[0]
        s = model.activations(self._noisy(x) if self.training and w.input_noise > 0 else x)
        # inverted dropout on the binary code: no decoder row can stand in for a feature that a new row may miss
        code = straight_through_round(s)
        if self.training and w.code_dropout > 0:
            code = code * (self._keep_mask(code) * (1.0 / (1.0 - w.code_dropout)))
        reconstruction = cosine_distance(decode_training_code(code, model), x)
        alignment = self.alignment_loss(s)
        alpha = w.alpha_at(step) if self.training else w.alpha  # held-out loss: the final objective
        total = reconstruction + alpha * alignment
        parts = {"reconstruction": reconstruction.detach(), "alignment": alignment.detach()}
        if w.fixed_k_weight > 0:
            fixed = cosine_distance(model.decode(top_k_mask(s.detach(), w.k) * (1.0 + s - s.detach())), x)
            total = total + w.fixed_k_weight * fixed
            parts["fixed_k"] = fixed.detach()
        parts["active"] = (s >= THRESHOLD).float().sum(dim=1).mean().detach()
        return total, parts

    def _noisy(self, x: torch.Tensor) -> torch.Tensor:
        """Unit-norm rows plus Gaussian noise of expected norm ``input_noise``, re-normalised (the
        reconstruction target stays the clean row: a denoising regulariser for small fits)."""
        noise = torch.randn_like(x) * (self.weights.input_noise / x.shape[1] ** 0.5)
        return F.normalize(x + noise, dim=1)

    def alignment_loss(self, s: torch.Tensor) -> torch.Tensor:
        """``1 - cos(s - eps, T - eps)`` with ``T = TopK_k(s)`` (values; detached unless configured) or,
        for ``target="ones"``, the 0/1 indicator of the top k (the ideal binary code)."""
        if self.weights.target == "ones":
            return alignment_to_top_k_indicator(s, self.weights.k, self.weights.epsilon)
        mask = top_k_mask(s.detach(), self.weights.k)
        target = mask * (s.detach() if self.weights.detach_target else s)
        eps = self.weights.epsilon
        return cosine_distance(s - eps, target - eps)


def alignment_to_top_k_indicator(s: torch.Tensor, k: int, eps: float) -> torch.Tensor:
    """Mean ``1 - cos(s - eps, t - eps)`` where ``t`` is the 0/1 indicator of each row's top ``k`` of ``s``,
    from three row sums instead of five full (n, h) passes (same value and gradient as the direct form):
    ``<s - e, t - e> = (1 - e) S_top - e (S - S_top) - e (1 - e) k + e^2 (h - k)``,
    ``|s - e|^2 = Q - 2 e S + h e^2`` and ``|t - e|^2 = k (1 - e)^2 + (h - k) e^2``, with ``S = sum s``,
    ``Q = sum s^2`` and ``S_top`` the sum of the top k (the indicator is a constant: no gradient through it)."""
    h = s.shape[1]
    s = s.float()
    total, squares = s.sum(dim=1), (s * s).sum(dim=1)
    top = torch.topk(s, k, dim=1).values.sum(dim=1)
    dot = (1 - eps) * top - eps * (total - top) - eps * (1 - eps) * k + eps * eps * (h - k)
    s_norm2 = squares - 2 * eps * total + h * eps * eps
    t_norm2 = k * (1 - eps) ** 2 + (h - k) * eps * eps
    return (1.0 - dot / torch.sqrt((s_norm2 * t_norm2).clamp_min(1e-16))).mean()
