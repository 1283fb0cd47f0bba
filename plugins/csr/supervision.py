"""csr's supervised stage: labelled pairs or labels fine-tune an unsupervised fit for retrieval as it is searched.

A fit with ``pairs`` (query, relevant document) or ``labels`` first trains without them (the unsupervised fit),
then fine-tunes that model with the asymmetric group loss (``CSRObjective.group_loss``): each row's query form
against the k-sparse codes of every row in the batch, the rows of its group positive. Groups: a query and its
document share one; with labels, corpus rows of one label share one; any other row is alone in its own. A seeded
share of the pairs (or labelled rows) is held out: the fine-tune is measured on them (mean reciprocal rank of
the first relevant row among a pool of held-out documents and corpus rows) before its first step and after each
epoch, stops after ``supervised_patience`` epochs without a better measurement and keeps the best state, so the
unsupervised model is kept when the pairs do not help on them.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from adaptemb import Checkpoints, ranking, train
from adaptemb_plugins.csr.config import CSRConfig, loss_settings, steps_per_epoch
from adaptemb_plugins.csr.model import CSRModel
from adaptemb_plugins.csr.objective import CSRObjective

POOL_ROWS = 4096
"""Corpus rows the held-out queries are ranked among, besides the held-out documents."""
MIN_HELD_OUT = 16
"""Fewer held-out queries than this measure nothing reliable: the fine-tune then runs all its epochs."""


@dataclass(frozen=True)
class GroupRows:
    """The fine-tune's training rows (``rows``: anchors, ``partners``: their keys, ``groups``, ``weights``) and the
    held-out queries with their pool of documents and group ids (empty where nothing is held out)."""

    rows: torch.Tensor
    partners: torch.Tensor
    groups: torch.Tensor
    weights: torch.Tensor
    held_queries: torch.Tensor
    held_groups: torch.Tensor
    pool: torch.Tensor
    pool_groups: torch.Tensor

    def tensors(self) -> list[torch.Tensor]:
        return [self.rows, self.partners, self.groups, self.weights]


def group_rows(x: torch.Tensor, pairs: tuple[torch.Tensor, torch.Tensor] | None, labels: torch.Tensor | None,
               held_out: float, pair_weight: float, generator: torch.Generator) -> GroupRows:
    """Training rows and the held-out measurement of normalised corpus rows ``x`` and normalised ``pairs``."""
    n = len(x)
    corpus_groups = labels.long() if labels is not None else torch.arange(n)
    if pairs is not None:
        queries, docs = pairs
        order = torch.randperm(len(queries), generator=generator)
        cut = round(held_out * len(queries))
        held, kept = order[:cut], order[cut:]
        offset = int(corpus_groups.max()) + 1 if n else 0
        pool_rows = torch.randperm(n, generator=generator)[:POOL_ROWS]
        return GroupRows(
            rows=torch.cat([x, queries[kept]]), partners=torch.cat([x, docs[kept]]),
            groups=torch.cat([corpus_groups, offset + kept]),
            weights=torch.cat([torch.ones(n), torch.full((len(kept),), pair_weight)]),
            held_queries=queries[held], held_groups=offset + held,
            pool=torch.cat([docs[held], x[pool_rows]]), pool_groups=torch.cat([offset + held, torch.full((len(pool_rows),), -1)]))
    order = torch.randperm(n, generator=generator)  # labels (the caller passes pairs or labels)
    cut = round(held_out * n)
    held, kept = order[:cut], order[cut:].sort().values
    pool_rows = kept[torch.randperm(len(kept), generator=generator)[:POOL_ROWS]]
    return GroupRows(rows=x[kept], partners=x[kept], groups=corpus_groups[kept], weights=torch.ones(len(kept)),
                     held_queries=x[held], held_groups=corpus_groups[held], pool=x[pool_rows],
                     pool_groups=corpus_groups[pool_rows])


def held_out_mrr(scores: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], data: GroupRows) -> float:
    """Mean reciprocal rank of each held-out query's first same-group row of the pool, scored by
    ``scores(queries, pool)`` ((queries, pool) matrix)."""
    if len(data.held_queries) == 0:
        return 0.0
    relevant = data.held_groups[:, None] == data.pool_groups[None, :]
    return float(ranking.reciprocal_ranks(scores(data.held_queries, data.pool), relevant).mean())


def fine_tune(model: CSRModel, config: CSRConfig, k: int, normalise: Callable[[torch.Tensor], torch.Tensor],
              rows: torch.Tensor, generator: torch.Generator, pairs: tuple[torch.Tensor, torch.Tensor] | None = None,
              labels: torch.Tensor | None = None) -> tuple[CSRModel, dict[str, Any] | None]:
    """With pairs or labels: ``model`` (trained for ``k``) fine-tuned with the asymmetric group loss on the
    normalised fit ``rows`` and the pairs (as ``normalise`` prepares them) or labels, stopping on the held-out
    share of them, and its measurements; else ``model`` as it is."""
    if pairs is None and labels is None:
        return model, None
    cfg = config.model_copy(update={"k": k})
    normalised = None if pairs is None else (normalise(pairs[0]), normalise(pairs[1]))
    data = group_rows(rows, normalised, labels, cfg.held_out_share, cfg.pair_weight, generator)
    settings = dataclasses.replace(loss_settings(cfg, 0), cl_coef=0.0, group_coef=cfg.group_coef,
                                   group_temperature=cfg.group_temperature)
    if pairs is not None and cfg.query_map:
        model = copy.deepcopy(model)
        model.add_query_map()
    objective = CSRObjective(model, settings)

    def measure() -> float:
        model = objective.model
        device = next(model.parameters()).device

        def scores(queries: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
            keys = model.dense_codes(pool.to(device), cfg.k)
            return (model.query_pre_activations(queries.to(device)) @ keys.T).cpu()

        return -held_out_mrr(scores, data)

    measured = len(data.held_queries) >= MIN_HELD_OUT
    with torch.no_grad():
        before = -measure() if measured else None
    tune = cfg.model_copy(update={"epochs": cfg.supervised_epochs, "val_fraction": 0.0, "lr": cfg.supervised_lr,
                                  "patience": cfg.supervised_patience})
    every = steps_per_epoch(tune, data.tensors())
    report = train(objective, data.tensors(), tune, description="csr supervised",
                   checkpoints=Checkpoints(measure, every=every) if measured else None)
    return objective.cpu().eval().model, {
        "held_out_queries": len(data.held_queries), "held_out_mrr_before": before,
        "held_out_mrr_after": None if report.val_loss is None else -report.val_loss,
        "best_step": report.extra.get("best_step"), "steps": report.steps, "steps_per_epoch": every,
        "seconds": round(report.seconds, 2)}
