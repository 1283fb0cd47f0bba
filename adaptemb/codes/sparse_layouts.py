"""The three layouts of a collection of active-index sets (``BinarySparseCodes``): their sizes, packing and unpacking.

``"packed"`` (rows of one width, sorted indices at ``index_bits(dim)`` bits, then the empty slot ``dim``),
``"ragged"`` (per-row counts, each row's indices in its own whole bytes) and ``"bitmap"`` (one bit per feature),
as ``adaptemb.codes.binary_sparse`` describes them; built a block of rows at a time (``BLOCK_BITS``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from adaptemb.codes.base import index_dtype
from adaptemb.codes.packed_sparse import index_bits, pack_fields, unpack_fields

LAYOUTS = ("packed", "ragged", "bitmap")
"""The layouts, in the order that breaks ties of size."""
BLOCK_BITS = 1 << 22
"""Index bits unpacked (or packed) at a time: bounds the temporary arrays to a few tens of MB."""


def packed_width(k: int, dim: int) -> int:
    """Bytes of a ``"packed"`` row with room for ``k`` indices (at least one slot) over ``dim`` features."""
    return -(-max(int(k), 1) * index_bits(dim) // 8)


def pack_slots(slots: torch.Tensor, dim: int) -> torch.Tensor:
    """(n, k) integer slots (each row's sorted indices, then ``dim`` for an empty slot) as ``"packed"`` rows:
    (n, ``packed_width(k, dim)``) uint8, the width's remaining slots empty. Plain torch ops: it exports to ONNX."""
    capacity = 8 * packed_width(slots.shape[1], dim) // index_bits(dim)
    slots = F.pad(slots.long(), (0, capacity - slots.shape[1]), value=dim)
    return pack_fields([(slots, index_bits(dim))])


def unpack_slots(packed: np.ndarray, dim: int, count: int | None = None) -> np.ndarray:
    """The first ``count`` slots (default: all the width holds) of (n, w) packed rows, int64 (n, count)."""
    bits = index_bits(dim)
    count = 8 * packed.shape[1] // bits if count is None else count
    step = max(1, BLOCK_BITS // max(count * bits, 1))
    parts = [unpack_fields(packed[s : s + step], [(count, bits)])[0] for s in range(0, len(packed), step)]
    return np.concatenate(parts) if parts else np.zeros((0, count), np.int64)


def fixed_layout(k: int, dim: int) -> str:
    """The layout of rows of ``k`` active features each (or none): ``"packed"``, or ``"bitmap"`` when smaller."""
    return "packed" if packed_width(k, dim) <= (dim + 7) // 8 else "bitmap"


def layout_nbytes(counts: np.ndarray, dim: int) -> dict[str, int]:
    """Bytes each layout takes for rows of these ``counts`` over ``dim`` features."""
    counts = np.asarray(counts, dtype=np.int64)
    n, most = len(counts), int(counts.max(initial=0))
    ragged = int((-(-counts * index_bits(dim) // 8)).sum()) + n * index_dtype(most + 1).itemsize
    return {"packed": n * packed_width(most, dim), "ragged": ragged, "bitmap": n * ((dim + 7) // 8)}


def smallest_layout(counts: np.ndarray, dim: int) -> str:
    """The layout of fewest bytes for rows of these ``counts`` (ties: the first of ``LAYOUTS``)."""
    sizes = layout_nbytes(counts, dim)
    return min(LAYOUTS, key=sizes.__getitem__)


def row_slots(indptr: np.ndarray, indices: np.ndarray, room: int, fill: int) -> np.ndarray:
    """(n, room) int64: each row's indices, then ``fill``."""
    n = len(indptr) - 1
    slots = np.full((n, room), fill, dtype=np.int64)
    rows = np.repeat(np.arange(n), np.diff(indptr))
    slots[rows, np.arange(len(indices)) - indptr[rows]] = indices
    return slots


def row_blocks(indptr: np.ndarray, room: int, dim: int) -> Iterator[tuple[int, int]]:
    step = max(1, BLOCK_BITS // (max(room, 1) * index_bits(dim)))
    for start in range(0, len(indptr) - 1, step):
        yield start, min(start + step, len(indptr) - 1)


def packed_rows(indptr: np.ndarray, indices: np.ndarray, dim: int, room: int) -> np.ndarray:
    """``"packed"`` rows (``pack_slots``) with room for ``room`` indices each."""
    out = np.empty((len(indptr) - 1, packed_width(room, dim)), np.uint8)
    for start, stop in row_blocks(indptr, room, dim):
        part = indptr[start : stop + 1]
        slots = row_slots(part - part[0], indices[part[0] : part[-1]], max(room, 1), dim)
        with torch.no_grad():
            out[start:stop] = pack_slots(torch.from_numpy(slots), dim).numpy()
    return out


def ragged_rows(indptr: np.ndarray, indices: np.ndarray, dim: int) -> np.ndarray:
    """``"ragged"`` rows: each row's indices packed into its own whole bytes, rows one after another."""
    counts = np.diff(indptr)
    parts = []
    for start, stop in row_blocks(indptr, int(counts.max(initial=1)), dim):
        part = indptr[start : stop + 1]
        room = int(counts[start:stop].max(initial=1)) or 1
        slots = row_slots(part - part[0], indices[part[0] : part[-1]], room, 0)
        with torch.no_grad():
            rows = pack_fields([(torch.from_numpy(slots), index_bits(dim))]).numpy()
        widths = -(-counts[start:stop] * index_bits(dim) // 8)
        parts.append(rows[np.arange(rows.shape[1]) < widths[:, None]])
    return np.concatenate(parts) if parts else np.zeros(0, np.uint8)


def bitmap_rows(indptr: np.ndarray, indices: np.ndarray, dim: int) -> np.ndarray:
    """(n, ceil(dim / 8)) uint8 bitmaps, built a block of rows at a time (one bool block, never floats)."""
    out = np.empty((len(indptr) - 1, (dim + 7) // 8), dtype=np.uint8)
    step = max(1, BLOCK_BITS // dim)
    for start in range(0, len(out), step):
        stop = min(start + step, len(out))
        lo, hi = indptr[start], indptr[stop]
        mask = np.zeros((stop - start, dim), dtype=bool)
        mask[np.repeat(np.arange(stop - start), np.diff(indptr[start : stop + 1])), indices[lo:hi]] = True
        out[start:stop] = np.packbits(mask, axis=1)
    return out


def graph_slots(packed: torch.Tensor, dim: int) -> torch.Tensor:
    """Inside an exported graph: the slots (n, ⌊8 w / index_bits⌋) int64 of (n, w) ``"packed"`` rows."""
    bits = index_bits(dim)
    count = 8 * int(packed.shape[1]) // bits
    bytes_first = 2 ** torch.arange(7, -1, -1, device=packed.device)
    stream = torch.remainder(torch.div(packed.long().unsqueeze(-1), bytes_first, rounding_mode="floor"), 2).flatten(1)
    fields = stream[:, : count * bits].reshape(-1, count, bits)
    return (fields * 2 ** torch.arange(bits - 1, -1, -1, device=packed.device)).sum(dim=2)
