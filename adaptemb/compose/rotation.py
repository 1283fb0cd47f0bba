"""The orthogonal rotation between a composition's projection and its quantiser, fitted per projection rank.

Documents are centred on the projected fit rows' mean and rotated, ``z = (y - mean) @ matrix``; float queries
are rotated without the centring, ``y @ matrix``: then ``<query, z>`` is ``<y_q, y_d>`` less a constant per
query, so the ranking keeps no document-dependent bias from the centre. A random rotation spreads the
variance of the leading projected directions over every dimension before one sign bit per dimension is kept;
ITQ (iterative quantisation, Gong & Lazebnik 2011) learns the rotation that brings the centred rows closest
to their signs, starting from the random one: the default before sign bits, measured higher than the random
rotation on real queries (docs/results.md, "ITQ as the default rotation").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from adaptemb.threads import compute_threads

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
    """A seeded, uniformly random orthogonal (rank, rank) matrix, float64: the QR decomposition of a Gaussian
    matrix (numpy's seeded generator) with R's diagonal made positive (Mezzadri 2007), computed by torch."""
    gaussian = torch.from_numpy(np.random.default_rng((seed, rank)).standard_normal((rank, rank)))
    with compute_threads(1):  # a small factorisation: threads spinning against busy cores make it 50x slower
        q, r = torch.linalg.qr(gaussian)
    return (q * torch.sign(torch.diagonal(r))).numpy()


def itq_rotation(centred: np.ndarray, start: np.ndarray, iterations: int) -> np.ndarray:
    """ITQ: alternate the signs ``B = sign(V R)`` and the orthogonal Procrustes solution ``R = U W^T`` of
    ``V^T B = U S W^T``, which minimises ``||B - V R||``, from ``start``, for at most ``iterations`` rounds or until
    no sign changes (then R is a fixed point); float32 (torch), the (r, r) factorisation on one thread."""
    rows, rotation = torch.from_numpy(centred.astype(np.float32)), torch.from_numpy(start.astype(np.float32))
    previous = None
    for _ in range(iterations):
        signs = torch.where(rows @ rotation >= 0, 1.0, -1.0)
        if previous is not None and torch.equal(signs, previous):
            break
        with compute_threads(1):  # a small factorisation: threads spinning against busy cores make it slower
            left, _, right = torch.linalg.svd(rows.T @ signs)
        rotation, previous = left @ right, signs
    return rotation.double().numpy()


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
