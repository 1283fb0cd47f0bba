"""Linear-algebra helpers shared by methods (PCA)."""

from __future__ import annotations

import torch

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
