"""adaptemb.train's hooks for fits that are not Adam over epochs: a step budget, an optimiser of the method's own,
early stopping on a measurement every few steps (``Checkpoints``) and batch sources (``Batches``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

import adaptemb
from adaptemb import Checkpoints, TensorBatches, TrainingConfig, train

CONFIG = TrainingConfig(batch_size=4, progress=False, device="cpu", val_fraction=0.0, patience=2, precision="float32")


class Counter(torch.nn.Module):
    """A parameter that plain SGD at lr 1 raises by exactly 1 per step (its loss is ``-w``); ``seen`` is plain
    Python state kept with the weights through ``get_extra_state``."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))
        self.seen = 0
        self.batch_rows: list[int] = []

    def training_loss(self, batch: Sequence[torch.Tensor], step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        self.batch_rows.append(len(batch[0]))
        return -self.w, {}

    def after_optimizer_step(self) -> None:
        self.seen = int(self.w.detach())

    def get_extra_state(self) -> dict[str, Any]:
        return {"seen": self.seen}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.seen = state["seen"]


def _sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=1.0)


def test_a_step_budget_runs_that_many_steps_across_epochs() -> None:
    module = Counter()
    report = train(module, [torch.arange(10.0)], CONFIG, steps=7, optimizer=_sgd)
    assert float(module.w.detach()) == 7.0 and report.steps == 7
    assert module.batch_rows == [4, 4, 2, 4, 4, 2, 4]  # 10 rows in batches of 4: epochs of 3 steps, the third cut short
    assert report.epochs == 3 and not report.stopped_early and report.val_loss is None


def test_checkpoints_stop_after_patience_measurements_and_keep_the_best_state() -> None:
    module = Counter()
    measured: list[tuple[float, float]] = []

    def distance_from_four() -> float:
        measured.append((float(module.w.detach()), (float(module.w.detach()) - 4.0) ** 2))
        return measured[-1][1]

    report = train(module, [torch.arange(10.0)], CONFIG, steps=20, optimizer=_sgd,
                   checkpoints=Checkpoints(distance_from_four, every=2))
    # measured before steps 0, 2, 4, 6, 8: after the best (w=4) two measurements (patience 2) did not improve
    assert [w for w, _ in measured] == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert report.stopped_early and report.steps == 8 and report.extra["best_step"] == 4 and report.val_loss == 0.0
    assert float(module.w.detach()) == 4.0 and module.seen == 4  # the weights and the extra state of step 4


def test_checkpoints_measure_the_last_state_too() -> None:
    module = Counter()
    report = train(module, [torch.arange(10.0)], CONFIG, steps=5, optimizer=_sgd,
                   checkpoints=Checkpoints(lambda: -float(module.w.detach()), every=2))
    assert report.extra["best_step"] == 5 and report.val_loss == -5.0 and float(module.w.detach()) == 5.0
    assert not report.stopped_early


def test_tensor_batches_hold_nothing_out_unless_asked() -> None:
    rows = torch.arange(10)
    plain = TensorBatches([rows], 4, torch.Generator().manual_seed(3))
    assert list(plain.validation()) == [] and plain.steps_per_epoch == 3
    first = torch.cat([batch[0] for batch in plain.epoch()])
    assert torch.equal(first, torch.randperm(10, generator=torch.Generator().manual_seed(3)))  # no draw for a split
    split = TensorBatches.holding_out([rows], 0.2, 4, torch.Generator().manual_seed(3))
    held = torch.cat([batch[0] for batch in split.validation()])
    trained = torch.cat([batch[0] for batch in split.epoch()])
    assert len(held) == 2 and sorted(torch.cat([held, trained]).tolist()) == list(range(10))
    assert isinstance(plain, adaptemb.Batches) and isinstance(split, adaptemb.Batches)
