"""The BSA autoencoder: sigmoid encoder and linear decoder, the torch module ``encode`` needs.

Nothing for training lives here: the objective (losses, their weights, noise, dropout) is in ``bsa/compressor.py``.
The encode path uses plain torch ops only (matmul, sigmoid, topk, comparisons) so it exports to ONNX.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from adaptemb import BinarySparseCodes, has_direction, unit_rows

THRESHOLD = 0.5
"""A feature is active when ``s >= THRESHOLD`` (natural mode and training alike)."""
STATE_NAMES = ("encoder", "encoder_bias", "center", "decoder", "decoder_bias")


class BSAModel(nn.Module):
    """``s = sigmoid(W_enc (x - m) + b_enc)``, binary code ``b = 1[s >= 0.5]``, ``x_hat = b @ D + c``.

    ``m`` (``center``, a buffer) is the mean of the fit rows when centring is on, else zero.
    ``D`` (h, d) holds one decoder row per feature, so a binary code decodes to the sum of the rows
    of its active features plus the bias ``c`` (learned when ``decoder_bias``, else fixed at zero).
    """

    def __init__(self, dim: int, h: int, *, decoder_bias: bool, generator: torch.Generator) -> None:
        super().__init__()
        # random unit directions; ``calibrate`` sets their scale on the fit rows
        self.encoder = nn.Parameter(F.normalize(torch.randn(h, dim, generator=generator), dim=1))
        self.decoder = nn.Parameter(torch.randn(h, dim, generator=generator) / h**0.5)
        self.encoder_bias = nn.Parameter(torch.zeros(h))
        self.decoder_bias = nn.Parameter(torch.zeros(dim), requires_grad=decoder_bias)
        self.register_buffer("center", torch.zeros(dim))

    @classmethod
    def from_state(cls, tensors: dict[str, torch.Tensor], *, decoder_bias: bool) -> BSAModel:
        """Rebuild from ``state()`` tensors."""
        encoder, decoder = tensors["encoder"], tensors["decoder"]
        if encoder.ndim != 2 or decoder.shape != encoder.shape:
            raise ValueError(f"encoder {tuple(encoder.shape)} and decoder {tuple(decoder.shape)} must both be (h, d)")
        h, dim = encoder.shape
        model = cls(dim, h, decoder_bias=decoder_bias, generator=torch.Generator())
        with torch.no_grad():
            for name in STATE_NAMES:
                getattr(model, name).copy_(tensors[name])
        return model.eval()

    def state(self) -> dict[str, torch.Tensor]:
        """The tensors that fully determine the model (what is saved)."""
        return {name: getattr(self, name).detach() for name in STATE_NAMES}

    @property
    def h(self) -> int:
        return self.encoder.shape[0]

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


class BSAFixedEncoder(nn.Module):
    """Fixed-mode encoder at one ``k`` (normalise → centre → matmul → sigmoid → topk), what ONNX export
    traces. Emits the storage form of ``BinarySparseCodes`` for rows of k active features (``layout``, from
    ``BinarySparseCodes.fixed_layout``): ``packed`` rows of the sorted indices (``BinarySparseCodes.pack_slots``)
    or the packed ``bitmap`` (n, ceil(h / 8)). An all-zero row (no direction) has the empty set: k empty slots
    (the value h), or an all-zero bitmap."""

    def __init__(self, model: BSAModel, k: int, *, layout: str) -> None:
        super().__init__()
        if layout not in ("packed", "bitmap"):
            raise ValueError(f"a fixed-mode encoder emits 'packed' rows or a 'bitmap'; got layout={layout!r}")
        self.model, self.k, self.layout = model, k, layout
        self.output_names = (layout,)
        self.register_buffer("bit_weights", 2.0 ** torch.arange(7, -1, -1, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        s = self.model.activations(unit_rows(x))
        idx = torch.topk(s, self.k, dim=1).indices
        live = has_direction(x)
        h = s.shape[1]
        if self.layout == "packed":
            slots = torch.where(live, torch.sort(idx, dim=1).values, torch.full_like(idx, h))
            return (BinarySparseCodes.pack_slots(slots, h),)
        mask = torch.zeros_like(s).scatter(1, idx, 1.0) * live
        mask = F.pad(mask, (0, (-h) % 8))
        packed = (mask.reshape(mask.shape[0], -1, 8) * self.bit_weights).sum(dim=2)
        return (packed.to(torch.uint8),)
