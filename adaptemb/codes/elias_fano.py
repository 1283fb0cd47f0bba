"""Elias-Fano coding of a row's k sorted indices: about ``log2(dim / k) + 2`` bits an index, not ``log2 dim``.

A row's slots (indices in ``0 .. dim``, ``dim`` marking an empty slot) are sorted ascending; each splits into its
``low_bits`` lowest bits and its high part ``slot >> low_bits``. The low parts are stored as k fixed-width fields;
the high parts as one bitmap of ``k + (dim >> low_bits)`` bits with a 1 at ``high_i + i`` for the i-th slot (so the
i-th 1 sits after exactly ``high_i`` zeros). Every row has the same width, so codes keep a fixed number of bytes.

At k = 10 over dim = 1536 that is 7 + 1 + 12 / 10 = 9.2 bits an index against 11 fixed; at k = 32 over 3072,
6 + 1 + 48 / 32 = 8.5 against 12. ``low_bits_for`` picks the width of fewest bits; packing is plain torch (it exports to ONNX),
unpacking numpy.
"""

from __future__ import annotations

import numpy as np
import torch


def coded_bits(k: int, dim: int, low_bits: int) -> int:
    """Bits of k slots over ``0 .. dim`` coded with ``low_bits`` low bits: k low fields and the high-part bitmap."""
    return k * low_bits + bitmap_bits(k, dim, low_bits)


def bitmap_bits(k: int, dim: int, low_bits: int) -> int:
    """Bits of the high-part bitmap: k ones and at most ``dim >> low_bits`` zeros before the last one."""
    return k + (int(dim) >> low_bits)


def low_bits_for(k: int, dim: int) -> int:
    """The low-part width (1 .. bit length of ``dim``) of fewest coded bits (ties: the wider low part)."""
    widths = range(1, int(dim).bit_length() + 1)
    return min(widths, key=lambda bits: (coded_bits(k, dim, bits), -bits))


def split_slots(slots: torch.Tensor, extra: torch.Tensor, dim: int, low_bits: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(low parts (n, k), high-part bitmap (n, k + (dim >> low_bits)), ``extra`` in the sorted slots' order) of (n, k)
    integer ``slots``; ``extra`` (n, k) travels with its slot (a value's level). Plain torch ops: exports to ONNX."""
    ordered, order = torch.sort(slots.long(), dim=1)
    step = 2**low_bits
    high = torch.div(ordered, step, rounding_mode="floor")
    positions = high + torch.arange(slots.shape[1], device=slots.device)
    bitmap = torch.zeros(slots.shape[0], bitmap_bits(slots.shape[1], dim, low_bits), dtype=torch.long,
                         device=slots.device).scatter(1, positions, torch.ones_like(positions))
    return ordered - high * step, bitmap, torch.gather(extra.long(), 1, order)


def join_slots(low: np.ndarray, bitmap: np.ndarray, low_bits: int) -> np.ndarray:
    """The (n, k) int64 sorted slots of their low parts (n, k) and high-part bitmaps (n, width) 0/1; a bitmap that does
    not hold exactly k ones (a damaged row) is a ``ValueError`` naming the row."""
    n, k = low.shape
    counts = np.count_nonzero(bitmap, axis=1)
    if (counts != k).any():
        row = int(np.flatnonzero(counts != k)[0])
        raise ValueError(f"row {row}'s Elias-Fano index bitmap holds {int(counts[row])} entries, not k={k}: the codes "
                         "are damaged")
    _, ones = np.nonzero(bitmap)
    high = ones.reshape(n, k) - np.arange(k)
    return (high << low_bits) | low
