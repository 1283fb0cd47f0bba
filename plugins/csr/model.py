"""The CSR TopK sparse autoencoder: the torch module ``encode`` needs, and nothing for training.

Encoder ``z = ReLU(TopK_k(W_enc (n(x) − b_pre) + b_enc))`` where ``n`` is the input normalisation
(L2, standardisation or none); decoder ``x̂ = W_dec z + b_pre`` with ``W_dec`` either tied to ``W_enc``
(the CSR paper) or a separate matrix of unit-norm latent directions (OpenAI's TopK SAE). Weights are
(h, d) matrices: row ``i`` is latent ``i``'s direction. The training objective lives in ``csr/objective.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from adaptemb import has_direction, unit_rows

NORMALIZATIONS = ("l2", "none", "standardize")
ENCODE_BLOCK = 1 << 24
"""Pre-activation floats per encode block (64 MB in float32)."""


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


class CSRModel(nn.Module):
    """TopK sparse autoencoder with input normalisation, pre-bias, encoder bias and a tied or untied decoder.

    ``shift`` and ``scale`` (buffers) standardise inputs when ``normalize="standardize"`` (zeros and ones
    otherwise); ``decode`` maps back to the input space, undoing them.
    """

    def __init__(self, directions: torch.Tensor, pre_bias: torch.Tensor, *, tied: bool, normalize: str,
                 shift: torch.Tensor, scale: torch.Tensor) -> None:
        super().__init__()
        if normalize not in NORMALIZATIONS:
            raise ValueError(f"unknown normalisation {normalize!r}; use one of {', '.join(NORMALIZATIONS)}")
        hidden, dim = directions.shape
        if pre_bias.shape != (dim,) or shift.shape != (dim,) or scale.shape != (dim,):
            raise ValueError(f"pre_bias, shift and scale must each have shape ({dim},) for a (h={hidden}, d={dim}) encoder")
        self.normalize = normalize
        self.pre_bias = nn.Parameter(pre_bias.clone().float())
        self.enc_bias = nn.Parameter(torch.zeros(hidden))
        self.enc_weight = nn.Parameter(directions.clone().float())
        self.dec_weight = None if tied else nn.Parameter(F.normalize(directions.clone().float(), dim=1))
        self.register_buffer("shift", shift.clone().float())
        self.register_buffer("scale", scale.clone().float())
        self.query_map: nn.Parameter | None = None

    def add_query_map(self, initial: torch.Tensor | None = None) -> None:
        """Give queries their own linear map ``q + M q`` (normalised rows; ``M`` starts at zero: the identity), which
        a supervised fine-tune learns from pairs; documents never pass through it."""
        dim = self.pre_bias.numel()
        self.query_map = nn.Parameter(torch.zeros(dim, dim) if initial is None else initial.clone().float())

    @classmethod
    def from_state(cls, tensors: dict[str, torch.Tensor], *, normalize: str) -> CSRModel:
        """Rebuild from ``state()`` tensors (a separate decoder when ``dec_weight`` is present)."""
        weight = tensors["enc_weight"].float()
        if weight.ndim != 2:
            raise ValueError(f"csr enc_weight must be a (h, d) matrix; got shape {tuple(weight.shape)}")
        hidden = weight.shape[0]
        if tensors["enc_bias"].shape != (hidden,):
            raise ValueError(f"csr enc_bias must have shape ({hidden},); got {tuple(tensors['enc_bias'].shape)}")
        model = cls(weight, tensors["pre_bias"], tied="dec_weight" not in tensors, normalize=normalize,
                    shift=tensors["shift"], scale=tensors["scale"])
        if "query_map" in tensors:
            if tensors["query_map"].shape != (weight.shape[1],) * 2:
                raise ValueError(f"csr query_map must have shape {(weight.shape[1],) * 2}")
            model.add_query_map(tensors["query_map"])
        with torch.no_grad():
            model.enc_bias.copy_(tensors["enc_bias"])
            if model.dec_weight is not None:
                if tensors["dec_weight"].shape != weight.shape:
                    raise ValueError(f"csr dec_weight must have shape {tuple(weight.shape)}")
                model.dec_weight.copy_(tensors["dec_weight"])
        return model.eval()

    def state(self) -> dict[str, torch.Tensor]:
        """The tensors that, with ``normalize``, fully determine the model (what is saved)."""
        tensors = {"enc_weight": self.enc_weight, "enc_bias": self.enc_bias, "pre_bias": self.pre_bias,
                   "shift": self.shift, "scale": self.scale}
        if self.dec_weight is not None:
            tensors["dec_weight"] = self.dec_weight
        if self.query_map is not None:
            tensors["query_map"] = self.query_map
        return {name: t.detach() for name, t in tensors.items()}

    @property
    def hidden(self) -> int:
        return self.enc_bias.numel()

    @property
    def tied(self) -> bool:
        return self.dec_weight is None

    @property
    def decoder(self) -> torch.Tensor:
        """The (h, d) decoder directions (the encoder's when tied)."""
        return self.enc_weight if self.dec_weight is None else self.dec_weight

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """The input normalisation: unit rows (``l2``) or ``(x − shift) / scale``."""
        if self.normalize == "l2":
            return unit_rows(x)
        return (x - self.shift) / self.scale

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """``W_enc (x − b_pre) + b_enc`` for a batch of normalised rows."""
        return (x - self.pre_bias) @ self.enc_weight.T + self.enc_bias

    def query_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised query rows through the query map (``x + M x``), or as they are without one."""
        return x if self.query_map is None else x + x @ self.query_map.T

    def query_pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """The encoder pre-activations of normalised query rows, through the query map."""
        return self.pre_activations(self.query_rows(x))

    def sparse_codes(self, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Values (ReLU'd, descending) and indices of the top-k latents of normalised rows."""
        values, indices = torch.topk(self.pre_activations(x), k, dim=1)
        return torch.relu(values), indices

    def dense_codes(self, x: torch.Tensor, k: int) -> torch.Tensor:
        """The k-sparse codes of normalised rows as dense (B, h) rows (zeros off the top k)."""
        values, indices = self.sparse_codes(x, k)
        return torch.zeros(len(x), self.hidden, dtype=values.dtype, device=values.device).scatter(1, indices, values)

    def decode_dense(self, z: torch.Tensor) -> torch.Tensor:
        """``W_dec z + b_pre`` for dense (B, h) codes, in the normalised space."""
        return z @ self.decoder.to(z.dtype) + self.pre_bias.to(z.dtype)

    def decode_sparse(self, indices: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """``Σ_j values_j · W_dec[indices_j]`` (no bias): costs B·k·d, not B·h·d as a dense product."""
        weight = self.decoder
        return F.embedding_bag(indices, weight, per_sample_weights=values.to(weight.dtype), mode="sum")

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Reconstructions of dense (B, h) codes in the input space."""
        return self.decode_dense(z) * self.scale + self.shift

    def project_queries(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W_dec (σ ⊙ q), <q, σ ⊙ b_pre + μ>)``: then ``<q, decode(z)> = <first, z> + second``."""
        q = self.query_rows(q)
        return (q * self.scale) @ self.decoder.T, q @ (self.pre_bias * self.scale + self.shift)


class CSREncoder(nn.Module):
    """The inference encoder at a fixed k (normalise → matmul → topk → relu): what ONNX export traces. With L2
    normalisation an all-zero row, which has no direction, keeps k entries whose values are all zero (the biases
    would otherwise give it the code of the pre-bias)."""

    output_names = ("indices", "values")

    def __init__(self, model: CSRModel, k: int, *, value_dtype: torch.dtype) -> None:
        super().__init__()
        self.model, self.k, self.value_dtype = model, k, value_dtype

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = self.model.sparse_codes(self.model.normalise(x), self.k)
        if self.model.normalize == "l2":
            values = values * has_direction(x)
        return indices, values.to(self.value_dtype)


class PackedCSREncoder(nn.Module):
    """``CSREncoder`` then ``PackedSparseCodes.packer``: rows in, packed codes out (``packed``, uint8 (n, width))."""

    output_names = ("packed",)

    def __init__(self, encoder: CSREncoder, packer: nn.Module) -> None:
        super().__init__()
        self.encoder, self.packer = encoder, packer
        self.value_bits: int = packer.value_bits

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (self.packer(*self.encoder(x)),)


def row_blocks(x: torch.Tensor, hidden: int) -> list[torch.Tensor]:
    """``x`` in consecutive blocks of rows whose (rows, ``hidden``) pre-activations hold at most ``ENCODE_BLOCK`` floats."""
    rows = max(1, ENCODE_BLOCK // max(hidden, 1))
    return [x[i : i + rows] for i in range(0, len(x), rows)]
