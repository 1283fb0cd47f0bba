"""The one training loop every learned method shares.

A method builds a ``torch.nn.Module`` whose ``training_loss(batch, step)`` returns the total loss and
named components, then calls :func:`train` with its :class:`TrainingConfig`. The loop picks the
device (CUDA when present), runs matmuls in bf16 autocast where the hardware does bf16 natively
(``precision="auto"``: CUDA, and CPUs with AVX512-BF16 or AMX), shuffles with the config's seed, holds
out rows for early stopping, shows a progress bar, restores the best weights and returns a
:class:`FitReport`. Weights, optimiser state and losses stay float32 whatever the precision.

Optional module hooks: ``before_optimizer_step()`` (e.g. project gradients) and
``after_optimizer_step()`` (e.g. renormalise decoder columns).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import torch
from pydantic import Field

from adaptemb.config import CompressorConfig
from adaptemb.devices import resolve_device
from adaptemb.progress import progress_bar
from adaptemb.rows import RowStream


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
class StreamBatches:
    """Training data read from a :class:`~adaptemb.rows.RowStream` instead of held in memory.

    Each epoch is one shuffled pass over the stream (``RowStream.shuffled_batches``) leaving out the rows at
    positions ``held_out``; ``prepare`` turns a batch of validated rows into the tensors the module's
    ``training_loss`` takes (e.g. normalised rows and their partners); ``validation`` is the prepared
    held-out rows (in memory, for early stopping), or empty for none.
    """

    stream: RowStream
    prepare: Callable[[torch.Tensor], list[torch.Tensor]]
    held_out: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    validation: list[torch.Tensor] = field(default_factory=list)

    def steps_per_epoch(self, batch_size: int) -> int:
        rows = (self.stream.kept_rows if self.stream.rows is not None else batch_size) - len(self.held_out)
        return max(1, math.ceil(rows / batch_size))

    @classmethod
    def holding_out(cls, stream: RowStream, prepare: Callable[[torch.Tensor], list[torch.Tensor]],
                    sample: tuple[np.ndarray, torch.Tensor], fraction: float, seed: int) -> StreamBatches:
        """Batches of ``stream`` with ``fraction`` of the rows of ``sample`` (positions, rows: from
        ``RowStream.sample``) held out of training for early stopping, as ``train`` holds out in-memory rows."""
        positions, rows = sample
        held = int(len(positions) * fraction)
        if held < 2 or len(positions) - held < 2:
            return cls(stream, prepare)
        chosen = torch.randperm(len(positions), generator=torch.Generator().manual_seed(seed))[:held]
        return cls(stream, prepare, np.sort(positions[chosen.numpy()]), prepare(rows[chosen]))


def train(
    module: torch.nn.Module,
    data: Sequence[torch.Tensor] | StreamBatches,
    config: TrainingConfig,
    *,
    description: str = "fit",
) -> FitReport:
    """Optimise ``module.training_loss`` over row batches of ``data``: tensors of equal length held in memory
    (``config.val_fraction`` of their rows held out for early stopping), or a :class:`StreamBatches`.

    The module is moved to the chosen device and left there in eval mode with the best held-out
    weights. Randomness (shuffling, dropout, noise) is drawn from the config's seed only.
    """
    if not isinstance(data, StreamBatches) and any(len(t) != len(data[0]) for t in data):
        raise ValueError("all training tensors must have the same number of rows")
    device = resolve_device(config.device)
    started = time.perf_counter()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(config.seed)
        generator = torch.Generator().manual_seed(config.seed)
        module.to(device)
        loop = _Loop(module, device, _adam(module, config), config)
        source = _StreamEpochs(data, config) if isinstance(data, StreamBatches) else _TensorEpochs(data, config, device, generator)
        report = loop.run(source, description)
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


def _split(rows: int, fraction: float, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    order = torch.randperm(rows, generator=generator)
    held_out = int(rows * fraction)
    if held_out < 2 or rows - held_out < 2:
        return order, order[:0]
    return order[held_out:], order[:held_out]


class _Epochs(Protocol):
    """Where a training loop's batches come from: one shuffled pass per call of ``epoch``."""

    steps_per_epoch: int

    def epoch(self) -> Iterator[list[torch.Tensor]]: ...

    def validation(self) -> Iterator[list[torch.Tensor]]: ...


class _TensorEpochs:
    """Batches of rows of tensors held in memory, a fresh permutation per epoch; rows held out by ``_split``."""

    def __init__(self, tensors: Sequence[torch.Tensor], config: TrainingConfig, device: torch.device,
                 generator: torch.Generator) -> None:
        self.tensors, self.device, self.generator, self.batch_size = _stage(tensors, device), device, generator, config.batch_size
        self.train_idx, self.val_idx = _split(len(tensors[0]), config.val_fraction, config.batch_size, generator)
        self.steps_per_epoch = max(1, math.ceil(len(self.train_idx) / config.batch_size))

    def epoch(self) -> Iterator[list[torch.Tensor]]:
        order = self.train_idx[torch.randperm(len(self.train_idx), generator=self.generator)]
        for start in range(0, len(order), self.batch_size):
            yield self._rows(order[start : start + self.batch_size])

    def validation(self) -> Iterator[list[torch.Tensor]]:
        for start in range(0, len(self.val_idx), self.batch_size):
            yield self._rows(self.val_idx[start : start + self.batch_size])

    def _rows(self, idx: torch.Tensor) -> list[torch.Tensor]:
        if self.tensors and self.tensors[0].device != idx.device:
            idx = idx.to(self.tensors[0].device, non_blocking=True)
        return [t[idx].to(self.device, non_blocking=True) for t in self.tensors]


class _StreamEpochs:
    """Batches of a :class:`StreamBatches`: one shuffled pass over the stream per epoch, seeded by the config."""

    def __init__(self, data: StreamBatches, config: TrainingConfig) -> None:
        self.data, self.batch_size = data, config.batch_size
        self.rng = np.random.default_rng(config.seed)
        self.steps_per_epoch = data.steps_per_epoch(config.batch_size)

    def epoch(self) -> Iterator[list[torch.Tensor]]:
        for rows in self.data.stream.shuffled_batches(self.batch_size, self.rng, self.data.held_out):
            yield self.data.prepare(rows)

    def validation(self) -> Iterator[list[torch.Tensor]]:
        held = self.data.validation
        for start in range(0, len(held[0]) if held else 0, self.batch_size):
            yield [t[start : start + self.batch_size] for t in held]


class _Loop:
    def __init__(self, module: Any, device: torch.device, optimizer: torch.optim.Optimizer, config: TrainingConfig) -> None:
        self.module, self.device, self.optimizer, self.config = module, device, optimizer, config
        self.autocast = training_dtype(config.precision, device) == torch.bfloat16

    def loss(self, batch: list[torch.Tensor], step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        batch = [t.to(self.device, non_blocking=True) for t in batch]
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            return self.module.training_loss(batch, step)

    def run(self, source: _Epochs, description: str) -> FitReport:
        config = self.config
        steps_per_epoch = source.steps_per_epoch
        best_val, best_state, bad_epochs, stopped_early = math.inf, None, 0, False
        step, epochs_run, sums = 0, 0, {}
        bar = progress_bar(total=config.epochs * steps_per_epoch, desc=description, enabled=config.progress, leave=False)
        for epoch in range(config.epochs):
            self.module.train()
            sums, counts = {}, 0
            for batch in source.epoch():
                if len(batch[0]) < 2:
                    continue
                total, parts = self.loss(batch, step)
                self.optimizer.zero_grad(set_to_none=True)
                total.backward()
                _call_hook(self.module, "before_optimizer_step")
                _set_lr(self.optimizer, config, step, config.epochs * steps_per_epoch)
                self.optimizer.step()
                _call_hook(self.module, "after_optimizer_step")
                step += 1
                counts += 1
                for name, value in {"loss": total, **parts}.items():
                    # summed on the device: no host sync per step (matters on CUDA)
                    sums[name] = sums.get(name, 0.0) + torch.as_tensor(value).detach().float()
                bar.update(1)
            epochs_run = epoch + 1
            val = self.validation_loss(source, step)
            sums = {name: float(value) for name, value in sums.items()}
            bar.set_postfix(loss=f"{sums.get('loss', 0.0) / max(counts, 1):.4f}", val=f"{val:.4f}" if val is not None else "-")
            if val is None:
                continue
            if val < best_val - 1e-7:
                best_val, bad_epochs = val, 0
                best_state = copy.deepcopy(self.module.state_dict())
            else:
                bad_epochs += 1
                if bad_epochs >= config.patience:
                    stopped_early = True
                    break
        bar.close()
        if best_state is not None:
            self.module.load_state_dict(best_state)
        train_losses = {name: value / max(counts, 1) for name, value in sums.items()}
        return FitReport(
            device=str(self.device), seconds=0.0, epochs=epochs_run, steps=step, stopped_early=stopped_early,
            train_losses=train_losses, val_loss=None if best_val == math.inf else best_val,
            precision="bfloat16" if self.autocast else "float32", threads=torch.get_num_threads(),
        )

    @torch.no_grad()
    def validation_loss(self, source: _Epochs, step: int) -> float | None:
        self.module.eval()
        total, weight = 0.0, 0
        for batch in source.validation():
            if len(batch[0]) < 2:
                continue
            loss, _ = self.loss(batch, step)
            total += float(loss) * len(batch[0])
            weight += len(batch[0])
        return total / weight if weight else None


def _stage(tensors: Sequence[torch.Tensor], device: torch.device) -> Sequence[torch.Tensor]:
    """On CUDA, copy the training tensors to the device once when they take at most a quarter of
    its free memory (batches are then gathered on the GPU); otherwise leave them where they are."""
    if device.type != "cuda":
        return tensors
    free, _ = torch.cuda.mem_get_info(device)
    if sum(t.numel() * t.element_size() for t in tensors) > free // 4:
        return tensors
    return [t.to(device) for t in tensors]


def _call_hook(module: Any, name: str) -> None:
    hook = getattr(module, name, None)
    if hook is not None:
        hook()
