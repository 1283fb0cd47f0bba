"""The CLLR objective and its proximal optimisation (what ``cllr`` fits; see ``plugins/cllr.py``).

``F(L) = NCE(L x̃) + λ (R(L) + α Ω(L) / Ω(L₀))`` with ``x̃ = x − μ``, ``R(L) = E‖LᵀL x̃ − x̃‖² / E‖x̃‖²`` (exact over the
fit rows through their covariance) and Ω the nuclear or ℓ2,1 norm, measured relative to its value at the PCA
initialisation L₀. The smooth part takes SGD steps with heavy-ball momentum; Ω is applied after each step by its
proximal operator, singular-value thresholding or column soft-thresholding, so its zeros are exact. The prox
threshold ``lr·λ·α / (Ω(L₀)(1 − momentum))`` makes the fixed points of the iteration the stationary points of F.
With held-out pairs (``Validation``) the loop measures their InfoNCE every ``eval_every`` steps and keeps the best L.

Then (adaptemb's extension, ``nest_prefixes``) the learned row space is re-based so that its short prefixes are
trained to stand alone: ``W = B L`` with B (r × r) fitted by a soft-target NCE that asks each prefix's
neighbour distribution to match the full code's (self-distillation of L's own codes, Matryoshka style).
"""

from __future__ import annotations

import itertools
import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from adaptemb import FitReport, info_nce, resolve_device

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

    def loss_and_gradient(self, batch: Sequence[torch.Tensor]) -> tuple[dict[str, float], torch.Tensor]:
        """Loss components of a batch (F and its parts) and the gradient of the smooth part with respect to L."""
        anchors, keys, groups = batch
        s = self.settings
        self.weight.grad = None
        with torch.enable_grad():
            nce = self.nce(anchors, keys, groups)
            nce.backward()
        assert self.weight.grad is not None
        recon, recon_grad = self.reconstruction(gradient=True)
        grad = self.weight.grad + s.lam * recon_grad
        self.weight.grad = None
        total = float(nce.detach()) + s.lam * (float(recon) + s.alpha * self.omega)
        return {"loss": total, "nce": float(nce.detach()), "recon": float(recon), "omega": self.omega}, grad

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

    @torch.no_grad()
    def step(self, velocity: torch.Tensor) -> None:
        """``L ← prox(L − lr·v)``: the momentum step, then the proximal operator of Ω (exact zeros)."""
        s = self.settings
        self.weight.sub_(s.lr * velocity)
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
    """At most ``settings.steps`` proximal SGD steps over shuffled row batches of ``tensors`` (anchors, keys,
    groups); with ``validation``, its loss is measured every ``settings.eval_every`` steps, the fit stops after
    ``settings.patience`` measurements without improvement and the best L is kept.

    Runs on ``settings.device`` (CUDA when available for ``"auto"``), draws every random number from the seed and
    leaves the objective on the CPU in eval mode. On the CPU the loop runs on ``settings.loop_threads`` threads.
    """
    device = resolve_device(settings.device)
    previous = torch.get_num_threads()
    if device.type == "cpu" and settings.loop_threads is not None:
        torch.set_num_threads(settings.loop_threads)
    try:
        return _loop(objective, tensors, settings, device, validation.to(device) if validation else None)
    finally:
        torch.set_num_threads(previous)


def _loop(objective: CLLRObjective, tensors: Sequence[torch.Tensor], settings: Settings,
          device: torch.device, validation: Validation | None) -> FitReport:
    started = time.perf_counter()
    rows = len(tensors[0])
    epochs = 0
    recent: deque[dict[str, float]] = deque(maxlen=max(1, settings.steps // 10))  # the report's training losses
    best = _Best(objective, validation) if validation is not None else None
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(settings.seed)
        generator = torch.Generator().manual_seed(settings.seed)
        objective.to(device).train()
        velocity = torch.zeros_like(objective.weight)
        order, position = torch.arange(0), rows
        bar = tqdm(total=settings.steps, desc="cllr", disable=None if settings.progress else True, leave=False)
        steps = settings.steps
        for step in range(settings.steps):
            if best is not None and step % settings.eval_every == 0 and best.observe(objective, step, settings.patience):
                steps = step
                break
            if rows - position < 2:
                order, position, epochs = torch.randperm(rows, generator=generator), 0, epochs + 1
            idx = order[position : position + settings.batch_size]
            position += len(idx)
            parts, grad = objective.loss_and_gradient([t[idx].to(device, non_blocking=True) for t in tensors])
            velocity.mul_(settings.momentum).add_(grad)
            objective.step(velocity)
            recent.append(parts)
            bar.update(1)
            if step % 10 == 0:
                bar.set_postfix(loss=f"{parts['loss']:.4f}", rank=objective.kept_rank)
        bar.close()
    val_loss = None
    if best is not None:
        if steps == settings.steps:
            best.observe(objective, steps, settings.patience)  # the last L is a candidate too
        val_loss = best.restore(objective)
    objective.cpu().eval()
    report = FitReport(device=str(device), seconds=time.perf_counter() - started, epochs=epochs, steps=steps,
                       stopped_early=steps < settings.steps, train_losses=_mean_parts(recent), val_loss=val_loss,
                       precision="float32",
                       threads=torch.get_num_threads())
    if best is not None:
        report.extra["best_step"] = best.step
    return report


def _mean_parts(parts: Sequence[dict[str, float]]) -> dict[str, float]:
    """Each loss component averaged over the steps given (the last tenth of the steps run)."""
    return {name: sum(p[name] for p in parts) / len(parts) for name in parts[0]} if parts else {}


class _Best:
    """The L of the lowest held-out loss so far (with its rank and Ω), measured every ``eval_every`` steps."""

    def __init__(self, objective: CLLRObjective, validation: Validation) -> None:
        self.validation, self.loss, self.step = validation, math.inf, 0
        self.weight, self.kept_rank, self.omega = objective.weight.detach().clone(), objective.kept_rank, objective.omega
        self.since_best = 0  # measurements since the last improvement

    def observe(self, objective: CLLRObjective, step: int, patience: int) -> bool:
        """Measure L at ``step``; True once ``patience`` measurements in a row did not improve on the best."""
        loss = self.validation.loss(objective)
        if loss < self.loss:
            self.loss, self.step, self.since_best = loss, step, 0
            self.weight = objective.weight.detach().clone()
            self.kept_rank, self.omega = objective.kept_rank, objective.omega
        else:
            self.since_best += 1
        return self.since_best >= patience

    def restore(self, objective: CLLRObjective) -> float:
        with torch.no_grad():
            objective.weight.copy_(self.weight)
        objective.kept_rank, objective.omega = self.kept_rank, self.omega
        return round(self.loss, 6)


def nest_prefixes(directions: torch.Tensor, mean: torch.Tensor, anchors: torch.Tensor, candidates: torch.Tensor,
                  anchor_ids: torch.Tensor, settings: Settings) -> tuple[torch.Tensor, dict[str, Any]]:
    """Re-base L's row space so that its prefixes are trained codes: returns (B (r × r), report); codes ``B L x̃``.

    The teacher is the full code ``L x̃`` (``directions`` = L, r × d, spread-ordered, frozen). For a batch of
    ``anchors`` (fit rows and the pairs' queries) against a sample of ``candidates`` (fit rows), the teacher's
    neighbour distribution ``softmax(cos_L(a, c) / teacher_temperature)`` is the soft target of each prefix
    ``p`` in ``settings.prefixes`` (those below r): the loss is the mean over prefixes of
    ``−Σ_c p_T(c|a) log softmax(cos_{(B L)[:p]}(a, c) / prefix_temperature)``; a candidate that is the anchor
    itself (``anchor_ids[a] == c``, -1 for none) is left out. B starts at the identity and takes
    ``prefix_steps`` heavy-ball SGD steps (the loop's lr and momentum). Everything works on the r-dim teacher
    codes, so a step costs O(batch · r²) whatever d is. B is a left factor: zero columns of L stay zero and the
    rank cannot grow.
    """
    r = directions.shape[0]
    prefixes = sorted({p for p in settings.prefixes if 1 <= p < r})
    if not prefixes or settings.prefix_steps <= 0:
        return torch.eye(r), {}
    device = resolve_device(settings.device)
    previous = torch.get_num_threads()
    if device.type == "cpu" and settings.loop_threads is not None:
        torch.set_num_threads(settings.loop_threads)
    try:
        started = time.perf_counter()
        za, zc = (_codes(rows, mean, directions).to(device) for rows in (anchors, candidates))
        ta, tc = F.normalize(za, dim=1), F.normalize(zc, dim=1)
        ids = anchor_ids.to(device)
        generator = torch.Generator().manual_seed(settings.seed + 1)
        basis = torch.eye(r, device=device, requires_grad=True)
        velocity = torch.zeros_like(basis)
        n_candidates = min(settings.prefix_candidates, len(zc))
        losses: list[float] = []
        bar = tqdm(total=settings.prefix_steps, desc="cllr nesting", disable=None if settings.progress else True, leave=False)
        for _ in range(settings.prefix_steps):
            ai = torch.randperm(len(za), generator=generator)[: settings.batch_size].to(device)
            ci = torch.randperm(len(zc), generator=generator)[:n_candidates].to(device)
            itself = ids[ai][:, None] == ci[None, :]
            with torch.no_grad():
                target = F.softmax((ta[ai] @ tc[ci].T / settings.teacher_temperature).masked_fill(itself, -torch.inf), 1)
            with torch.enable_grad():
                sa, sc = za[ai] @ basis.T, zc[ci] @ basis.T
                loss = sa.new_zeros(())
                for p in prefixes:
                    logits = F.normalize(sa[:, :p], dim=1) @ F.normalize(sc[:, :p], dim=1).T / settings.prefix_temperature
                    log_q = F.log_softmax(logits.masked_fill(itself, -torch.inf), dim=1)
                    loss = loss - (target * log_q.masked_fill(itself, 0.0)).sum(1).mean() / len(prefixes)
                (grad,) = torch.autograd.grad(loss, basis)
            with torch.no_grad():
                velocity.mul_(settings.momentum).add_(grad)
                basis.sub_(settings.lr * velocity)
            losses.append(float(loss.detach()))
            bar.update(1)
        bar.close()
        tail = max(1, len(losses) // 10)
        report = {"prefixes": prefixes, "steps": settings.prefix_steps, "seconds": round(time.perf_counter() - started, 3),
                  "loss_first": round(losses[0], 6), "loss_last": round(sum(losses[-tail:]) / tail, 6)}
        return basis.detach().cpu(), report
    finally:
        torch.set_num_threads(previous)


def _codes(rows: torch.Tensor, mean: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    return torch.cat([(rows[i : i + 65536].float() - mean) @ directions.T for i in range(0, len(rows), 65536)])


def block_spread_order(weight: torch.Tensor, covariance: torch.Tensor, prefixes: Sequence[int],
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Within each block between consecutive trained prefixes, rotate the rows (orthogonally, block by block) to
    the principal axes of that block's codes: dimensions are ordered by spread inside every block, and every
    trained prefix keeps its span and its cosine scores exactly. Returns (W, each dimension's relative std)."""
    bounds = [0, *sorted({p for p in prefixes if 0 < p < len(weight)}), len(weight)]
    w = weight.double()
    blocks = []
    for start, stop in itertools.pairwise(bounds):
        block = w[start:stop]
        variances, rotation = small_eigh(block @ covariance.double() @ block.T)
        order = torch.argsort(variances, descending=True)
        rotation = rotation[:, order]
        pivot = rotation.abs().argmax(dim=0)
        rotation = rotation * torch.sign(rotation[pivot, torch.arange(len(order))])[None, :]
        blocks.append(rotation.T @ block)
    out = torch.cat(blocks).to(weight.dtype)
    spread = (out.double() @ covariance.double() * out.double()).sum(dim=1).clamp_min(0).sqrt()
    return out, spread.float()


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
