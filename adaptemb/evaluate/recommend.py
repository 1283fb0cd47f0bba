"""The bench's verdict: for each byte budget, the best row by NDCG@10, its margin, and the fastest row of equal
quality; and the Pareto front of quality against bytes per vector.

Pure functions of the bench rows (``adaptemb.evaluate.runner``): every row counts (each method at each
budget, rerank funnels with their store's bytes, the float32 reference), so a recommendation at B bytes
names the best measured quality among all rows of at most B bytes per vector. The rows are either the main
table's (the corpus) or, after a scale study, the scale rows (every method and faiss baseline at N rows):
``adaptemb bench --scale N`` recommends from the scale rows, quality at the size that was asked about.

When no row fits a budget, the entry says why, per method (``why_nothing_fits``), from each method's sizes
(``MethodSizes``, gathered by the runner from the fitted compressors).

Uncertainty: each entry's ``margin_interval`` is the 95% interval of the best row's NDCG@10 margin over the
runner-up, from a paired bootstrap over queries (``paired_bootstrap_interval``: 1,000 resamples of the judged
queries, seeded, both rows' per-query NDCG@10 resampled together; rows keep them as ``ndcg_at_10_per_query``).
When the interval contains 0 the two are ``within_noise`` and ``recommended`` is the one cheaper to search and
fit (``cheaper``: the faster to search by more than a factor ``SEARCH_TIE``, else the faster to fit); otherwise
it is the best row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from adaptemb.evaluate.metrics import PER_QUERY_NDCG, Row

METRIC = "ndcg_at_10"
TOLERANCE = 0.01
"""Quality within this much of the best counts as equal when choosing the fastest row."""
_EPS = 1e-9
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_LEVEL = 0.95
SEARCH_TIE = 1.25
"""Search latencies within this factor of each other count as equal (the spread of the latency protocol on a
shared machine): two rows within noise are then told apart by their fit time."""


_PLAIN_VARIANTS = ("codes", "reference", "scale")


@dataclass
class MethodSizes:
    """What a method's codes can take per vector, for explaining a byte budget none of its rows fits.

    ``fixed``: one size only (``int8``, ``binary``); ``smallest_bytes``/``smallest_k``: its smallest code;
    ``fits``: byte budget -> the largest ``k`` whose codes fit it (``Compressor.budget_for_bytes``), None
    when no code of the method fits."""

    fixed: bool = False
    smallest_bytes: float | None = None
    smallest_k: int | None = None
    fits: dict[float, int | None] = field(default_factory=dict)


def row_label(row: Row) -> str:
    """``"csr k=16"``, ``"int8"``, ``"svd k=16 + rerank-int8"``: a row's method, budget and variant."""
    label = row["method"] if row.get("k") is None else f"{row['method']} k={row['k']}"
    variant = row.get("variant", "codes")
    return label if variant in _PLAIN_VARIANTS else f"{label} + {variant}"


def why_nothing_fits(rows: list[Row], budget: float, sizes: dict[str, MethodSizes] | None = None) -> dict[str, str]:
    """Per method with no row of at most ``budget`` bytes per vector, why: ``"fixed 384 B per vector"``,
    ``"smallest code 192 B per vector (k=4)"``, or ``"k=4 would fit 16 B but was not run (rows 64–256 B)"``.
    Methods come from ``rows`` (the reference aside) and ``sizes``; reasons name the sizes measured in ``rows``."""
    sizes = sizes or {}
    benched: dict[str, list[Row]] = {}
    for row in rows:
        if row.get("variant", "codes") in ("codes", "scale") and row.get("bytes_per_vector") is not None:
            benched.setdefault(row["method"], []).append(row)
    out: dict[str, str] = {}
    for method in sorted(set(benched) | set(sizes)):
        mine = benched.get(method, [])
        if any(r["bytes_per_vector"] <= budget + _EPS for r in mine):
            continue
        out[method] = _reason(mine, budget, sizes.get(method))
    return out


def _reason(mine: list[Row], budget: float, size: MethodSizes | None) -> str:
    measured = sorted({float(r["bytes_per_vector"]) for r in mine})
    ran = "no row (skipped, see the notes)" if not measured else (
        f"{measured[0]:g} B per vector" if len(measured) == 1 else f"rows {measured[0]:g}–{measured[-1]:g} B per vector")
    if size is None:
        return f"smallest row {measured[0]:g} B per vector" if measured else ran
    if size.fixed:
        return f"fixed {size.smallest_bytes if size.smallest_bytes is not None else measured[0]:g} B per vector"
    k = size.fits.get(budget)
    if k is not None:
        return f"k={k} would fit {budget:g} B but was not run ({ran}; --bytes {budget:g} runs it)"
    if size.smallest_bytes is not None:
        smallest = f"smallest code {size.smallest_bytes:g} B per vector"
        return smallest if size.smallest_k is None else f"{smallest} (k={size.smallest_k})"
    return f"no code fits {budget:g} B per vector ({ran})"


def _measured(rows: list[Row], metric: str) -> list[Row]:
    return [r for r in rows if r.get(metric) is not None and r.get("bytes_per_vector") is not None]


def _summary(row: Row, metric: str) -> dict[str, Any]:
    return {"label": row_label(row), "method": row["method"], "k": row.get("k"), "variant": row.get("variant"),
            "bytes_per_vector": row["bytes_per_vector"], metric: row[metric], "fit_s": row.get("fit_s"),
            "latency_per_query_ms": row.get("latency_per_query_ms")}


def recommend(rows: list[Row], budgets: list[float], *, metric: str = METRIC, tolerance: float = TOLERANCE,
              sizes: dict[str, MethodSizes] | None = None, seed: int = 0) -> list[Row]:
    """One entry per byte budget B: among the rows of at most B bytes per vector, ``best`` (highest ``metric``,
    fewer bytes on a tie), ``runner_up`` (the best row of another method), ``margin`` (best minus runner-up) with
    its ``margin_interval`` and ``within_noise`` (see the module docstring; None without per-query NDCG@10 on
    both rows), ``recommended`` (the best, or the cheaper of the two when within noise), and ``fastest`` (the
    lowest search latency among rows within ``tolerance`` of the best). ``best`` is None when no row fits in B
    bytes; ``why_nothing_fits`` then says per method why (``why_nothing_fits()``)."""
    measured = _measured(rows, metric)
    out: list[Row] = []
    for budget in sorted(budgets):
        fits = [r for r in measured if r["bytes_per_vector"] <= budget + _EPS]
        entry: Row = {"budget_bytes": budget, "best": None, "runner_up": None, "margin": None, "margin_interval": None,
                      "within_noise": None, "recommended": None, "fastest": None, "candidates": len(fits),
                      "why_nothing_fits": None}
        if fits:
            best = max(fits, key=lambda r: (r[metric], -r["bytes_per_vector"]))
            others = [r for r in fits if r["method"] != best["method"]]
            runner = max(others, key=lambda r: (r[metric], -r["bytes_per_vector"])) if others else None
            timed = [r for r in fits if r[metric] >= best[metric] - tolerance and r.get("latency_per_query_ms") is not None]
            fastest = min(timed, key=lambda r: (r["latency_per_query_ms"], -r[metric])) if timed else None
            entry.update(best=_summary(best, metric), runner_up=None if runner is None else _summary(runner, metric),
                         margin=None if runner is None else best[metric] - runner[metric],
                         fastest=None if fastest is None else _summary(fastest, metric))
            entry.update(_uncertainty(best, runner, metric, seed))
        else:
            entry["why_nothing_fits"] = why_nothing_fits(rows, budget, sizes)
        out.append(entry)
    return out


def _uncertainty(best: Row, runner: Row | None, metric: str, seed: int) -> Row:
    """``margin_interval``, ``within_noise`` and ``recommended`` of one budget's best row and runner-up."""
    a, b = best.get(PER_QUERY_NDCG), None if runner is None else runner.get(PER_QUERY_NDCG)
    if runner is None or metric != METRIC or a is None or b is None or len(a) != len(b) or not len(a):
        return {"recommended": _summary(best, metric)}
    low, high = paired_bootstrap_interval(a, b, seed=seed)
    within = low <= 0.0 <= high
    chosen = runner if within and cheaper(runner, best) else best
    return {"margin_interval": [low, high], "within_noise": within, "recommended": _summary(chosen, metric)}


def paired_bootstrap_interval(a: Sequence[float], b: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES,
                              level: float = BOOTSTRAP_LEVEL, seed: int = 0) -> tuple[float, float]:
    """The ``level`` percentile interval of mean(a − b) over ``resamples`` draws of the queries with replacement;
    paired: each draw takes both rows' values of the same queries (``a[i]``, ``b[i]``: query i)."""
    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if diff.ndim != 1 or diff.size == 0 or np.asarray(b).shape != diff.shape:
        raise ValueError(f"need two equally long 1-D lists of per-query values; got {np.shape(a)} and {np.shape(b)}")
    rng, means = np.random.default_rng(seed), np.empty(resamples)
    block = max(1, 4_000_000 // diff.size)  # resamples drawn at once (bounded memory for many queries)
    for start in range(0, resamples, block):
        draws = rng.integers(0, diff.size, size=(min(block, resamples - start), diff.size))
        means[start : start + len(draws)] = diff[draws].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def cheaper(a: Row, b: Row) -> bool:
    """Whether row ``a`` is cheaper to use than ``b``: it searches faster by more than a factor ``SEARCH_TIE``, or
    their latencies tie within it and ``a`` fits faster. False where a latency or fit time is unknown."""
    a_ms, b_ms, a_fit, b_fit = (row.get(key) for key in ("latency_per_query_ms", "fit_s") for row in (a, b))
    if a_ms is None or b_ms is None:
        return False
    if a_ms * SEARCH_TIE < b_ms or b_ms * SEARCH_TIE < a_ms:
        return bool(a_ms < b_ms)
    return a_fit is not None and b_fit is not None and a_fit < b_fit


def pareto_front(rows: list[Row], *, metric: str = METRIC) -> list[Row]:
    """The rows no other row beats on both axes (at most as many bytes and at least the quality, one strictly),
    ordered by bytes per vector: the best quality reachable at each size."""
    ordered = sorted(_measured(rows, metric), key=lambda r: (r["bytes_per_vector"], -r[metric]))
    front: list[Row] = []
    for row in ordered:
        if not front or row[metric] > front[-1][metric] + _EPS:
            front.append(row)
    return front
