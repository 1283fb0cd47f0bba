"""How each code kind comes out of an exported encoder: the storage arrays, computed inside the graph.

A composed encoder (``adaptemb.export_encoder``) emits codes in their storage form, which each code kind
declares itself (``Codes.onnx_outputs``, ``Codes.onnx_graph``, ``Codes.onnx_arrays``): ``indices`` +
``values`` for sparse codes, ``bits`` for packed bit codes, ``codes`` for int8 and dense codes; a kind that
declares none keeps the head's own outputs. ``StorageHead`` wraps a compressor's ``encoder(k)`` so its
outputs take that form; ``storage_arrays`` gives the same arrays from ``encode``'s codes, for the parity check.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from adaptemb.codes import Codes


class StorageHead(torch.nn.Module):
    """A compressor's ``encoder(k)`` with its outputs in the storage form of its code kind."""

    def __init__(self, head: torch.nn.Module, kind: str, dim: int) -> None:
        super().__init__()
        self.head, self.kind, self.dim = head, kind, dim
        self.form = Codes.for_kind(kind)
        self.output_names = self.form.onnx_outputs or tuple(head.output_names)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.form.onnx_graph(dict(zip(self.head.output_names, self.head(x))), self.dim)


def storage_arrays(codes: Codes, head_outputs: Sequence[str]) -> dict[str, np.ndarray]:
    """The arrays an exported encoder emits for ``codes`` (``Codes.onnx_arrays``)."""
    return codes.onnx_arrays(head_outputs)
