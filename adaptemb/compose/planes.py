"""Three bits per rotated dimension before a sign-bit quantiser, stored as three sign planes.

Where even 2 bits on the full rank leave a byte budget unused (128 B of 384-d rows), a stage keeps 3 bits on rank r:
each rotated coordinate z_j as its sign and one of four magnitudes of the additive form

    m_j(s_2, s_3) = w0_j + w1_j s_2 + w2_j s_3        (s_k = ±1)

fitted per dimension on the fit rows' |z_j| (Lloyd rounds: each |z_j| to its nearest magnitude, then the three weights
by least squares). The level is ``s_1 m_j`` with ``s_1 = sign(z_j)``, so

    <q, level> = <w0 * q, s_1> + <w1 * q, s_1 s_2> + <w2 * q, s_1 s_3>

The documents are the 3r values ``[z, sign(z) s_2, sign(z) s_3]`` whose signs are the planes: a sign-bit quantiser
(binary) codes them as 3r bits, and a float query lifted to ``[w0 q, w1 q, w2 q]`` scores them through the same index
as 1- and 2-bit codes (``adaptemb.compose.levels`` is the 2-bit form, with free levels). Four free magnitudes would
take a fourth plane (s_2 s_3); the additive form keeps 3 bits.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from adaptemb.compose.levels import stage_queries, stored_query_shift
from adaptemb.compose.rotation import Rotation

MAGNITUDE_BITS = 2
"""Magnitude planes of a 3-bit stage (after the sign plane)."""
GAUSSIAN_MAGNITUDES = (0.2451, 0.7560, 1.3440, 2.1520)
"""The positive Lloyd-Max levels of a unit Gaussian with 8 levels (in sigmas): the start of each dimension's fit."""
MAGNITUDE_ROUNDS = 15
"""Lloyd rounds of the additive magnitudes (assignment, then least squares), from the Gaussian's."""
MAGNITUDE_ROWS = 20_000
"""At most this many fit rows (evenly spaced) fit the magnitudes: each round holds four (rows, r) distances."""


def magnitude_patterns(bits: int = MAGNITUDE_BITS) -> torch.Tensor:
    """(2^bits, bits) ±1 patterns (s_2, s_3, ...) in the order of increasing magnitude when w1 > w2 > ... > 0."""
    return torch.tensor(list(itertools.product([-1.0, 1.0], repeat=bits)))


@dataclass(frozen=True)
class SignAdditiveMagnitude:
    """A rotation (or none) followed by the 3-bit lift: ``weights`` (3, r) are w0, w1, w2 per dimension;
    ``query_shift`` (r,), when set, is added to projected queries first (``adaptemb.compose.choice``: the projection
    of the zero row, negated, so the float query is scored uncentred)."""

    rotation: Rotation | None
    weights: torch.Tensor
    query_shift: torch.Tensor | None = None

    def magnitudes(self) -> torch.Tensor:
        """(4, r): the four magnitudes of each dimension, in the order of ``magnitude_patterns()``."""
        return design(magnitude_patterns()) @ self.weights

    def documents(self, y: torch.Tensor) -> torch.Tensor:
        z = y if self.rotation is None else self.rotation.documents(y)
        return lift_planes(z, self.magnitudes(), magnitude_patterns())

    def queries(self, y: torch.Tensor) -> torch.Tensor:
        q = stage_queries(y, self.query_shift, self.rotation)
        return torch.cat([q * weight for weight in self.weights], dim=1)

    def tensors(self) -> dict[str, torch.Tensor]:
        own = {"planes.weights": self.weights.contiguous()}
        if self.query_shift is not None:
            own["planes.query_shift"] = self.query_shift.contiguous()
        return (self.rotation.tensors() if self.rotation else {}) | own

    @staticmethod
    def from_tensors(tensors: dict[str, torch.Tensor], rank: int, rotation: Rotation | None) -> SignAdditiveMagnitude:
        """The weights saved by ``tensors()``; ``ValueError`` for a missing or wrong-shaped one."""
        weights = tensors.get("planes.weights")
        if weights is None or tuple(weights.shape) != (MAGNITUDE_BITS + 1, rank):
            got = "missing" if weights is None else tuple(weights.shape)
            raise ValueError(f"a rank-{rank} 3-bit stage needs planes.weights ({MAGNITUDE_BITS + 1}, {rank}); got {got}")
        return SignAdditiveMagnitude(rotation, weights.float().contiguous(),
                                     stored_query_shift(tensors, "planes.query_shift", rank, 3))


def design(patterns: torch.Tensor) -> torch.Tensor:
    """(L, bits + 1): a column of ones (w0) beside the patterns (w1, w2, ...)."""
    return torch.cat([torch.ones(len(patterns), 1, dtype=patterns.dtype), patterns], dim=1)


def nearest_pattern(magnitude: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor:
    """(n, r) index of the nearest of the (L, r) ``magnitudes`` to each |z| in ``magnitude`` (n, r)."""
    return (magnitude.unsqueeze(0) - magnitudes.unsqueeze(1)).abs().argmin(dim=0)


def lift_planes(z: torch.Tensor, magnitudes: torch.Tensor, patterns: torch.Tensor) -> torch.Tensor:
    """Rotated rows (n, r) as the 3r values ``[z, sign(z) s_2, sign(z) s_3]`` (s_k the nearest magnitude's
    pattern) whose signs are the code's planes (what the ONNX head computes too)."""
    chosen = torch.nn.functional.embedding(nearest_pattern(z.abs(), magnitudes), patterns)  # (n, r, bits)
    sign = torch.sign(z).unsqueeze(2)
    return torch.cat([z, (sign * chosen).permute(0, 2, 1).reshape(len(z), -1)], dim=1)


def fit_planes(z: torch.Tensor, rotation: Rotation | None, query_shift: torch.Tensor | None) -> SignAdditiveMagnitude:
    """Per-dimension additive magnitudes of rotated fit rows ``z`` (n, r): from the Gaussian's (least squares of
    the additive form on ``GAUSSIAN_MAGNITUDES`` times each dimension's RMS), ``MAGNITUDE_ROUNDS`` of nearest
    assignment and least squares (a small ridge keeps a constant dimension solvable)."""
    magnitude = z[:: max(1, len(z) // MAGNITUDE_ROWS)].abs().double()
    matrix = design(magnitude_patterns().double())  # (L, 3)
    sigma = z.double().pow(2).mean(dim=0).sqrt().clamp_min(1e-12)
    start = torch.linalg.lstsq(matrix, torch.tensor(GAUSSIAN_MAGNITUDES, dtype=torch.float64).unsqueeze(1)).solution
    weights = start * sigma  # (3, r)
    ridge = 1e-9 * torch.eye(matrix.shape[1], dtype=torch.float64)
    for _ in range(MAGNITUDE_ROUNDS):
        rows = matrix[nearest_pattern(magnitude, matrix @ weights)]  # (n, r, 3)
        gram = torch.einsum("nrk,nrl->rkl", rows, rows) + ridge * len(magnitude)
        target = torch.einsum("nrk,nr->rk", rows, magnitude)
        weights = torch.linalg.solve(gram, target.unsqueeze(2)).squeeze(2).T
    return SignAdditiveMagnitude(rotation, weights.float().contiguous(), query_shift)
