"""The one training loop every learned method shares.

A method builds a ``torch.nn.Module`` whose ``training_loss(batch, step)`` returns the total loss and
named components, then calls :func:`train` with its :class:`TrainingConfig`. The loop picks the
device (CUDA when present), runs matmuls in bf16 autocast where the hardware does bf16 natively
(``precision="auto"``: CUDA, and CPUs with AVX512-BF16 or AMX), shuffles with the config's seed, holds
out rows for early stopping, shows a progress bar, restores the best weights and returns a
:class:`FitReport`. Weights, optimiser state and losses stay float32 whatever the precision.

Optional module hooks: ``before_optimizer_step()`` (e.g. add a gradient known in closed form, project gradients)
and ``after_optimizer_step()`` (e.g. renormalise decoder columns, apply a proximal operator). A method whose fit
is not Adam over epochs passes its own ``optimizer``, a step budget (``steps``), ``Checkpoints`` (early stopping
on a measurement every few steps) or its own :class:`Batches`; the loop, its seeding, device, progress bar and
report stay the same.
"""

from __future__ import annotations

import copy
import itertools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

import torch
from pydantic import Field

from adaptemb.batches import Batches, StreamBatches, batches_of
from adaptemb.config import CompressorConfig
from adaptemb.devices import resolve_device
from adaptemb.progress import progress_bar


class TrainingConfig(CompressorConfig):
    """Optimisation settings shared by learned methods; a method's config subclasses this."""

    epochs: int = Field(10, ge=1, description="Passes over the training rows (at most).")
    batch_size: int = Field(256, ge=2, description="Rows per optimisation step.")
    lr: float = Field(1e-3, gt=0, description="Adam learning rate.")
    weight_decay: float = Field(0.0, ge=0, description="Adam weight decay.")
    adam_eps: float = Field(1e-8, gt=0, description="Adam epsilon.")
    val_fraction: float = Field(0.05, ge=0, lt=0.5, description="Rows held out for early stopping (0: none).")
    patience: int = Field(2, ge=1, description="Epochs without held-out improvement before stopping.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: CUDA when available, else CPU.")
    progress: bool = Field(True, description="Show a progress bar while fitting.")
    lr_schedule: Literal["constant", "cosine"] = Field(
        "constant", description="constant, or cosine decay from lr to lr_final_fraction·lr over all epochs."
    )
    lr_final_fraction: float = Field(0.1, ge=0, le=1, description="Cosine schedule: final lr as a fraction of lr.")
    precision: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="Matmul precision while training: auto = bfloat16 autocast on CUDA and on CPUs with native "
        "bf16 (AVX512-BF16 / AMX), float32 elsewhere. Inference is always float32.",
    )


class TrainableModule(Protocol):
    """What :func:`train` needs from a method's model."""

    def training_loss(self, batch: Sequence[torch.Tensor], step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Total loss of a batch and its named components (detached or not)."""
        ...


@dataclass
class FitReport:
    """What a fit measured; ``as_dict()`` is JSON-ready and is what ``Compressor.fit_report`` holds."""

    device: str
    seconds: float
    epochs: int
    steps: int
    stopped_early: bool
    train_losses: dict[str, float]
    val_loss: float | None
    precision: str = "float32"
    threads: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Checkpoints:
    """Early stopping on a measurement of the module (lower is better) every ``every`` optimisation steps, in place
    of the held-out loss per epoch: measured (in eval mode, without gradients) before the first step, before every
    ``every``-th step after it and after the last; the fit stops after ``TrainingConfig.patience`` measurements in
    a row that are not lower than the best, and the module keeps its state (``state_dict``, extra state included)
    at the best one. The report's ``val_loss`` is that measurement and ``extra["best_step"]`` its step."""

    measure: Callable[[], float]
    every: int = 1


def train(
    module: torch.nn.Module,
    data: Sequence[torch.Tensor] | StreamBatches | Batches,
    config: TrainingConfig,
    *,
    description: str = "fit",
    steps: int | None = None,
    optimizer: Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer] | None = None,
    checkpoints: Checkpoints | None = None,
) -> FitReport:
    """Optimise ``module.training_loss`` over row batches of ``data``: tensors of equal length held in memory
    (``config.val_fraction`` of their rows held out for early stopping), a :class:`StreamBatches`, or any
    :class:`Batches` (e.g. a :class:`TensorBatches` that holds nothing out).

    ``steps``: run exactly this many optimisation steps (epochs then follow one another until they are done)
    instead of ``config.epochs`` epochs. ``optimizer``: builds the optimiser from the module's parameters (default:
    Adam with the config's lr, eps and weight decay). ``checkpoints``: early stopping on a measurement every few
    steps instead of the held-out loss per epoch. The module is moved to the chosen device and left there in eval
    mode with the best weights. Randomness (shuffling, dropout, noise) is drawn from the config's seed only.
    """
    device = resolve_device(config.device)
    started = time.perf_counter()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(config.seed)
        module.to(device)
        built = _adam(module, config) if optimizer is None else optimizer(module.parameters())
        loop = _Loop(module, device, built, config, checkpoints)
        source = batches_of(data, batch_size=config.batch_size, val_fraction=config.val_fraction, seed=config.seed,
                            device=device)
        report = loop.run(source, description, steps)
    module.eval()
    report.seconds = time.perf_counter() - started
    return report


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 natively: a CUDA GPU that supports it, or a CPU with AVX512-BF16 or AMX
    (where oneDNN's bf16 matmuls run about 3x faster than float32; elsewhere they are emulated, and slower)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    avx512_bf16 = getattr(torch.cpu, "_is_avx512_bf16_supported", None)  # torch's own CPU feature probes
    amx = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool((avx512_bf16 is not None and avx512_bf16()) or (amx is not None and amx()))


def training_dtype(precision: str, device: torch.device) -> torch.dtype:
    """The matmul dtype of the training loop for a config's ``precision`` on ``device``."""
    if precision == "bfloat16" or (precision == "auto" and native_bf16(device)):
        return torch.bfloat16
    return torch.float32


def _adam(module: torch.nn.Module, config: TrainingConfig) -> torch.optim.Optimizer:
    """Adam, fused (one kernel per step instead of a dozen elementwise passes) where torch supports it."""
    options = {"lr": config.lr, "eps": config.adam_eps, "weight_decay": config.weight_decay}
    try:
        return torch.optim.Adam(module.parameters(), fused=True, **options)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(module.parameters(), **options)


def _set_lr(optimizer: torch.optim.Optimizer, config: TrainingConfig, step: int, total_steps: int) -> None:
    """Apply the config's learning-rate schedule for optimisation step ``step`` (0-based)."""
    if config.lr_schedule == "constant":
        return
    progress = min(step / max(total_steps - 1, 1), 1.0)
    final = config.lr_final_fraction
    lr = config.lr * (final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * progress)))
    for group in optimizer.param_groups:
        group["lr"] = lr


class _Loop:
    def __init__(self, module: Any, device: torch.device, optimizer: torch.optim.Optimizer, config: TrainingConfig,
                 checkpoints: Checkpoints | None) -> None:
        self.module, self.device, self.optimizer, self.config = module, device, optimizer, config
        self.checkpoints, self.step = checkpoints, 0
        self.autocast = training_dtype(config.precision, device) == torch.bfloat16
        # a held-out loss per epoch must fall by more than float noise; a checkpoint measurement just be lower
        self.best = _Best(module, config.patience, min_drop=0.0 if checkpoints else 1e-7)

    def loss(self, batch: list[torch.Tensor], step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        batch = [t.to(self.device, non_blocking=True) for t in batch]
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            return self.module.training_loss(batch, step)

    def run(self, source: Batches, description: str, steps: int | None) -> FitReport:
        total = steps if steps is not None else self.config.epochs * source.steps_per_epoch
        bar = progress_bar(total=total, desc=description, enabled=self.config.progress, leave=False)
        epochs_run, train_losses = 0, {}
        for epoch in itertools.count() if steps is not None else range(self.config.epochs):
            self.module.train()
            sums, counts = self.epoch(source, total, steps, bar)
            epochs_run = epoch + 1
            if counts:
                train_losses = {name: float(value) / counts for name, value in sums.items()}
            val = None if self.checkpoints else self.validation_loss(source, self.step)
            bar.set_postfix(loss=f"{train_losses.get('loss', 0.0):.4f}", val=f"{val:.4f}" if val is not None else "-")
            if val is not None:
                self.best.observe(val, self.step)
            if self.best.stopped or (steps is not None and (self.step >= steps or not counts)):
                break
        bar.close()
        stopped_early = self.best.stopped
        if self.checkpoints is not None and not stopped_early:
            self.checkpoint()  # the last state is a candidate too
        self.best.restore()
        return FitReport(
            device=str(self.device), seconds=0.0, epochs=epochs_run, steps=self.step, stopped_early=stopped_early,
            train_losses=train_losses, val_loss=None if self.best.value == math.inf else self.best.value,
            precision="bfloat16" if self.autocast else "float32", threads=torch.get_num_threads(),
            extra={} if self.checkpoints is None else {"best_step": self.best.step},
        )

    def epoch(self, source: Batches, total: int, steps: int | None, bar: Any) -> tuple[dict[str, torch.Tensor], int]:
        """One pass of optimisation steps: (each loss component summed on the device, the steps taken)."""
        sums: dict[str, torch.Tensor] = {}
        counts = 0
        for batch in source.epoch():
            if len(batch[0]) < 2:
                continue
            if steps is not None and self.step >= steps:
                break
            if self.checkpoints is not None and self.step % self.checkpoints.every == 0 and self.checkpoint():
                break
            total_loss, parts = self.loss(batch, self.step)
            self.optimizer.zero_grad(set_to_none=True)
            total_loss.backward()
            _call_hook(self.module, "before_optimizer_step")
            _set_lr(self.optimizer, self.config, self.step, total)
            self.optimizer.step()
            _call_hook(self.module, "after_optimizer_step")
            self.step += 1
            counts += 1
            for name, value in {"loss": total_loss, **parts}.items():
                # summed on the device: no host sync per step (matters on CUDA)
                sums[name] = sums.get(name, 0.0) + torch.as_tensor(value).detach().float()
            bar.update(1)
        return sums, counts

    def checkpoint(self) -> bool:
        """Measure the module now (``Checkpoints.measure``); True once the fit should stop."""
        assert self.checkpoints is not None
        self.module.eval()
        with torch.no_grad():
            value = float(self.checkpoints.measure())
        self.module.train()
        return self.best.observe(value, self.step)

    @torch.no_grad()
    def validation_loss(self, source: Batches, step: int) -> float | None:
        self.module.eval()
        total, weight = 0.0, 0
        for batch in source.validation():
            if len(batch[0]) < 2:
                continue
            loss, _ = self.loss(batch, step)
            total += float(loss) * len(batch[0])
            weight += len(batch[0])
        return total / weight if weight else None


class _Best:
    """The lowest value measured so far, its step and the module's state then; ``stopped`` once ``patience``
    measurements in a row were not lower than the best by more than ``min_drop``."""

    def __init__(self, module: torch.nn.Module, patience: int, min_drop: float) -> None:
        self.module, self.patience, self.min_drop = module, patience, min_drop
        self.value, self.step, self.misses, self.stopped = math.inf, 0, 0, False
        self.state: dict[str, Any] | None = None

    def observe(self, value: float, step: int) -> bool:
        if value < self.value - self.min_drop:
            self.value, self.step, self.misses = value, step, 0
            self.state = copy.deepcopy(self.module.state_dict())
        else:
            self.misses += 1
            self.stopped = self.misses >= self.patience
        return self.stopped

    def restore(self) -> None:
        if self.state is not None:
            self.module.load_state_dict(self.state)


def _call_hook(module: Any, name: str) -> None:
    hook = getattr(module, name, None)
    if hook is not None:
        hook()
