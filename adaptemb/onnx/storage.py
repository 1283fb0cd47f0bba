"""How each code kind comes out of an exported encoder: the storage arrays, computed inside the graph.

A composed encoder (``adaptemb.export_encoder``) emits codes in their storage form (``STORAGE_FORMS``):
``indices`` + ``values`` for sparse codes, ``bits`` for packed bit codes, ``codes`` for int8 and dense
codes. ``StorageHead`` wraps a compressor's ``encoder(k)`` so its outputs take that form;
``storage_arrays`` gives the same arrays from ``encode``'s codes, for the parity check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from adaptemb.codes import Codes, index_dtype
from adaptemb.errors import UnsupportedExportError


class _Storage:
    """How one code kind's storage arrays come out of the composed graph."""

    def __init__(
        self,
        outputs: tuple[str, ...],
        graph: Callable[[dict[str, torch.Tensor], int], tuple[torch.Tensor, ...]],
        arrays: Callable[[Codes], dict[str, np.ndarray]],
    ) -> None:
        self.outputs, self.graph, self.arrays = outputs, graph, arrays


def _sparse_arrays(codes: Codes) -> dict[str, np.ndarray]:
    arrays = codes.to_arrays()
    if "counts" in arrays:
        raise UnsupportedExportError("sparse codes with a variable count per row (ragged) cannot be exported")
    return {"indices": arrays["indices"], "values": arrays["values"]}


def _pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """(n, h) 0/1 -> (n, ceil(h / 8)) uint8, most significant bit first (``np.packbits``)."""
    weights = 2.0 ** torch.arange(7, -1, -1, dtype=torch.float32, device=mask.device)
    padded = F.pad(mask.float(), (0, (-mask.shape[1]) % 8))
    return (padded.reshape(padded.shape[0], -1, 8) * weights).sum(dim=2).to(torch.uint8)


def _binary_sparse_bits(outs: dict[str, torch.Tensor], dim: int) -> tuple[torch.Tensor, ...]:
    if "bitmap" in outs:
        return (outs["bitmap"].to(torch.uint8),)
    indices = outs["indices"].long()  # -1 in every slot of a row with no active feature (an all-zero embedding)
    mask = torch.zeros(indices.shape[0], dim, dtype=torch.float32, device=indices.device)
    return (_pack_bits(mask.scatter(1, indices.clamp_min(0), (indices >= 0).float())),)


def _torch_index_dtype(dim: int) -> torch.dtype:
    return {np.dtype(np.uint8): torch.uint8, np.dtype(np.uint16): torch.uint16}.get(index_dtype(dim), torch.uint32)


STORAGE_FORMS: dict[str, _Storage] = {
    "dense": _Storage(("codes",), lambda o, d: (o["values"],), lambda c: {"codes": c.to_arrays()["values"]}),
    "sparse": _Storage(
        ("indices", "values"),
        lambda o, d: (o["indices"].to(_torch_index_dtype(d)), o["values"]),
        _sparse_arrays,
    ),
    "binary": _Storage(("bits",), lambda o, d: (o["packed"].to(torch.uint8),), lambda c: {"bits": c.to_arrays()["packed"]}),
    "int8": _Storage(("codes",), lambda o, d: (o["codes"],), lambda c: {"codes": c.to_arrays()["codes"]}),
    "binary_sparse": _Storage(
        ("bits",), _binary_sparse_bits, lambda c: {"bits": np.packbits(c.to_dense() > 0, axis=1)}
    ),
}
"""Storage form of each code kind in an exported encoder: output names, the conversion of the head's
outputs inside the graph (given the code dimension), and the same arrays from ``encode``'s codes. A kind
not listed keeps the head's own outputs (``encoder(k).output_names``, arrays of ``to_arrays()``)."""


class StorageHead(torch.nn.Module):
    """A compressor's ``encoder(k)`` with its outputs in the storage form of its code kind."""

    def __init__(self, head: torch.nn.Module, kind: str, dim: int) -> None:
        super().__init__()
        self.head, self.kind, self.dim = head, kind, dim
        form = STORAGE_FORMS.get(kind)
        self.output_names = form.outputs if form is not None else tuple(head.output_names)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = dict(zip(self.head.output_names, self.head(x)))
        form = STORAGE_FORMS.get(self.kind)
        return form.graph(outs, self.dim) if form is not None else tuple(outs.values())


def storage_arrays(codes: Codes, head_outputs: Sequence[str]) -> dict[str, np.ndarray]:
    """The arrays an exported encoder emits for ``codes`` (``STORAGE_FORMS``, else the head's own)."""
    form = STORAGE_FORMS.get(codes.kind)
    if form is not None:
        return form.arrays(codes)
    arrays = codes.to_arrays()
    return {name: arrays[name] for name in head_outputs}
