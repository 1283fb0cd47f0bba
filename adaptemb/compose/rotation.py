"""The orthogonal rotation between a composition's projection and its quantiser, fitted per projection rank.

Documents are centred on the projected fit rows' mean and rotated, ``z = (y - mean) @ matrix``; float queries
are rotated without the centring, ``y @ matrix``: then ``<query, z>`` is ``<y_q, y_d>`` less a constant per
query, so the ranking keeps no document-dependent bias from the centre. A random rotation spreads the
variance of the leading projected directions over every dimension before one sign bit per dimension is kept;
ITQ (iterative quantisation, Gong & Lazebnik 2011) learns the rotation that brings the centred rows closest
to their signs, starting from the random one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import ortho_group

ITQ_SAMPLE_ROWS = 20_000


@dataclass(frozen=True)
class Rotation:
    """A centre (r,) and an orthogonal matrix (r, r), both float32."""

    center: torch.Tensor
    matrix: torch.Tensor

    def documents(self, y: torch.Tensor) -> torch.Tensor:
        """Projected document rows, centred and rotated."""
        return (y - self.center) @ self.matrix

    def queries(self, y: torch.Tensor) -> torch.Tensor:
        """Projected float queries, rotated (not centred: see the module docstring)."""
        return y @ self.matrix

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"center": self.center, "rotation": self.matrix}

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], rank: int) -> Rotation:
        """The rotation saved by ``tensors()``; ``ValueError`` for a wrong shape or a matrix that is not orthogonal."""
        center, matrix = tensors["center"].float(), tensors["rotation"].float()
        if center.shape != (rank,) or matrix.shape != (rank, rank):
            raise ValueError(f"a rank-{rank} rotation needs center ({rank},) and rotation ({rank}, {rank}); "
                             f"got {tuple(center.shape)} and {tuple(matrix.shape)}")
        if not torch.allclose(matrix.double() @ matrix.double().T, torch.eye(rank, dtype=torch.float64), atol=1e-4):
            raise ValueError(f"the rank-{rank} rotation is not orthogonal")
        return cls(center.contiguous(), matrix.contiguous())


def random_rotation(rank: int, seed: int) -> np.ndarray:
    """A seeded, uniformly random orthogonal (rank, rank) matrix (``scipy.stats.ortho_group``), float64."""
    if rank == 1:
        return np.ones((1, 1))
    return ortho_group.rvs(rank, random_state=np.random.default_rng((seed, rank)))


def itq_rotation(centred: np.ndarray, start: np.ndarray, iterations: int) -> np.ndarray:
    """ITQ: alternate the signs ``B = sign(V R)`` and the orthogonal Procrustes solution ``R = U W^T`` of
    ``V^T B = U S W^T``, which minimises ``||B - V R||``, from ``start``; float64."""
    rotation = start
    for _ in range(iterations):
        signs = np.where(centred @ rotation >= 0, 1.0, -1.0)
        left, _, right = np.linalg.svd(centred.T @ signs)
        rotation = left @ right
    return rotation


def fit_rotation(y: torch.Tensor, kind: str, seed: int, iterations: int) -> Rotation | None:
    """The rotation of kind ``"random"``, ``"itq"`` or ``"none"`` (None) for projected fit rows ``y`` (n, r)."""
    if kind == "none":
        return None
    rows = y.double().numpy()
    center = rows.mean(axis=0)
    matrix = random_rotation(rows.shape[1], seed)
    if kind == "itq":
        rng = np.random.default_rng(seed)
        sample = rows if len(rows) <= ITQ_SAMPLE_ROWS else rows[np.sort(rng.choice(len(rows), ITQ_SAMPLE_ROWS, replace=False))]
        matrix = itq_rotation(sample - center, matrix, iterations)
    return Rotation(torch.from_numpy(center.astype(np.float32)), torch.from_numpy(matrix.astype(np.float32)))
