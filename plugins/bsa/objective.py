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


@dataclass(frozen=True)
class CodeDropout:
    """One batch's code dropout: which code entries it ``keep``s (bool) and the ``factors`` (float) that multiply the
    code and its gradient: ``scale`` (the inverse of the keep rate) where kept, else 0."""

    keep: torch.Tensor
    factors: torch.Tensor
    scale: float


def at_least(s: torch.Tensor, threshold: float) -> torch.Tensor:
    """``s >= threshold`` (bool, no gradient). Masks are made and counted by numpy on the CPU, where torch's bool
    kernels are 4-10x slower here (comparison, sum, conversion to float)."""
    if s.device.type == "cpu":
        return torch.from_numpy(s.detach().float().numpy() >= threshold)
    return s.detach() >= threshold


def mean_count(mask: torch.Tensor) -> torch.Tensor:
    """The mean number of ``True`` entries per row of a bool (n, h) mask, a 0-d float tensor on its device."""
    if mask.device.type == "cpu":
        return torch.tensor(np.count_nonzero(mask.numpy()) / len(mask))
    return mask.sum() / len(mask)


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


DROPOUT_LEVELS = 65_536
"""Code dropout draws 16-bit integers (``BSAObjective._dropout``)."""
SPARSE_DECODE_DENSITY = 0.05
"""Codes with at most this fraction of active entries are decoded by gathering rows (early in training,
about half the features fire and the dense product is faster)."""


def decode_training_code(s: torch.Tensor, hard: torch.Tensor, dropout: CodeDropout | None,
                         model: BSAModel) -> torch.Tensor:
    """``model.decode(b * m)`` for the binary code ``b = 1[s >= 0.5]`` (``hard``) with the straight-through gradient
    (forward ``b``, backward identity: ``b + s - sg(s)``) and ``m`` the dropout's factors (1 without dropout), with the
    same gradients, by the cheaper path for the code's density."""
    return StraightThroughDecode.apply(s, hard, dropout, model.decoder, model.decoder_bias)


class StraightThroughDecode(torch.autograd.Function):
    """``x_hat = (b * m) @ D + c`` for the binary code ``b = 1[s >= 0.5]`` (``hard``) with the straight-through
    gradient ``d b / d s = 1`` and dropout factors ``m`` (see ``decode_training_code``): the code's values are
    exactly 0 or the dropout's scale, and ``d x_hat / d s`` passes ``(g @ D^T) * m``.

    On the CPU a code with at most ``SPARSE_DECODE_DENSITY`` of its entries active (the whole fit but its first
    steps) is a scipy CSR matrix: the forward product and the decoder's gradient ``code^T @ g`` take work in
    proportion to the active entries. Denser codes, and codes on other devices, use dense products, in the autocast
    dtype when autocast is on (like the matmuls they replace); the gradient to ``s`` is a dense product either way."""

    @staticmethod
    def forward(ctx: Any, s: torch.Tensor, hard: torch.Tensor, dropout: CodeDropout | None, decoder: torch.Tensor,
                bias: torch.Tensor) -> torch.Tensor:
        device = s.device.type
        low = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        active, scale = (hard, 1.0) if dropout is None else (hard & dropout.keep, dropout.scale)
        ctx.low, ctx.sparse = low, None
        ctx.save_for_backward(None if dropout is None else dropout.factors, decoder)
        with torch.autocast(device_type=device, enabled=False):
            positions = np.flatnonzero(active.numpy()) if device == "cpu" else None
            if positions is not None and len(positions) <= SPARSE_DECODE_DENSITY * active.numel():
                ctx.sparse = _csr_code(positions, active.shape, scale)
                return torch.from_numpy(ctx.sparse @ decoder.detach().numpy()) + bias
            dtype = low or torch.float32
            code = active.to(dtype).mul_(scale)
            ctx.dense = code
            return (code @ decoder.to(dtype)).float() + bias

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        factors, decoder = ctx.saved_tensors
        dtype = ctx.low or torch.float32
        low_grad = grad.to(dtype)
        grad_s = (low_grad @ decoder.to(dtype).T).float()
        if factors is not None:
            grad_s.mul_(factors)
        if ctx.sparse is not None:
            grad_decoder = torch.from_numpy(ctx.sparse.T @ grad.float().contiguous().numpy())
        else:
            grad_decoder = (ctx.dense.T @ low_grad).to(decoder.dtype)
        grad_bias = grad.sum(dim=0).to(decoder.dtype) if ctx.needs_input_grad[4] else None
        return grad_s, None, None, grad_decoder, grad_bias


def _csr_code(positions: np.ndarray, shape: tuple[int, ...], scale: float) -> scipy.sparse.csr_array:
    """The (n, h) CSR matrix with ``scale`` at the flat ``positions`` (ascending) of the code's active entries."""
    n, h = shape
    rows, cols = np.divmod(positions, h)
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

    def _dropout(self, like: torch.Tensor) -> CodeDropout:
        """Code dropout for a code shaped ``like``: an entry is dropped when a uniform 16-bit draw falls below
        ``round(code_dropout * 65,536)`` (the probability ``code_dropout`` to a multiple of 1 / 65,536: exactly 0.5 at
        the default), and the kept ones are scaled by the inverse of the keep rate. On the CPU the draws are numpy
        PCG64's raw 64-bit words, four draws each (about 3x faster than drawing floats, 6x faster than torch's CPU
        generator here), seeded with the fit's seed."""
        dropped = min(round(self.weights.code_dropout * DROPOUT_LEVELS), DROPOUT_LEVELS - 1)
        scale = DROPOUT_LEVELS / (DROPOUT_LEVELS - dropped)
        if like.device.type == "cpu":
            words = self._rng.bit_generator.random_raw(-(-like.numel() // 4))
            keep = words.view(np.uint16)[: like.numel()].reshape(like.shape) >= dropped
            factors = keep.astype(np.float32)
            factors *= scale
            return CodeDropout(torch.from_numpy(keep), torch.from_numpy(factors), scale)
        keep = torch.randint(0, DROPOUT_LEVELS, like.shape, device=like.device) >= dropped
        return CodeDropout(keep, keep.to(torch.float32) * scale, scale)

    def training_loss(self, batch: Sequence[torch.Tensor], step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Total BSA loss of a batch of unit-norm rows, with its named parts (see ``LossWeights``)."""
        w, model = self.weights, self.model
        x = batch[0]
        s = model.activations(self._noisy(x) if self.training and w.input_noise > 0 else x)
        hard = at_least(s, THRESHOLD)
        # inverted dropout on the binary code: no decoder row can stand in for a feature that a new row may miss
        dropout = self._dropout(s) if self.training and w.code_dropout > 0 else None
        decoded = decode_training_code(s, hard, dropout, model)
        reconstruction = cosine_distance(decoded, x)
        alignment = self.alignment_loss(s)
        alpha = w.alpha_at(step) if self.training else w.alpha  # held-out loss: the final objective
        total = reconstruction + alpha * alignment
        parts = {"reconstruction": reconstruction.detach(), "alignment": alignment.detach()}
        if w.fixed_k_weight > 0:
            fixed = cosine_distance(model.decode(top_k_mask(s.detach(), w.k) * (1.0 + s - s.detach())), x)
            total = total + w.fixed_k_weight * fixed
            parts["fixed_k"] = fixed.detach()
        parts["active"] = mean_count(hard)
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
    """Mean ``1 - cos(s - eps, t - eps)`` where ``t`` is the 0/1 indicator of each row's top ``k`` of ``s`` (a constant:
    no gradient through it), from three row sums instead of five full (n, h) passes, with its gradient in closed
    form (``TopKAlignment``); the same value and gradient as the direct form."""
    return TopKAlignment.apply(s, k, eps)


class TopKAlignment(torch.autograd.Function):
    """``alignment_to_top_k_indicator``. Per row, with ``S = sum s``, ``Q = sum s^2`` and ``S_top`` the sum of the top
    k: ``<s - e, t - e> = (1 - e) S_top - e (S - S_top) - e (1 - e) k + e^2 (h - k)`` (``dot``),
    ``|s - e|^2 = Q - 2 e S + h e^2`` and ``|t - e|^2 = k (1 - e)^2 + (h - k) e^2``, ``r = |s - e| |t - e|``.
    The gradient of a row's ``1 - dot / r`` is ``dot |t - e|^2 (s - e) / r^3 - (t - e) / r``: three passes over
    (n, h) (a product, a sum, a scatter into the top k) instead of autograd's chain through the sums."""

    @staticmethod
    def forward(ctx: Any, s: torch.Tensor, k: int, eps: float) -> torch.Tensor:
        h = s.shape[1]
        s = s.float()
        top_idx = top_k_indices(s, k)
        total, squares = s.sum(dim=1), (s * s).sum(dim=1)
        top = s.gather(1, top_idx).sum(dim=1)
        dot = (1 - eps) * top - eps * (total - top) - eps * (1 - eps) * k + eps * eps * (h - k)
        t_norm2 = k * (1 - eps) ** 2 + (h - k) * eps * eps
        product = (squares - 2 * eps * total + h * eps * eps) * t_norm2
        r = torch.sqrt(product.clamp_min(1e-16))
        ctx.save_for_backward(s, top_idx, dot, r, product >= 1e-16)
        ctx.eps, ctx.t_norm2 = eps, t_norm2
        return (1.0 - dot / r).mean()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        s, top_idx, dot, r, unclamped = ctx.saved_tensors
        eps, weight = ctx.eps, grad / len(s)
        along_s = torch.where(unclamped, dot * ctx.t_norm2 / r**3, 0.0) * weight  # coefficient of (s - e)
        along_t = -weight / r  # coefficient of (t - e)
        grad_s = s * along_s[:, None]
        grad_s.add_((-eps * (along_s + along_t))[:, None])
        grad_s.scatter_add_(1, top_idx, along_t[:, None].expand_as(top_idx))
        return grad_s, None, None
