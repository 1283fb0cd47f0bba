"""csr's per-budget heads: with ``byte_budgets`` a fit keeps, beside the main fit (at the config's k), models
fine-tuned for the small k a byte budget holds.

For each budget whose code holds at most ``HEAD_MAX_SHARE`` of the main fit's k (at ``HEAD_VALUE_BITS`` bits per
value), the main fit is fine-tuned for ``head_epochs`` epochs with k annealed down to that k, then fine-tuned on
the supervision (if any) and given its own value tables, as the main fit is; it is kept when its best code of that
size recalls more of the held-out slice than the main fit's. A compressor encodes at k with the head trained for
the smallest k at or above it (``serving``): a head's codes cut wider than it was trained for lost to the main
fit's (k = 13 from the head trained for 6: 0.151 NDCG@10 against 0.163 on the built-in data).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch

from adaptemb import PackedSparseCodes, train
from adaptemb_plugins.csr.config import CSRConfig, anneal_steps, loss_settings
from adaptemb_plugins.csr.model import CSRModel
from adaptemb_plugins.csr.objective import CSRObjective, dead_fraction, own_partners
from adaptemb_plugins.csr.values import ValueTables

HEAD_VALUE_BITS = 2
"""A head fitted for a byte budget trains for the k its packed code holds at this many bits per value."""
HEAD_MAX_SHARE = 1 / 3
"""Heads are fitted for budgets whose k is at most this share of the main fit's k: heads at k = 12-19 (24-32 B)
gained at most 0.005 NDCG@10 over the main fit on the built-in data and the 768-d stand-in, heads at k = 4-6 (8-10 B)
0.009-0.024 (docs/results.md)."""

FineTune = Callable[[CSRModel, int], tuple[CSRModel, dict[str, Any] | None]]
"""``(model, k) -> (model, measurements)``: the supervised fine-tune of a model trained for k (as it is without
supervision: ``csr.supervision.fine_tune``)."""
MeasureValues = Callable[[CSRModel], ValueTables | None]
"""A model's value codebooks and choice table (``csr.values``), or None for float16 values."""


@dataclasses.dataclass
class Head:
    """A model trained for ``k`` (fitted for the byte budget ``nbytes``; 0: the main fit, at the config's k), its
    value tables and, with supervision, what the fine-tune measured."""

    k: int
    nbytes: int
    model: CSRModel
    tables: ValueTables | None
    supervised: dict[str, Any] | None = None

    def recall_within(self, nbytes: float, owner: Callable[[int], Head] | None = None) -> float:
        """The best held-out recall@10 of this head's codes that fit ``nbytes`` (at the k ``owner`` gives it)."""
        return -1.0 if self.tables is None else self.tables.recall_within(nbytes, self._owned(owner))

    def budget_for_bytes(self, nbytes: float, owner: Callable[[int], Head] | None = None) -> int | None:
        """The k of this head's best code that fits ``nbytes`` (among the k ``owner`` gives it), if any."""
        return None if self.tables is None else self.tables.budget_for_bytes(nbytes, self._owned(owner))

    def _owned(self, owner: Callable[[int], Head] | None) -> Callable[[int], bool] | None:
        return None if owner is None else (lambda k: owner(k) is self)

    def state(self) -> dict[str, torch.Tensor]:
        """The model's tensors and, when it has them, the value tables' (``codebooks``, ``choices``)."""
        tables = {} if self.tables is None else {"codebooks": self.tables.codebooks, "choices": self.tables.choices}
        return {**self.model.state(), **tables}

    @classmethod
    def from_state(cls, tensors: dict[str, torch.Tensor], k: int, nbytes: int, normalize: str) -> Head:
        """The head ``state`` wrote, trained for ``k`` and fitted for ``nbytes``."""
        model = CSRModel.from_state({n: t for n, t in tensors.items() if n not in ("codebooks", "choices")},
                                    normalize=normalize)
        tables = ValueTables(tensors["codebooks"], tensors["choices"], k) if "codebooks" in tensors else None
        return cls(k, nbytes, model, tables)


def serving(heads: list[Head], k: int) -> Head:
    """The head that encodes at ``k``: the one trained for the smallest k at or above it (the largest, the main fit,
    above them all)."""
    return min((head for head in heads if head.k >= k), key=lambda head: head.k, default=max(heads, key=lambda head: head.k))


def head_k(nbytes: int, hidden: int) -> int:
    """The k a head fitted for ``nbytes`` per vector trains for: the packed code's k at ``HEAD_VALUE_BITS``."""
    return PackedSparseCodes.max_k_within(nbytes, hidden, HEAD_VALUE_BITS)


def finish_head(model: CSRModel, k: int, nbytes: int, fine_tune: FineTune, measure_values: MeasureValues) -> Head:
    """A trained model, fine-tuned on the supervision (if any), with its value codebooks and choice table."""
    model, supervised = fine_tune(model, k)
    tables = measure_values(model)
    return Head(k, nbytes, model, None if tables is None else dataclasses.replace(tables, trained_k=k), supervised)


def fit_heads(model: CSRModel, config: CSRConfig, rows: torch.Tensor, fine_tune: FineTune,
              measure_values: MeasureValues) -> tuple[list[Head], list[dict[str, Any]]]:
    """(heads sorted by k, a report per byte budget): the main head from the trained ``model``; then, for each of
    ``byte_budgets`` whose code holds at most a third of the main fit's k, a head fine-tuned from the main fit on
    the normalised fit ``rows`` with k annealed down to the k the budget holds at ``HEAD_VALUE_BITS``, kept when its
    best code of that size recalls more of the held-out slice than the main fit's (the report says which)."""
    main = finish_head(model, config.k, 0, fine_tune, measure_values)
    heads, reports = [main], []
    for nbytes in sorted(set(config.byte_budgets or ()), reverse=True):
        k = head_k(nbytes, main.model.hidden)
        if k < 1 or k > HEAD_MAX_SHARE * main.k:
            reports.append({"bytes": nbytes, "k": k, "kept": False,
                            "why": f"served by the main fit (k={main.k}): heads are fitted up to k = {main.k}/3"})
            continue
        started = time.perf_counter()
        tuned, dead = anneal_head(main.model, config, main.k, k, rows)
        head = finish_head(tuned, k, nbytes, fine_tune, measure_values)
        own, cut = head.recall_within(nbytes), main.recall_within(nbytes)
        kept = own > cut
        if kept:
            heads.append(head)
        reports.append({"bytes": nbytes, "k": k, "kept": kept, "held_out_recall@10": own,
                        "main_fit_recall@10": cut, "seconds": round(time.perf_counter() - started, 2), **dead,
                        **({"supervised": head.supervised} if head.supervised else {})})
    heads.sort(key=lambda head: head.k)
    return heads, reports


def anneal_head(model: CSRModel, config: CSRConfig, k_from: int, k: int,
                rows: torch.Tensor) -> tuple[CSRModel, dict[str, float]]:
    """``model`` fine-tuned on ``rows`` for ``head_epochs`` epochs with k falling from ``k_from`` to ``k``; the
    dead-latent fractions at k before and after."""
    tune = config.model_copy(update={"epochs": config.head_epochs, "k": k, "k_start": k_from, "val_fraction": 0.0})
    data = own_partners(rows)
    objective = CSRObjective(copy.deepcopy(model), loss_settings(tune, anneal_steps(tune, data)))
    before = dead_fraction(model, rows, k)
    train(objective, data, tune, description=f"csr k={k}")
    model = objective.cpu().eval().model
    return model, {"dead_fraction_before": before, "dead_fraction_after": dead_fraction(model, rows, k)}
