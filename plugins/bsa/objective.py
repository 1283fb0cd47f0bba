"""The BSA training objective (fit only, never saved): ``BSAObjective`` adds to the model the reconstruction
``1 - cos(x_hat, x)`` and sparsity alignment losses (and the optional fixed-K term), weighted by ``LossWeights``,
with input noise and code dropout; ``StraightThroughDecode`` decodes the mostly-zero training codes cheaply."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse
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


def top_k_indices(s: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (n, k), in no particular order, of the ``k`` largest entries of each row of ``s`` (no gradient). On the
    CPU numpy's introselect (``argpartition``: 3-5x faster than ``torch.topk`` at h = 3,072, k = 64); ties may be
    broken differently, which changes no value that depends only on the top k's values."""
    if s.device.type == "cpu":
        return torch.from_numpy(np.argpartition(s.detach().float().numpy(), -k, axis=1)[:, -k:])
    return torch.topk(s.detach(), k, dim=1, sorted=False).indices


def top_k_mask(s: torch.Tensor, k: int) -> torch.Tensor:
    """A 0/1 tensor with ones at the ``k`` largest entries of each row of ``s``."""
    return torch.zeros_like(s).scatter(1, top_k_indices(s, k), 1.0)


SPARSE_DECODE_DENSITY = 0.05
"""Codes with at most this fraction of active entries are decoded by gathering rows (early in training,
about half the features fire and the dense product is faster)."""


def decode_training_code(s: torch.Tensor, hard: torch.Tensor, keep: torch.Tensor | None, scale: float,
                         model: BSAModel) -> torch.Tensor:
    """``model.decode(b * m)`` for the binary code ``b = 1[s >= 0.5]`` with the straight-through gradient (forward
    ``b``, backward identity: ``b + s - sg(s)``), ``m`` the dropout factors (``scale`` where ``keep``, else 0;
    ``scale`` everywhere when ``keep`` is None), with the same gradients, by the cheaper path for the code's
    density. ``hard`` is ``s >= THRESHOLD`` (bool)."""
    return StraightThroughDecode.apply(s, hard, keep, scale, model.decoder, model.decoder_bias)


class StraightThroughDecode(torch.autograd.Function):
    """``x_hat = (b * m) @ D + c`` for the binary code ``b = 1[s >= 0.5]`` (``hard``) with the straight-through
    gradient ``d b / d s = 1`` and dropout factors ``m`` (see ``decode_training_code``): the code's values are
    exactly 0 or ``scale``, and ``d x_hat / d s`` passes ``(g @ D^T) * m``.

    On the CPU a code with at most ``SPARSE_DECODE_DENSITY`` of its entries active (the whole fit but its first
    steps) is a scipy CSR matrix: the forward product and the decoder's gradient ``code^T @ g`` take work in
    proportion to the active entries. Denser codes, and codes on other devices, use dense products, in the autocast
    dtype when autocast is on (like the matmuls they replace); the gradient to ``s`` is a dense product either way."""

    @staticmethod
    def forward(ctx: Any, s: torch.Tensor, hard: torch.Tensor, keep: torch.Tensor | None, scale: float,
                decoder: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        device = s.device.type
        low = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        active = hard if keep is None else hard & keep
        ctx.low, ctx.scale, ctx.sparse = low, scale, None
        ctx.save_for_backward(keep, decoder)
        with torch.autocast(device_type=device, enabled=False):
            if device == "cpu" and int(active.sum()) <= SPARSE_DECODE_DENSITY * active.numel():
                ctx.sparse = _csr_code(active, scale)
                return torch.from_numpy(ctx.sparse @ decoder.detach().numpy()) + bias
            dtype = low or torch.float32
            code = active.to(dtype).mul_(scale)
            ctx.dense = code
            return (code @ decoder.to(dtype)).float() + bias

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        keep, decoder = ctx.saved_tensors
        dtype = ctx.low or torch.float32
        low_grad = grad.to(dtype)
        grad_s = (low_grad @ decoder.to(dtype).T).float()
        if keep is not None:
            grad_s.mul_(keep)
        if ctx.scale != 1.0:
            grad_s.mul_(ctx.scale)
        if ctx.sparse is not None:
            grad_decoder = torch.from_numpy(ctx.sparse.T @ grad.float().contiguous().numpy())
        else:
            grad_decoder = (ctx.dense.T @ low_grad).to(decoder.dtype)
        grad_bias = grad.sum(dim=0).to(decoder.dtype) if ctx.needs_input_grad[5] else None
        return grad_s, None, None, None, grad_decoder, grad_bias


def _csr_code(active: torch.Tensor, scale: float) -> scipy.sparse.csr_array:
    """The (n, h) CSR matrix with ``scale`` at the ``True`` entries of ``active`` (a CPU bool tensor)."""
    n, h = active.shape
    rows, cols = np.divmod(np.flatnonzero(active.numpy()), h)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return scipy.sparse.csr_array((np.full(len(cols), scale, dtype=np.float32), cols, indptr), shape=(n, h))


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
        hard = s.detach() >= THRESHOLD
        # inverted dropout on the binary code: no decoder row can stand in for a feature that a new row may miss
        dropout = self.training and w.code_dropout > 0
        keep = self._keep_mask(s) if dropout else None
        decoded = decode_training_code(s, hard, keep, 1.0 / (1.0 - w.code_dropout) if dropout else 1.0, model)
        reconstruction = cosine_distance(decoded, x)
        alignment = self.alignment_loss(s)
        alpha = w.alpha_at(step) if self.training else w.alpha  # held-out loss: the final objective
        total = reconstruction + alpha * alignment
        parts = {"reconstruction": reconstruction.detach(), "alignment": alignment.detach()}
        if w.fixed_k_weight > 0:
            fixed = cosine_distance(model.decode(top_k_mask(s.detach(), w.k) * (1.0 + s - s.detach())), x)
            total = total + w.fixed_k_weight * fixed
            parts["fixed_k"] = fixed.detach()
        parts["active"] = hard.sum(dim=1, dtype=torch.float32).mean()
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
    top = s.gather(1, top_k_indices(s, k)).sum(dim=1)
    dot = (1 - eps) * top - eps * (total - top) - eps * (1 - eps) * k + eps * eps * (h - k)
    s_norm2 = squares - 2 * eps * total + h * eps * eps
    t_norm2 = k * (1 - eps) ** 2 + (h - k) * eps * eps
    return (1.0 - dot / torch.sqrt((s_norm2 * t_norm2).clamp_min(1e-16))).mean()
