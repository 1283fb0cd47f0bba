"""The BSA autoencoder: sigmoid encoder, straight-through binarisation, linear decoder, and its losses.

Kept apart from ``bsa.py`` (the Compressor) so the maths can be read on its own. The encode path
uses plain torch ops only (matmul, sigmoid, topk, comparisons) so it exports to ONNX.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from adaptemb import cosine_distance

THRESHOLD = 0.5
"""A feature is active when ``s >= THRESHOLD`` (natural mode and training alike)."""


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


class BSAModel(nn.Module):
    """``s = sigmoid(W_enc (x - m) + b_enc)``, ``b = round_ST(s)``, ``x_hat = b @ D + c``.

    ``m`` (``center``, a buffer) is the mean of the fit rows when centring is on, else zero.

    ``D`` (h, d) holds one decoder row per feature, so a binary code decodes to the sum of the rows
    of its active features plus the bias ``c``.
    """

    def __init__(self, dim: int, h: int, *, init_scale: float, decoder_bias: bool, generator: torch.Generator) -> None:
        super().__init__()
        # random directions; ``calibrate`` rescales them on the fit rows (init_scale = std of W_enc (x - m))
        self.encoder = nn.Parameter(F.normalize(torch.randn(h, dim, generator=generator), dim=1) * init_scale)
        self.decoder = nn.Parameter(torch.randn(h, dim, generator=generator) / h**0.5)
        self.encoder_bias = nn.Parameter(torch.zeros(h))
        self.decoder_bias = nn.Parameter(torch.zeros(dim), requires_grad=decoder_bias)
        self.register_buffer("center", torch.zeros(dim))
        self.weights: LossWeights | None = None

    @torch.no_grad()
    def calibrate(self, x: torch.Tensor, init_scale: float) -> None:
        """Rescale each encoder row so that ``W_enc (x - m)`` has std ``init_scale`` over the rows ``x``
        (the first 1024 of them: enough for the std, about one training step's work).

        With a zero encoder bias, about half of the features start above 0.5 on every row. The scale
        must be large next to Adam's first steps (each moves every weight by about ``lr``): at a tiny
        scale those steps, nearly the same for every feature, overwrite the random directions, the
        features become near-copies of each other, and the copies that lose the top-k die."""
        z = (x[:1024] - self.center) @ self.encoder.T
        self.encoder.mul_((init_scale / z.std(dim=0).clamp_min(1e-12))[:, None])

    def activations(self, x: torch.Tensor) -> torch.Tensor:
        """The soft activations ``s`` (n, h) in (0, 1) of unit-norm rows ``x``."""
        return torch.sigmoid((x - self.center) @ self.encoder.T + self.encoder_bias)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Reconstructions of (n, h) codes (0/1 or soft)."""
        return codes @ self.decoder + self.decoder_bias

    def training_loss(self, batch: Sequence[torch.Tensor], step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Total BSA loss of a batch of unit-norm rows, with its named parts (see ``LossWeights``)."""
        assert self.weights is not None, "set model.weights before training"
        w = self.weights
        x = batch[0]
        s = self.activations(self._noisy(x) if self.training and w.input_noise > 0 else x)
        # inverted dropout on the binary code: no decoder row can stand in for a feature that a new row may miss
        code = F.dropout(straight_through_round(s), p=w.code_dropout, training=self.training)
        reconstruction = cosine_distance(self.decode(code), x)
        alignment = self.alignment_loss(s)
        alpha = w.alpha_at(step) if self.training else w.alpha  # held-out loss: the final objective
        total = reconstruction + alpha * alignment
        parts = {"reconstruction": reconstruction.detach(), "alignment": alignment.detach()}
        if w.fixed_k_weight > 0:
            fixed = cosine_distance(self.decode(top_k_mask(s.detach(), w.k) * (1.0 + s - s.detach())), x)
            total = total + w.fixed_k_weight * fixed
            parts["fixed_k"] = fixed.detach()
        parts["active"] = (s >= THRESHOLD).float().sum(dim=1).mean().detach()
        return total, parts

    def _noisy(self, x: torch.Tensor) -> torch.Tensor:
        """Unit-norm rows plus Gaussian noise of expected norm ``input_noise``, re-normalised (the
        reconstruction target stays the clean row: a denoising regulariser for small fits)."""
        assert self.weights is not None
        noise = torch.randn_like(x) * (self.weights.input_noise / x.shape[1] ** 0.5)
        return F.normalize(x + noise, dim=1)

    def alignment_loss(self, s: torch.Tensor) -> torch.Tensor:
        """``1 - cos(s - eps, T - eps)`` with ``T = TopK_k(s)`` (values; detached unless configured) or,
        for ``target="ones"``, the 0/1 indicator of the top k (the ideal binary code)."""
        assert self.weights is not None
        mask = top_k_mask(s.detach(), self.weights.k)
        if self.weights.target == "ones":
            target = mask
        else:
            target = mask * (s.detach() if self.weights.detach_target else s)
        eps = self.weights.epsilon
        return cosine_distance(s - eps, target - eps)


class BSAFixedEncoder(nn.Module):
    """Fixed-mode encoder at one ``k`` (normalise → centre → matmul → sigmoid → topk), what ONNX export
    traces. Emits the stored layout of ``BinarySparseCodes``: sorted ``indices`` (n, k) when
    ``k`` indices take no more bytes than a bitmap, else the packed ``bitmap`` (n, ceil(h / 8))."""

    def __init__(self, model: BSAModel, k: int, *, bitmap: bool) -> None:
        super().__init__()
        self.model, self.k, self.bitmap = model, k, bitmap
        self.output_names = ("bitmap",) if bitmap else ("indices",)
        self.register_buffer("bit_weights", 2.0 ** torch.arange(7, -1, -1, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        s = self.model.activations(F.normalize(x, dim=1))
        idx = torch.topk(s, self.k, dim=1).indices
        if not self.bitmap:
            return (torch.sort(idx, dim=1).values,)
        h = s.shape[1]
        mask = torch.zeros_like(s).scatter(1, idx, 1.0)
        mask = F.pad(mask, (0, (-h) % 8))
        packed = (mask.reshape(mask.shape[0], -1, 8) * self.bit_weights).sum(dim=2)
        return (packed.to(torch.int32),)
