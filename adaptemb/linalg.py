"""Linear-algebra helpers shared by methods (PCA, scale-safe row normalisation)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

_GRAM_BLOCK_ROWS = 65536


def principal_components(x: torch.Tensor, count: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact PCA of the rows of ``x`` (n, d): (mean (d,), components (count, d), variances (count,)).

    Components are eigenvectors of the covariance computed in float64 (streamed over row blocks, so
    memory is O(d²)), strongest first, each with its largest-magnitude entry positive so results do
    not depend on the eigen-solver's sign choice. ``count`` defaults to d.
    """
    n, d = x.shape
    count = d if count is None else count
    if not 1 <= count <= d:
        raise ValueError(f"count must be between 1 and d={d}; got {count}")
    mean = x.double().mean(dim=0)
    gram = torch.zeros(d, d, dtype=torch.float64)
    for start in range(0, n, _GRAM_BLOCK_ROWS):
        block = x[start : start + _GRAM_BLOCK_ROWS].double() - mean
        gram += block.T @ block
    eigenvalues, eigenvectors = torch.linalg.eigh(gram)
    order = torch.argsort(eigenvalues, descending=True)[:count]
    components = eigenvectors[:, order].T
    pivot = components.abs().argmax(dim=1)
    components = components * torch.sign(components[torch.arange(count), pivot])[:, None]
    variances = eigenvalues[order].clamp_min(0) / max(n - 1, 1)
    return mean.float(), components.float().contiguous(), variances.float()


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    """L2-normalise the rows of ``x`` (…, d) whatever their scale.

    Each row is first divided by its largest magnitude, so the squared norm can neither overflow (rows
    of 1e30) nor underflow (rows of 1e-30): a row and any positive multiple of it get the same unit row.
    An all-zero row has no direction and stays all zero (never NaN), here and in an exported graph; methods
    that encode directions give it the empty code of their kind (see ``has_direction``). Plain torch ops,
    so encoders that use it export to ONNX.
    """
    peak = x.abs().amax(dim=-1, keepdim=True)
    scaled = x / torch.where(peak > 0, peak, torch.ones_like(peak))
    return F.normalize(scaled, dim=-1)


def has_direction(x: torch.Tensor) -> torch.Tensor:
    """A (…, 1) boolean mask, True for the rows of ``x`` (…, d) that are not all zero: the rows that have a
    direction. Methods that encode directions (``Compressor.normalizes_rows``) multiply what their encoder
    emits by it (or mask their active set with it), so an all-zero row gets the empty code of their kind
    (zero values, no active features) whatever biases the encoder adds after ``unit_rows``. Plain torch ops
    (a max and a comparison), so it exports to ONNX."""
    return x.abs().amax(dim=-1, keepdim=True) > 0
