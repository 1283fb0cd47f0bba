"""The orthogonal rotation between a composition's projection and its quantiser, fitted per projection rank.

Documents are centred on the projected fit rows' mean and rotated, ``z = rotate(y - mean)``; float queries
are rotated without the centring, ``rotate(y)``: then ``<query, z>`` is ``<y_q, y_d>`` less a constant per
query, so the ranking keeps no document-dependent bias from the centre. A random rotation spreads the
variance of the leading projected directions over every dimension before one sign bit per dimension is kept;
ITQ (iterative quantisation, Gong & Lazebnik 2011) learns the rotation that brings the centred rows closest
to their signs, starting from the random one; ``itq-tail`` keeps the leading ``LEADING_UNROTATED`` directions
unrotated and learns ITQ on the rest: the default before sign bits above rank ``NO_ROTATION_MAX_RANK`` (below it
none: real queries measured no rotation best there, docs/results.md, "Choices judged by real queries"). All are
dense (r, r) matrices: at large ranks ITQ's 50 (r, r) factorisations take minutes and each matrix r^2 floats in the file, so there the
default is a randomized Hadamard transform (``HadamardRotation``: seeded sign flips and Walsh-Hadamard
transforms, r signs per round stored), as good as the random matrix on real queries (docs/results.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import torch

from adaptemb.threads import compute_threads

ITQ_SAMPLE_ROWS = 20_000
ITQ_MAX_RANK = 1024
"""The largest rank ``rotation="auto"`` learns ITQ at before sign bits; above it a Hadamard rotation. One of ITQ's
(up to 50) rounds on 20,000 rows took 1.4 s at rank 1024 and 20 s at 3072 (2-core AMD EPYC), and its gain over a
random rotation at ranks 192-768 measured +0.003 ... +0.007 NDCG@10 (docs/results.md)."""
NO_ROTATION_MAX_RANK = 128
"""The largest rank ``rotation="auto"`` leaves unrotated before sign bits (itq-tail above, up to ``ITQ_MAX_RANK``). With
every real query of both data sets (benchmarks/results/rotation_default_*.json, NDCG@10): no rotation measured best
at 8-16 B on the built-in 384-d data and the 768-d stand-in (by 0.004-0.02), ITQ best or within noise from 24-32 B
up, and so did held-out 768-d text (issue 46: none best at 8-16 B by ~0.03, a rotation from 32 B)."""
DEFAULT_ITQ_ITERATIONS = 20
"""ITQ's rounds by default: 20 measured within noise of 50 at every width on both data sets, at under half the fit
time (benchmarks/results/rotation_default_*.json)."""
LEADING_UNROTATED = 16
"""``"itq-tail"`` keeps this many leading projected directions unrotated (at most a quarter of the rank), one sign bit
each, and learns ITQ on the others: with every query (benchmarks/results/rotation_default_*_itq_tail.json) it
measured best at 8-96 B on the 768-d stand-in (ITQ -0.015 to -0.030 NDCG@10, outside noise; no rotation -0.01 to
-0.02 from 32 B), and within noise of the best at every budget on the built-in 384-d data (best from 48 B). Up to
rank ``NO_ROTATION_MAX_RANK`` auto keeps none: there itq-tail measured -0.003 to -0.006 on the 384-d data."""
HADAMARD_ROUNDS = 3
"""Rounds of sign flips and Walsh-Hadamard transforms of a ``HadamardRotation``."""


class Rotation:
    """An orthogonal map of projected rows of rank r, after centring documents on ``center`` (r,) float32."""

    center: torch.Tensor
    matrix: torch.Tensor
    """The (r, r) float32 matrix ``rotate`` multiplies by (what an ONNX graph stores)."""

    def rotate(self, y: torch.Tensor) -> torch.Tensor:
        """Rows (n, r) times the orthogonal matrix."""
        raise NotImplementedError

    def documents(self, y: torch.Tensor) -> torch.Tensor:
        """Projected document rows, centred and rotated."""
        return self.rotate(y - self.center)

    def queries(self, y: torch.Tensor) -> torch.Tensor:
        """Projected float queries, rotated (not centred: see the module docstring)."""
        return self.rotate(y)

    def tensors(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    @staticmethod
    def from_tensors(tensors: dict[str, torch.Tensor], rank: int) -> Rotation:
        """The rotation saved by ``tensors()`` (a matrix under ``rotation``, or ``hadamard_signs``); ``ValueError``
        for a missing or wrong-shaped tensor or a matrix that is not orthogonal."""
        if "hadamard_signs" in tensors:
            return HadamardRotation.from_tensors(tensors, rank)
        if "rotation" not in tensors:
            raise ValueError(f"the rank-{rank} rotation is missing: neither rotation nor hadamard_signs is stored")
        return DenseRotation.from_tensors(tensors, rank)


@dataclass(frozen=True)
class DenseRotation(Rotation):
    """A centre (r,) and an orthogonal matrix (r, r), both float32: random or learned (ITQ)."""

    center: torch.Tensor
    matrix: torch.Tensor

    def rotate(self, y: torch.Tensor) -> torch.Tensor:
        return y @ self.matrix

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"center": self.center, "rotation": self.matrix}

    @staticmethod
    def from_tensors(tensors: dict[str, torch.Tensor], rank: int) -> DenseRotation:
        center, matrix = _center(tensors, rank), tensors["rotation"].float()
        if matrix.shape != (rank, rank):
            raise ValueError(f"a rank-{rank} rotation needs rotation ({rank}, {rank}); got {tuple(matrix.shape)}")
        if not torch.allclose(matrix.double() @ matrix.double().T, torch.eye(rank, dtype=torch.float64), atol=1e-4):
            raise ValueError(f"the rank-{rank} rotation is not orthogonal")
        return DenseRotation(center, matrix.contiguous())


@dataclass(frozen=True)
class HadamardRotation(Rotation):
    """A randomized Hadamard transform of rank r: ``HADAMARD_ROUNDS`` rounds of flipping signs (``signs``, (rounds,
    r) of ±1), then the normalised Walsh-Hadamard transform of the largest power of two p <= r on a block of p
    coordinates: the first p in even rounds, the last p in odd ones (the same block where r = p, p > r / 2 so the
    blocks overlap). Each step is orthogonal, so the whole is; it costs O(r log r) per row and stores rounds x r
    signs instead of an (r, r) matrix."""

    center: torch.Tensor
    signs: torch.Tensor

    def rotate(self, y: torch.Tensor) -> torch.Tensor:
        rank = y.shape[1]
        width = 1 << (rank.bit_length() - 1)
        for step, flips in enumerate(self.signs):
            y = y * flips  # a new tensor: the transform below writes into it
            block = slice(0, width) if step % 2 == 0 else slice(rank - width, rank)
            y[:, block] = walsh_hadamard(y[:, block])
        return y

    @functools.cached_property
    def matrix(self) -> torch.Tensor:  # type: ignore[override]  # computed once from the signs, not stored
        return self.rotate(torch.eye(self.signs.shape[1]))

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"center": self.center, "hadamard_signs": self.signs.to(torch.int8)}

    @staticmethod
    def from_tensors(tensors: dict[str, torch.Tensor], rank: int) -> HadamardRotation:
        center, signs = _center(tensors, rank), tensors["hadamard_signs"]
        if signs.ndim != 2 or signs.shape[1] != rank or signs.shape[0] < 1:
            raise ValueError(f"a rank-{rank} Hadamard rotation needs hadamard_signs (rounds, {rank}); "
                             f"got {tuple(signs.shape)}")
        if not bool(((signs == 1) | (signs == -1)).all()):
            raise ValueError(f"the rank-{rank} Hadamard rotation's signs must all be +1 or -1")
        return HadamardRotation(center, signs.float().contiguous())


def _center(tensors: dict[str, torch.Tensor], rank: int) -> torch.Tensor:
    if "center" not in tensors:
        raise ValueError(f"the rank-{rank} rotation's center is missing")
    center = tensors["center"].float()
    if center.shape != (rank,):
        raise ValueError(f"a rank-{rank} rotation needs center ({rank},); got {tuple(center.shape)}")
    return center.contiguous()


@functools.cache
def _sylvester(size: int) -> torch.Tensor:
    return torch.from_numpy(scipy.linalg.hadamard(size).astype(np.float32))


def walsh_hadamard(y: torch.Tensor) -> torch.Tensor:
    """The normalised Walsh-Hadamard transform of rows (n, p), p a power of two, as two small matrix products:
    ``H_p = H_a (x) H_b`` with each row viewed as an (a, b) matrix (faster than log2 p butterfly passes on CPU)."""
    rows, width = y.shape
    b = 1 << (width.bit_length() - 1) // 2
    a = width // b
    out = _sylvester(a) @ (y.reshape(rows, a, b) @ _sylvester(b))
    return out.reshape(rows, width) * width**-0.5


def hadamard_rotation(rank: int, seed: int, center: torch.Tensor) -> HadamardRotation:
    """A seeded randomized Hadamard rotation of ``rank`` (numpy's generator draws the signs)."""
    rng = np.random.default_rng((seed, rank, HADAMARD_ROUNDS))
    signs = np.where(rng.random((HADAMARD_ROUNDS, rank)) < 0.5, -1.0, 1.0).astype(np.float32)
    return HadamardRotation(center, torch.from_numpy(signs))


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


def fit_rotation(y: torch.Tensor, kind: str, seed: int, iterations: int,
                 unrotated: int = LEADING_UNROTATED) -> Rotation | None:
    """The rotation of kind ``"random"``, ``"itq"``, ``"itq-tail"`` (``unrotated`` leading directions kept,
    ITQ on the rest: a block-diagonal matrix), ``"hadamard"`` or ``"none"`` (None) for projected fit rows ``y`` (n, r)."""
    if kind == "none":
        return None
    rows = y.double().numpy()
    center = rows.mean(axis=0)
    if kind == "hadamard":
        return hadamard_rotation(rows.shape[1], seed, torch.from_numpy(center.astype(np.float32)))
    keep = min(unrotated, rows.shape[1] // 4) if kind == "itq-tail" else 0
    matrix = np.eye(rows.shape[1])
    matrix[keep:, keep:] = random_rotation(rows.shape[1] - keep, seed)
    if kind in ("itq", "itq-tail"):
        rng = np.random.default_rng(seed)
        sample = rows if len(rows) <= ITQ_SAMPLE_ROWS else rows[np.sort(rng.choice(len(rows), ITQ_SAMPLE_ROWS, replace=False))]
        matrix[keep:, keep:] = itq_rotation(sample[:, keep:] - center[keep:], matrix[keep:, keep:], iterations)
    return DenseRotation(torch.from_numpy(center.astype(np.float32)), torch.from_numpy(matrix.astype(np.float32)))
