"""The CLLR objective and its proximal optimisation (what ``cllr`` fits; see ``plugins/cllr/compressor.py``).

``F(L) = NCE(L x̃) + λ (R(L) + α Ω(L) / Ω(L₀))`` with ``x̃ = x − μ``, ``R(L) = E‖LᵀL x̃ − x̃‖² / E‖x̃‖²`` (exact over the
fit rows through their covariance) and Ω the nuclear or ℓ2,1 norm, measured relative to its value at the PCA
initialisation L₀. The smooth part takes SGD steps with heavy-ball momentum; Ω is applied after each step by its
proximal operator, singular-value thresholding or column soft-thresholding, so its zeros are exact. The prox
threshold ``lr·λ·α / (Ω(L₀)(1 − momentum))`` makes the fixed points of the iteration the stationary points of F.
With held-out pairs (``Validation``) the loop measures their InfoNCE every ``eval_every`` steps and keeps the best L.
The loop is ``adaptemb.train``'s: the objective's hooks add the closed-form gradient and apply the proximal step,
:class:`HeavyBall` takes the momentum steps. The prefix-nesting stage that follows is ``cllr/nesting.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from adaptemb import Checkpoints, FitReport, TensorBatches, TrainingConfig, info_nce, resolve_device, train

RANK_TOL = 1e-9
"""A direction whose squared singular value is below this fraction of the largest counts as zero."""


class Settings(Protocol):
    """The config fields the objective and the loop read (``CLLRConfig`` has them)."""

    seed: int
    regularizer: str
    lam: float
    alpha: float
    temperature: float
    view_temperature: float
    view_dropout: float
    view_noise: float
    steps: int
    batch_size: int
    lr: float
    momentum: float
    device: str
    loop_threads: int | None
    progress: bool
    prefix_steps: int
    prefixes: tuple[int, ...]
    prefix_temperature: float
    teacher_temperature: float
    prefix_candidates: int
    val_fraction: float
    eval_every: int
    patience: int


class CLLRObjective(nn.Module):
    """The projection L (h × d) and everything its objective needs: μ, the fit rows' covariance C (trace 1) and
    per-dimension std (for the views' noise)."""

    def __init__(self, components: torch.Tensor, mean: torch.Tensor, covariance: torch.Tensor, std: torch.Tensor,
                 settings: Settings, *, views: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(components.clone())
        self.register_buffer("mean", mean.clone())
        self.register_buffer("covariance", covariance)
        self.register_buffer("std", std.clone())
        self.settings, self.views = settings, views
        self.omega_scale = float(omega(self.weight.detach(), settings.regularizer)) or 1.0
        self.omega = 1.0  # Ω(L) / Ω(L₀), tracked by the proximal step
        self.kept_rank = components.shape[0]
        self._recon_gradient: torch.Tensor | None = None

    def training_loss(self, batch: Sequence[torch.Tensor], step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """F of a batch (``adaptemb.train``'s loss) and its parts. Autograd differentiates the NCE only (the
        regulariser enters as a number): ``before_optimizer_step`` adds λ∇R in closed form, and Ω is the proximal
        step's (``after_optimizer_step``)."""
        del step
        s = self.settings
        nce = self.nce(*batch)
        recon, self._recon_gradient = self.reconstruction(gradient=True)
        regulariser = s.lam * (float(recon) + s.alpha * self.omega)
        return nce + regulariser, {"nce": nce.detach(), "recon": recon, "omega": torch.tensor(self.omega)}

    @torch.no_grad()
    def before_optimizer_step(self) -> None:
        """The smooth part's gradient: the NCE's (autograd) plus λ∇R (closed form, from ``training_loss``)."""
        assert self.weight.grad is not None and self._recon_gradient is not None
        self.weight.grad = self.weight.grad + self.settings.lam * self._recon_gradient

    @torch.no_grad()
    def after_optimizer_step(self) -> None:
        """``L ← prox(L)`` after the momentum step: the proximal operator of Ω (exact zeros)."""
        s = self.settings
        threshold = s.lr * s.lam * s.alpha / (self.omega_scale * (1.0 - s.momentum))
        if threshold <= 0:
            return
        if s.regularizer == "nuclear":
            weight, singular = singular_value_threshold(self.weight, threshold)
            self.kept_rank, value = len(singular), float(singular.sum())
        else:
            weight = column_soft_threshold(self.weight, threshold)
            value = float(weight.norm(dim=0).sum())
        self.weight.copy_(weight)
        self.omega = value / self.omega_scale

    def get_extra_state(self) -> dict[str, Any]:
        """The rank and Ω the last proximal step left: kept with the weights when ``adaptemb.train`` keeps the best."""
        return {"kept_rank": self.kept_rank, "omega": self.omega}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.kept_rank, self.omega = state["kept_rank"], state["omega"]

    @torch.no_grad()
    def losses(self, batch: Sequence[torch.Tensor]) -> dict[str, float]:
        """Loss components of a batch, without views' noise (for the before / after measurement)."""
        was_training = self.training
        self.eval()
        nce = float(self.nce(*batch))
        recon = float(self.reconstruction()[0])
        self.train(was_training)
        s = self.settings
        return {"loss": nce + s.lam * (recon + s.alpha * self.omega), "nce": nce, "recon": recon, "omega": self.omega}

    def nce(self, anchors: torch.Tensor, keys: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
        """Symmetric InfoNCE of the L2-normalised codes: same group = positive, the rest of the batch negatives."""
        a, k = self._view(anchors.float() - self.mean), self._view(keys.float() - self.mean)
        za, zk = a @ self.weight.T, k @ self.weight.T
        tau = self.settings.view_temperature if self.views else self.settings.temperature
        if len(torch.unique(groups)) == len(groups):
            return 0.5 * (info_nce(za, zk, tau) + info_nce(zk, za, tau))
        positives = groups[:, None] == groups[None, :]
        return 0.5 * (info_nce(za, zk, tau, positives) + info_nce(zk, za, tau, positives.T))

    @torch.no_grad()
    def reconstruction(self, *, gradient: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``R = tr(G A) − 2 tr(A) + 1`` with ``A = L C Lᵀ``, ``G = L Lᵀ`` and, if asked, ``∇R = 2 (G L C + A L) − 4 L C``
        (closed form: one h·d² product per step)."""
        w = self.weight.float()
        wc = w @ self.covariance
        code_cov, gram = wc @ w.T, w @ w.T
        value = (code_cov * gram).sum() - 2 * code_cov.diagonal().sum() + 1.0
        return value, (2 * (gram @ wc + code_cov @ w) - 4 * wc) if gradient else None

    def _view(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.views and self.training):
            return x
        s = self.settings
        if s.view_dropout > 0:
            x = F.dropout(x, s.view_dropout)
        if s.view_noise > 0:
            x = x + s.view_noise * self.std * torch.randn_like(x)
        return x


@dataclass
class Validation:
    """Held-out supervision for early stopping: each anchor's positives among ``keys`` are the keys of its
    group (``anchor_groups`` vs ``key_groups``); the other keys (the other held-out positives and distractor
    fit rows) are its negatives."""

    anchors: torch.Tensor
    keys: torch.Tensor
    anchor_groups: torch.Tensor
    key_groups: torch.Tensor

    def to(self, device: torch.device) -> Validation:
        return Validation(*(t.to(device) for t in (self.anchors, self.keys, self.anchor_groups, self.key_groups)))

    @torch.no_grad()
    def loss(self, objective: CLLRObjective) -> float:
        """InfoNCE of the held-out anchors against the keys, through the current L (no views' noise)."""
        w, mean = objective.weight, objective.mean
        positives = self.anchor_groups[:, None] == self.key_groups[None, :]
        return float(info_nce((self.anchors - mean) @ w.T, (self.keys - mean) @ w.T, objective.settings.temperature,
                              positives))


def optimise(objective: CLLRObjective, tensors: Sequence[torch.Tensor], settings: Settings,
             validation: Validation | None = None) -> FitReport:
    """At most ``settings.steps`` proximal SGD steps (``adaptemb.train`` with :class:`HeavyBall` and the objective's
    proximal hook) over shuffled row batches of ``tensors`` (anchors, keys, groups); with ``validation``, its loss
    is measured every ``settings.eval_every`` steps, the fit stops after ``settings.patience`` measurements without
    improvement and the best L (with its rank and Ω) is kept.

    Runs on ``settings.device`` (CUDA when available for ``"auto"``), draws every random number from the seed and
    leaves the objective on the CPU in eval mode. On the CPU the loop runs on ``settings.loop_threads`` threads.
    """
    device = resolve_device(settings.device)
    checkpoints = None
    if validation is not None:
        held_out = validation.to(device)
        checkpoints = Checkpoints(lambda: held_out.loss(objective), every=settings.eval_every)
    batches = TensorBatches(tensors, settings.batch_size, torch.Generator().manual_seed(settings.seed))
    with loop_threads(settings, device):
        report = train(objective, batches, training_config(settings), description="cllr", steps=settings.steps,
                       optimizer=heavy_ball(settings), checkpoints=checkpoints)
    objective.cpu()
    if report.val_loss is not None:
        report.val_loss = round(report.val_loss, 6)
    return report


class HeavyBall(torch.optim.Optimizer):
    """SGD with heavy-ball momentum: ``v ← momentum·v + g``, then ``p ← p − lr·v``, each product rounded on its own
    (torch's SGD fuses ``p − lr·v`` into one multiply-add: other last bits than the fits cllr has always made)."""

    def __init__(self, params: Iterable[nn.Parameter], lr: float, momentum: float) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                velocity = self.state[param].setdefault("velocity", torch.zeros_like(param))
                velocity.mul_(group["momentum"]).add_(param.grad)
                param.sub_(group["lr"] * velocity)


def heavy_ball(settings: Settings) -> Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]:
    return lambda params: HeavyBall(params, settings.lr, settings.momentum)


def training_config(settings: Settings) -> TrainingConfig:
    """What ``adaptemb.train`` reads of the settings: seed, batch size, device, patience, progress (float32 always:
    the proximal steps need exact arithmetic; nothing is held out by rows)."""
    return TrainingConfig(seed=settings.seed, batch_size=settings.batch_size, lr=settings.lr, patience=settings.patience,
                          device=settings.device, progress=settings.progress, val_fraction=0.0, precision="float32")


@contextmanager
def loop_threads(settings: Settings, device: torch.device) -> Iterator[None]:
    """On the CPU, run the block on ``settings.loop_threads`` threads (its ops are small), then restore the count."""
    previous = torch.get_num_threads()
    if device.type == "cpu" and settings.loop_threads is not None:
        torch.set_num_threads(settings.loop_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def singular_value_threshold(weight: torch.Tensor, threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """prox of ``threshold·‖W‖_*``: every singular value of W shrinks by ``threshold``, to exactly 0 below it.

    From the eigendecomposition of the small Gram matrix ``W Wᵀ = P S² Pᵀ`` (h × h, far cheaper than an SVD of W):
    ``W' = P₊ diag(1 − t/s) P₊ᵀ W`` over the singular values s > t only, so W' has rank #(s > t) exactly.
    Returns W' and its singular values ``s − t``.
    """
    eigenvalues, vectors = small_eigh(weight @ weight.T)
    singular = eigenvalues.clamp_min(0).sqrt()
    keep = singular > threshold
    kept = vectors[:, keep]
    shrink = 1.0 - threshold / singular[keep]
    return kept @ (shrink[:, None] * (kept.T @ weight)), singular[keep] - threshold


def column_soft_threshold(weight: torch.Tensor, threshold: float) -> torch.Tensor:
    """prox of ``threshold·‖W‖_{2,1}`` (sum of column norms): each column's norm shrinks by ``threshold``, to exactly 0."""
    norms = weight.norm(dim=0)
    return weight * (1.0 - threshold / norms.clamp_min(torch.finfo(weight.dtype).tiny)).clamp_min(0.0)


def omega(weight: torch.Tensor, regularizer: str) -> torch.Tensor:
    """Ω(W): the ℓ2,1 norm (sum of column norms) or the nuclear norm (sum of singular values)."""
    if regularizer == "l21":
        return weight.norm(dim=0).sum()
    return small_eigh((weight @ weight.T).double())[0].clamp_min(0).sqrt().sum().float()


def ordered_directions(weight: torch.Tensor, covariance: torch.Tensor, rank: int | None = None,
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rotate L's rows so code dimensions are ordered by their spread on the fit data; drop L's null directions.

    Returns (W (r × d), each code dimension's std relative to the data's (sqrt of its share of E‖x̃‖²), L's singular
    values). ``W = R L`` with R an orthonormal basis change of L's row space, so zero columns stay exactly zero
    and full-rank codes are L's up to a rotation (cosine scores unchanged); every prefix of W is the best
    rank-r summary of the learned codes (PCA of L x̃).
    """
    w = weight.double()
    eigenvalues, vectors = small_eigh(w @ w.T)
    order = torch.argsort(eigenvalues, descending=True)
    eigenvalues, vectors = eigenvalues[order].clamp_min(0), vectors[:, order]
    top = float(eigenvalues[0]) if len(eigenvalues) else 0.0
    numerical = int((eigenvalues > RANK_TOL * top).sum()) if top > 0 else 0
    r = numerical if rank is None else min(rank, numerical)
    if r == 0:
        return weight[:0], weight.new_zeros(0), eigenvalues.sqrt().float()
    basis = vectors[:, :r]  # orthonormal basis of L's range
    variances, rotation = small_eigh(basis.T @ (w @ covariance.double() @ w.T) @ basis)
    order = torch.argsort(variances, descending=True)
    rotation = rotation[:, order]
    pivot = rotation.abs().argmax(dim=0)  # sign convention: results do not depend on the eigen-solver's choice
    rotation = rotation * torch.sign(rotation[pivot, torch.arange(r)])[None, :]
    directions = (rotation.T @ basis.T).to(weight.dtype) @ weight  # a left product: zero columns of L stay zero
    return directions, variances[order].clamp_min(0).sqrt().float(), eigenvalues.sqrt().float()


def small_eigh(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.linalg.eigh`` of a small (h × h) symmetric matrix, single-threaded on the CPU.

    LAPACK's threaded eigensolver gains nothing at h = 256 and, when another process holds a core, waits for its
    descheduled threads: measured 60-330 ms per call with 2 threads against 4-5 ms with one (2-core VM).
    """
    if matrix.device.type != "cpu":
        return torch.linalg.eigh(matrix)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return torch.linalg.eigh(matrix)
    finally:
        torch.set_num_threads(previous)


def relative_covariance(rows: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    """Covariance of the rows (accumulated in float64, in blocks) divided by its trace: R is then relative."""
    gram = torch.zeros(rows.shape[1], rows.shape[1], dtype=torch.float64)
    for start in range(0, len(rows), 65536):
        block = rows[start : start + 65536].double() - mean.double()
        gram += block.T @ block
    return (gram / gram.trace().clamp_min(1e-300)).float()


def measure(objective: CLLRObjective, tensors: Sequence[torch.Tensor], seed: int, batch_size: int,
            rows: int = 2048) -> dict[str, Any]:
    """Mean loss components over a fixed sample of ``rows`` rows (for the report's before / after)."""
    order = torch.randperm(len(tensors[0]), generator=torch.Generator().manual_seed(seed))[:rows]
    sums: dict[str, float] = {}
    batches = 0
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        if len(idx) < 2:
            continue
        for name, value in objective.losses([t[idx] for t in tensors]).items():
            sums[name] = sums.get(name, 0.0) + value
        batches += 1
    return {name: round(value / max(batches, 1), 6) for name, value in sums.items()}
