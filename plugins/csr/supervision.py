"""csr's supervised stage: labelled pairs or labels fine-tune an unsupervised fit for retrieval as it is searched.

A fit with ``pairs`` (query, relevant document) or ``labels`` first trains without them (the unsupervised fit),
then fine-tunes that model with the asymmetric group loss (``CSRObjective.group_loss``): each row's query form
against the k-sparse codes of every row in the batch, the rows of its group positive. Groups: a query and its
document share one; with labels, corpus rows of one label share one; any other row is alone in its own. A seeded
share of the pairs (or labelled rows) is held out: the fine-tune is measured on them (mean reciprocal rank of
the first relevant row among a pool of held-out documents and corpus rows) before its first step and after each
epoch, stops after ``supervised_patience`` epochs without a better measurement and keeps the best state. A second,
disjoint held-out share then decides whether the pairs are kept at all: the fine-tuned model's reciprocal ranks on
it against the unsupervised model's, paired-bootstrapped (``CONFIRM_RESAMPLES``); unless the 95% interval of the
gain lies above ``CONFIRM_MIN_GAIN``, the pairs are declined and the unsupervised model is kept as it was (its codes are the fit
without pairs), and the fit report says so. The stopping share picks the best epoch on itself, so it cannot also
judge that epoch; 500 pairs lifted csr by +0.006 / -0.003 NDCG@10 on other queries of two held-out models.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from adaptemb import Checkpoints, ranking, train
from adaptemb_plugins.csr.config import CSRConfig, loss_settings, steps_per_epoch
from adaptemb_plugins.csr.model import CSRModel
from adaptemb_plugins.csr.objective import CSRObjective

POOL_ROWS = 4096
"""Corpus rows the held-out queries are ranked among, besides the held-out documents."""
MIN_HELD_OUT = 16
"""Fewer held-out queries than this measure nothing reliable: the fine-tune then runs all its epochs (and with
fewer confirming queries than this, the pairs are kept unconfirmed, as the report says)."""
CONFIRM_RESAMPLES = 1000
"""Paired bootstrap resamples of the confirming queries' reciprocal-rank gains."""
CONFIRM_MIN_GAIN = 0.005
"""The pairs are kept only where the 95% interval of the confirming queries' MRR gain lies above this: a gain
smaller than this is not worth a fit that others' queries may not share (a fine-tune on pairs of pure noise moved
every confirming query by the same sliver, +0.0001, an interval above 0)."""


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
    confirm_queries: torch.Tensor
    confirm_groups: torch.Tensor

    def tensors(self) -> list[torch.Tensor]:
        return [self.rows, self.partners, self.groups, self.weights]

    def stopping(self) -> GroupRows:
        """The share that stops the fine-tune (as it is)."""
        return self

    def confirming(self) -> GroupRows:
        """The share that decides whether the fine-tune is kept, as held-out queries against the same pool."""
        return dataclasses.replace(self, held_queries=self.confirm_queries, held_groups=self.confirm_groups)


def group_rows(x: torch.Tensor, pairs: tuple[torch.Tensor, torch.Tensor] | None, labels: torch.Tensor | None,
               held_out: float, pair_weight: float, generator: torch.Generator) -> GroupRows:
    """Training rows and the held-out measurement of normalised corpus rows ``x`` and normalised ``pairs``."""
    n = len(x)
    corpus_groups = labels.long() if labels is not None else torch.arange(n)
    if pairs is not None:
        queries, docs = pairs
        order = torch.randperm(len(queries), generator=generator)
        cut = round(held_out * len(queries))
        held, confirm, kept = order[:cut], order[cut:2 * cut], order[2 * cut:]
        offset = int(corpus_groups.max()) + 1 if n else 0
        pool_rows = torch.randperm(n, generator=generator)[:POOL_ROWS]
        out = order[:2 * cut]
        return GroupRows(
            rows=torch.cat([x, queries[kept]]), partners=torch.cat([x, docs[kept]]),
            groups=torch.cat([corpus_groups, offset + kept]),
            weights=torch.cat([torch.ones(n), torch.full((len(kept),), pair_weight)]),
            held_queries=queries[held], held_groups=offset + held,
            pool=torch.cat([docs[out], x[pool_rows]]), pool_groups=torch.cat([offset + out, torch.full((len(pool_rows),), -1)]),
            confirm_queries=queries[confirm], confirm_groups=offset + confirm)
    order = torch.randperm(n, generator=generator)  # labels (the caller passes pairs or labels)
    cut = round(held_out * n)
    held, confirm, kept = order[:cut], order[cut:2 * cut], order[2 * cut:].sort().values
    pool_rows = kept[torch.randperm(len(kept), generator=generator)[:POOL_ROWS]]
    return GroupRows(rows=x[kept], partners=x[kept], groups=corpus_groups[kept], weights=torch.ones(len(kept)),
                     held_queries=x[held], held_groups=corpus_groups[held], pool=x[pool_rows],
                     pool_groups=corpus_groups[pool_rows], confirm_queries=x[confirm],
                     confirm_groups=corpus_groups[confirm])


def held_out_mrr(scores: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], data: GroupRows) -> float:
    """Mean reciprocal rank of each held-out query's first same-group row of the pool, scored by
    ``scores(queries, pool)`` ((queries, pool) matrix)."""
    if len(data.held_queries) == 0:
        return 0.0
    return float(held_out_ranks(scores, data).mean())


def held_out_ranks(scores: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], data: GroupRows) -> np.ndarray:
    """Each held-out query's reciprocal rank of its first same-group row of the pool (see ``held_out_mrr``)."""
    relevant = data.held_groups[:, None] == data.pool_groups[None, :]
    return ranking.reciprocal_ranks(scores(data.held_queries, data.pool), relevant).numpy()


def gain_interval(before: np.ndarray, after: np.ndarray, seed: int) -> tuple[float, float]:
    """The 95% paired-bootstrap interval of the mean of ``after - before`` (per query)."""
    gains = after - before
    picks = np.random.default_rng(seed).integers(0, len(gains), (CONFIRM_RESAMPLES, len(gains)))
    means = gains[picks].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def fine_tune(model: CSRModel, config: CSRConfig, k: int, normalise: Callable[[torch.Tensor], torch.Tensor],
              rows: torch.Tensor, generator: torch.Generator, pairs: tuple[torch.Tensor, torch.Tensor] | None = None,
              labels: torch.Tensor | None = None) -> tuple[CSRModel, dict[str, Any] | None]:
    """With pairs or labels: ``model`` (trained for ``k``) fine-tuned with the asymmetric group loss on the
    normalised fit ``rows`` and the pairs (as ``normalise`` prepares them) or labels, stopping on one held-out share
    of them, kept when a second share confirms it (else ``model`` itself: the pairs declined), and the
    measurements; without either, ``model`` as it is."""
    if pairs is None and labels is None:
        return model, None
    cfg = config.model_copy(update={"k": k})
    normalised = None if pairs is None else (normalise(pairs[0]), normalise(pairs[1]))
    data = group_rows(rows, normalised, labels, cfg.held_out_share, cfg.pair_weight, generator)
    settings = dataclasses.replace(loss_settings(cfg, 0), cl_coef=0.0, group_coef=cfg.group_coef,
                                   group_temperature=cfg.group_temperature)
    tuned = copy.deepcopy(model)  # ``model`` stays as it is: what a declined fine-tune keeps
    if pairs is not None and cfg.query_map:
        tuned.add_query_map()
    objective = CSRObjective(tuned, settings)
    measured = len(data.held_queries) >= MIN_HELD_OUT
    with torch.no_grad():
        before = held_out_mrr(_scorer(objective.model, cfg.k), data) if measured else None
    tune = cfg.model_copy(update={"epochs": cfg.supervised_epochs, "val_fraction": 0.0, "lr": cfg.supervised_lr,
                                  "patience": cfg.supervised_patience})
    every = steps_per_epoch(tune, data.tensors())
    checkpoints = Checkpoints(lambda: -held_out_mrr(_scorer(objective.model, cfg.k), data), every=every)
    report = train(objective, data.tensors(), tune, description="csr supervised",
                   checkpoints=checkpoints if measured else None)
    tuned = objective.cpu().eval().model
    measurements = {
        "held_out_queries": len(data.held_queries), "held_out_mrr_before": before,
        "held_out_mrr_after": None if report.val_loss is None else -report.val_loss,
        "best_step": report.extra.get("best_step"), "steps": report.steps, "steps_per_epoch": every,
        "seconds": round(report.seconds, 2), **confirm(model, tuned, data.confirming(), cfg)}
    return (tuned if measurements["kept"] else model), measurements


def confirm(before: CSRModel, after: CSRModel, data: GroupRows, config: CSRConfig) -> dict[str, Any]:
    """Whether the fine-tuned model ``after`` is kept: the 95% interval of its reciprocal-rank gain over ``before``
    on the confirming queries lies above ``CONFIRM_MIN_GAIN`` (``kept``; with fewer than ``MIN_HELD_OUT`` of them it is kept
    unconfirmed), with what was measured."""
    count = len(data.held_queries)
    if count < MIN_HELD_OUT:
        return {"kept": True, "confirm_queries": count,
                "decision": f"kept unconfirmed: {count} confirming queries (fewer than {MIN_HELD_OUT})"}
    with torch.no_grad():
        old, new = (held_out_ranks(_scorer(model.eval(), config.k), data) for model in (before, after))
    low, high = gain_interval(old, new, config.seed)
    kept = low > CONFIRM_MIN_GAIN
    verdict = "kept" if kept else "declined: the fit without them is kept (its codes, as if fitted without them)"
    return {"kept": kept, "confirm_queries": count, "confirm_mrr_before": float(old.mean()),
            "confirm_mrr_after": float(new.mean()), "confirm_gain_interval": [low, high],
            "decision": f"{verdict}; MRR gain {float((new - old).mean()):+.4f}, 95% interval [{low:+.4f}, {high:+.4f}] "
                        f"on {count} held-out queries"}


def _scorer(model: CSRModel, k: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``scores(queries, pool)``: each query's form against the pool rows' k-sparse codes, as searched."""
    device = next(model.parameters()).device

    def scores(queries: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
        keys = model.dense_codes(pool.to(device), k)
        return (model.query_pre_activations(queries.to(device)) @ keys.T).cpu()

    return scores
