"""Torch operations the code kinds use to put their storage form inside an exported (ONNX) graph."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from adaptemb.codes.base import index_dtype


def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """(n, h) 0/1 -> (n, ceil(h / 8)) uint8, most significant bit first (``np.packbits``)."""
    weights = 2.0 ** torch.arange(7, -1, -1, dtype=torch.float32, device=mask.device)
    padded = F.pad(mask.float(), (0, (-mask.shape[1]) % 8))
    return (padded.reshape(padded.shape[0], -1, 8) * weights).sum(dim=2).to(torch.uint8)


def torch_index_dtype(dim: int) -> torch.dtype:
    """The torch dtype of ``index_dtype(dim)`` (uint32 for anything wider than uint16)."""
    return {np.dtype(np.uint8): torch.uint8, np.dtype(np.uint16): torch.uint16}.get(index_dtype(dim), torch.uint32)
