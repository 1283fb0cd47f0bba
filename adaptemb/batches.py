"""Where the training loop's batches come from (``adaptemb.train``): rows held in memory (:class:`TensorBatches`), a
stream read pass by pass (:class:`StreamBatches`), or anything else that follows the :class:`Batches` protocol."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from adaptemb.rows import RowStream


@runtime_checkable
class Batches(Protocol):
    """Where the loop's batches come from: ``epoch()`` is one pass (about ``steps_per_epoch`` batches, each a list
    of tensors for ``training_loss``), ``validation()`` the held-out batches whose mean loss early stopping
    watches (none: no early stopping by held-out loss)."""

    steps_per_epoch: int

    def epoch(self) -> Iterator[list[torch.Tensor]]: ...

    def validation(self) -> Iterator[list[torch.Tensor]]: ...


class TensorBatches:
    """Batches of rows of tensors held in memory, a fresh permutation drawn from ``generator`` per epoch (the last
    batch may be short); the rows at ``held_out`` are left out of training and are the validation batches.
    ``holding_out`` draws that split; built directly, every row trains and nothing is drawn for a split."""

    def __init__(self, tensors: Sequence[torch.Tensor], batch_size: int, generator: torch.Generator, *,
                 training: torch.Tensor | None = None, held_out: torch.Tensor | None = None) -> None:
        if any(len(t) != len(tensors[0]) for t in tensors):
            raise ValueError("all training tensors must have the same number of rows")
        self.tensors, self.generator, self.batch_size = tensors, generator, batch_size
        self.train_idx = torch.arange(len(tensors[0])) if training is None else training
        self.val_idx = torch.arange(0) if held_out is None else held_out
        self.steps_per_epoch = max(1, math.ceil(len(self.train_idx) / batch_size))

    @classmethod
    def holding_out(cls, tensors: Sequence[torch.Tensor], fraction: float, batch_size: int,
                    generator: torch.Generator) -> TensorBatches:
        """Batches of ``tensors`` with a random ``fraction`` of the rows held out (none when that leaves fewer
        than two rows on either side); the split is the first permutation drawn from ``generator``."""
        rows = len(tensors[0])
        order = torch.randperm(rows, generator=generator)
        held = int(rows * fraction)
        if held < 2 or rows - held < 2:
            return cls(tensors, batch_size, generator, training=order)
        return cls(tensors, batch_size, generator, training=order[held:], held_out=order[:held])

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
        return [t[idx] for t in self.tensors]


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


class _StreamEpochs:
    """Batches of a :class:`StreamBatches`: one shuffled pass over the stream per epoch, seeded by ``seed``."""

    def __init__(self, data: StreamBatches, batch_size: int, seed: int) -> None:
        self.data, self.batch_size = data, batch_size
        self.rng = np.random.default_rng(seed)
        self.steps_per_epoch = data.steps_per_epoch(batch_size)

    def epoch(self) -> Iterator[list[torch.Tensor]]:
        for rows in self.data.stream.shuffled_batches(self.batch_size, self.rng, self.data.held_out):
            yield self.data.prepare(rows)

    def validation(self) -> Iterator[list[torch.Tensor]]:
        held = self.data.validation
        for start in range(0, len(held[0]) if held else 0, self.batch_size):
            yield [t[start : start + self.batch_size] for t in held]


def batches_of(data: Sequence[torch.Tensor] | StreamBatches | Batches, *, batch_size: int, val_fraction: float,
               seed: int, device: torch.device) -> Batches:
    """The :class:`Batches` ``train`` reads: ``data`` itself when it is one; a :class:`StreamBatches` passed over
    with a generator of ``seed``; tensors (on CUDA, copied to the device when they fit) with ``val_fraction`` of
    their rows held out by the first permutation of a ``seed`` generator."""
    if isinstance(data, StreamBatches):
        return _StreamEpochs(data, batch_size, seed)
    if isinstance(data, Batches):
        return data
    generator = torch.Generator().manual_seed(seed)
    return TensorBatches.holding_out(_stage(data, device), val_fraction, batch_size, generator)


def _stage(tensors: Sequence[torch.Tensor], device: torch.device) -> Sequence[torch.Tensor]:
    """On CUDA, copy the training tensors to the device once when they take at most a quarter of
    its free memory (batches are then gathered on the GPU); otherwise leave them where they are."""
    if device.type != "cuda":
        return tensors
    free, _ = torch.cuda.mem_get_info(device)
    if sum(t.numel() * t.element_size() for t in tensors) > free // 4:
        return tensors
    return [t.to(device) for t in tensors]


