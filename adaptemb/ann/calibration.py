"""The recall knob: how many cells a search must probe to reach a recall, measured on calibration queries.

A scan scores every row of the cells it probes exactly, so a query finds one of its exact top-k documents exactly
when it probes that document's cell. Hence one exact search of the calibration queries gives the whole curve: the
rank (in the query's routing order) of the cell holding each of its top-k documents, and for every probe count
``p`` the share of top-k documents whose cell ranks below ``p``. ``recall[p - 1]`` is that share averaged over the
queries; ``nprobe_for(target)`` is the smallest ``p`` reaching ``target``.

The count chosen for a target is the smallest whose recall is reached with confidence: the mean over the
calibration queries less ``CONFIDENCE_Z`` standard errors (a one-sided 97.5 % bound; ``lower``), since the mean of
a thousand queries is itself an estimate.

At build the calibration queries are held-out rows of the indexed set (rows the cells were not trained on), made
into queries the way the compressor makes queries (decoded and encoded as queries, or the scorer's stand-ins);
each row's own document is left out of its top-k. ``AnnIndex.tune(queries)`` recomputes the curve on the user's
own queries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adaptemb.errors import InvalidConfigError

CONFIDENCE_Z = 1.96
"""Standard errors taken off the mean recall before a probe count is said to reach a target."""


@dataclass(frozen=True)
class Calibration:
    """``recall[p - 1]``: mean recall@``top_k`` against the exact top-k when probing ``p`` cells (p = 1 .. cells);
    ``lower[p - 1]``: its lower confidence bound."""

    recall: np.ndarray
    lower: np.ndarray
    top_k: int
    queries: int
    source: str

    def nprobe_for(self, target: float) -> int:
        """The fewest probes whose recall reaches ``target`` (in (0, 1]) with confidence (``lower``)."""
        check_recall(target)
        reached = np.flatnonzero(self.lower >= target - 1e-9)
        return int(reached[0]) + 1 if len(reached) else len(self.lower)

    def recall_at(self, nprobe: int) -> float:
        """The calibrated recall when probing ``nprobe`` cells."""
        return float(self.recall[min(max(int(nprobe), 1), len(self.recall)) - 1])

    def summary(self) -> dict[str, object]:
        """A JSON-ready description: probes needed for common recall levels, and where the curve came from."""
        levels = (0.8, 0.9, 0.95, 0.98, 0.99)
        return {"top_k": self.top_k, "queries": self.queries, "source": self.source,
                "nprobe_for": {str(level): self.nprobe_for(level) for level in levels}}


def check_recall(target: object) -> float:
    """``target`` as a float in (0, 1], or one clear error."""
    if isinstance(target, bool) or not isinstance(target, (int, float, np.floating)) or not 0 < float(target) <= 1:
        raise InvalidConfigError(f"recall must be a number in (0, 1], e.g. 0.95; got {target!r}")
    return float(target)


def recall_curves(cell_ranks: np.ndarray, cells: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean, lower bound) over queries of the share of top-k documents found when probing 1 .. ``cells`` cells, from
    the routing rank of each top-k document's cell: ``cell_ranks`` (queries, k), -1 where a query has fewer."""
    valid = cell_ranks >= 0
    counts = np.maximum(valid.sum(axis=1), 1)
    per_query = np.zeros((len(cell_ranks), cells), np.float32)
    rows = np.repeat(np.arange(len(cell_ranks)), cell_ranks.shape[1]).reshape(cell_ranks.shape)
    np.add.at(per_query, (rows[valid], cell_ranks[valid]), 1.0)
    per_query = np.cumsum(per_query, axis=1) / counts[:, None]
    mean = per_query.mean(axis=0)
    spread = per_query.std(axis=0, ddof=1) if len(per_query) > 1 else np.ones(cells, np.float32)
    lower = mean - CONFIDENCE_Z * spread / np.sqrt(len(per_query))
    return mean.astype(np.float32), np.minimum(lower, mean).astype(np.float32)


def routing_ranks(order: np.ndarray, doc_cells: np.ndarray) -> np.ndarray:
    """The rank of each document's cell in its query's routing ``order`` (queries, cells): ``doc_cells`` (queries,
    k) cell numbers, -1 for none (rank -1)."""
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(order.shape[1])[None, :], axis=1)
    found = np.take_along_axis(ranks, np.maximum(doc_cells, 0), axis=1)
    return np.where(doc_cells >= 0, found, -1)
