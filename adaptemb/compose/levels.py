"""Two bits per rotated dimension before a sign-bit quantiser, stored as two sign planes.

A 2-bit code of rank r keeps, for each rotated coordinate z_j, its sign and whether |z_j| exceeds a threshold
t_j: four levels ``±inner_j``, ``±outer_j`` (Lloyd-Max levels of the fit rows' |z_j|, from the Gaussian's
0.4528 / 1.5104 sigma at t = 0.9816 sigma). Written as ±1 planes, the level is ``s1 * (mid + half * s2)`` with
``s1 = sign(z)``, ``s2 = sign(|z| - t)``, ``mid = (inner + outer) / 2`` and ``half = (outer - inner) / 2``, so

    <q, level> = <mid * q, s1> + <half * q, s1 * s2>

The documents are the 2r values ``[z, sign(z) * (|z| - t)]``, whose signs are exactly ``[s1, s1 * s2]``: a
sign-bit quantiser (binary) codes them as 2r bits, and a float query lifted to ``[mid * q, half * q]`` scores
them with the same inner product as 1-bit codes, through the same index. So a 2-bit stage of rank r is a code
of width 2r, the width of the 1-bit stage of rank 2r: one byte budget, one stage (the composition keeps the
1-bit stage up to the full rank, see ``adaptemb.compose.choice``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from adaptemb.compose.rotation import Rotation
from adaptemb.ranking import exact_top_k, neighbour_recall_at_k, top_k

GAUSSIAN_LEVELS = (0.4528, 0.9816, 1.5104)
"""Lloyd-Max quantiser of a unit Gaussian with four levels: inner level, threshold, outer level (in sigmas)."""
LLOYD_ROUNDS = 25
"""Lloyd iterations from the Gaussian levels on the fit rows' |z_j| (each dimension on its own)."""
CHOICE_TOP = 10
"""The k of the recall that judges a composition's candidates by a query sample (``adaptemb.compose.query_choice``)."""


@dataclass(frozen=True)
class SignMagnitude:
    """A rotation (or none) followed by the 2-bit lift: ``documents`` gives the 2r values whose signs are the
    code's two planes, ``queries`` the 2r float values that score them. ``query_shift`` (r,), when set, is added to
    projected queries first: the projection of the zero row, negated (``adaptemb.compose.choice``), so that an
    affine projection's float query is scored uncentred, ``<q, x>`` up to a document-independent shift (files from
    before it hold none: the query is then centred like the documents)."""

    rotation: Rotation | None
    threshold: torch.Tensor
    inner: torch.Tensor
    outer: torch.Tensor
    query_shift: torch.Tensor | None = None

    def documents(self, y: torch.Tensor) -> torch.Tensor:
        return lift(y if self.rotation is None else self.rotation.documents(y), self.threshold)

    def queries(self, y: torch.Tensor) -> torch.Tensor:
        q = stage_queries(y, self.query_shift, self.rotation)
        return torch.cat([q * (self.inner + self.outer) / 2, q * (self.outer - self.inner) / 2], dim=1)

    def tensors(self) -> dict[str, torch.Tensor]:
        own = {"levels.threshold": self.threshold, "levels.inner": self.inner, "levels.outer": self.outer}
        if self.query_shift is not None:
            own["levels.query_shift"] = self.query_shift
        return (self.rotation.tensors() if self.rotation else {}) | own

    @staticmethod
    def from_tensors(tensors: dict[str, torch.Tensor], rank: int, rotation: Rotation | None) -> SignMagnitude:
        """The levels saved by ``tensors()``; ``ValueError`` for a missing, wrong-shaped or unordered one."""
        levels = {}
        for name in ("threshold", "inner", "outer"):
            tensor = tensors.get(f"levels.{name}")
            if tensor is None or tuple(tensor.shape) != (rank,):
                got = "missing" if tensor is None else tuple(tensor.shape)
                raise ValueError(f"a rank-{rank} 2-bit stage needs levels.{name} ({rank},); got {got}")
            levels[name] = tensor.float().contiguous()
        if not bool(((levels["inner"] >= 0) & (levels["inner"] <= levels["outer"])).all()):
            raise ValueError(f"the rank-{rank} 2-bit stage's levels must satisfy 0 <= inner <= outer")
        return SignMagnitude(rotation, **levels, query_shift=stored_query_shift(tensors, "levels.query_shift", rank, 2))


def stage_queries(y: torch.Tensor, query_shift: torch.Tensor | None, rotation: Rotation | None) -> torch.Tensor:
    """Projected queries ``y`` as a multi-bit stage scores them: shifted by its ``query_shift`` (when set) and
    rotated without the centring."""
    y = y if query_shift is None else y + query_shift
    return y if rotation is None else rotation.queries(y)


def stored_query_shift(tensors: dict[str, torch.Tensor], key: str, rank: int, bits: int) -> torch.Tensor | None:
    """A rank-``rank`` ``bits``-bit stage's saved query shift under ``key`` (None in files from before it);
    ``ValueError`` for a shape other than (rank,)."""
    shift = tensors.get(key)
    if shift is not None and tuple(shift.shape) != (rank,):
        raise ValueError(f"a rank-{rank} {bits}-bit stage's {key} must be ({rank},); got {tuple(shift.shape)}")
    return None if shift is None else shift.float().contiguous()


def lift(z: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """Rotated rows (n, r) as the 2r values whose signs are the 2-bit code's planes ``[sign(z), sign(z) *
    sign(|z| - threshold)]`` (what the ONNX head computes too)."""
    return torch.cat([z, torch.sign(z) * (z.abs() - threshold)], dim=1)


def fit_levels(z: torch.Tensor, rotation: Rotation | None, query_shift: torch.Tensor | None = None) -> SignMagnitude:
    """Per-dimension Lloyd-Max levels of rotated fit rows ``z`` (n, r): ``LLOYD_ROUNDS`` alternations of the
    threshold (midway between the levels) and each level (the mean |z_j| on its side), from the Gaussian's."""
    magnitude = z.abs().double()
    sigma = z.double().pow(2).mean(dim=0).sqrt().clamp_min(1e-12)
    inner, threshold, outer = (sigma * level for level in GAUSSIAN_LEVELS)
    for _ in range(LLOYD_ROUNDS):
        above = magnitude > threshold
        count = above.sum(dim=0)
        inner = torch.where(count < len(z), (magnitude * ~above).sum(dim=0) / (len(z) - count).clamp_min(1), inner)
        outer = torch.where(count > 0, (magnitude * above).sum(dim=0) / count.clamp_min(1), outer)
        threshold = (inner + outer) / 2
    return SignMagnitude(rotation, threshold.float(), inner.float(), outer.float(), query_shift)


def neighbour_recall(scores: np.ndarray, exact: np.ndarray) -> float:
    """Mean over queries of |the top-``CHOICE_TOP`` of ``scores`` (q, n) ∩ ``exact`` (q, CHOICE_TOP)| / CHOICE_TOP."""
    return float(neighbour_recall_at_k(top_k(scores, CHOICE_TOP)[1], exact, CHOICE_TOP).mean())


def exact_neighbours(queries: torch.Tensor, documents: torch.Tensor) -> np.ndarray:
    """(q, CHOICE_TOP) ids of the documents with the largest inner product with each float query."""
    return exact_top_k(queries.numpy(), documents.numpy(), CHOICE_TOP)


def widths_beyond_full_rank(budgets: list[float], ranks: list[int], full_bytes: float,
                            width_bytes: Callable[[int], float], max_bits: int = 2) -> list[int]:
    """The multi-bit widths that fill byte budgets above the full rank's 1-bit code (``full_bytes``): for each such
    budget, b times the largest rank whose b-bit code (``width_bytes(b r)``) fits it, with b r above (b - 1) times the
    full rank, for the most bits b <= ``max_bits`` that has one: bits grow only where the rank runs out again (e.g.
    128 B of 768-d rows: 2 bits on rank 512; of 384-d rows, past the 96 B of 2 bits on all 384: 3 bits on rank 341)."""
    full, widths = ranks[-1], set()
    for nbytes in budgets:
        if nbytes <= full_bytes:
            continue
        chosen = None
        for bits in range(2, max_bits + 1):
            fitting = [rank for rank in ranks if bits * rank > (bits - 1) * full and width_bytes(bits * rank) <= nbytes]
            chosen = bits * max(fitting) if fitting else chosen
        if chosen:
            widths.add(chosen)
    return sorted(widths)
