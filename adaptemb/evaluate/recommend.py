"""The bench's verdict: for each byte budget, the best row by NDCG@10, its margin, and the fastest row of equal
quality; and the Pareto front of quality against bytes per vector.

Pure functions of the bench rows (``adaptemb.evaluate.runner``): every row counts (each method at each
budget, rerank funnels with their store's bytes, the float32 reference), so a recommendation at B bytes
names the best measured quality among all rows of at most B bytes per vector.
"""

from __future__ import annotations

from typing import Any

Row = dict[str, Any]
METRIC = "ndcg_at_10"
TOLERANCE = 0.01
"""Quality within this much of the best counts as equal when choosing the fastest row."""
_EPS = 1e-9


def row_label(row: Row) -> str:
    """``"csr k=16"``, ``"int8"``, ``"svd k=16 + rerank-int8"``: a row's method, budget and variant."""
    label = row["method"] if row.get("k") is None else f"{row['method']} k={row['k']}"
    variant = row.get("variant", "codes")
    return label if variant in ("codes", "reference") else f"{label} + {variant}"


def _measured(rows: list[Row], metric: str) -> list[Row]:
    return [r for r in rows if r.get(metric) is not None and r.get("bytes_per_vector") is not None]


def _summary(row: Row, metric: str) -> dict[str, Any]:
    return {"label": row_label(row), "method": row["method"], "k": row.get("k"), "variant": row.get("variant"),
            "bytes_per_vector": row["bytes_per_vector"], metric: row[metric], "fit_s": row.get("fit_s"),
            "latency_per_query_ms": row.get("latency_per_query_ms")}


def recommend(rows: list[Row], budgets: list[float], *, metric: str = METRIC, tolerance: float = TOLERANCE) -> list[Row]:
    """One entry per byte budget B: among the rows of at most B bytes per vector, ``best`` (highest ``metric``,
    fewer bytes on a tie), ``runner_up`` (the best row of another method) and ``margin`` (best minus runner-up),
    and ``fastest`` (the lowest search latency among rows within ``tolerance`` of the best). ``best`` is None
    when no row fits in B bytes."""
    measured = _measured(rows, metric)
    out: list[Row] = []
    for budget in sorted(budgets):
        fits = [r for r in measured if r["bytes_per_vector"] <= budget + _EPS]
        entry: Row = {"budget_bytes": budget, "best": None, "runner_up": None, "margin": None, "fastest": None,
                      "candidates": len(fits)}
        if fits:
            best = max(fits, key=lambda r: (r[metric], -r["bytes_per_vector"]))
            others = [r for r in fits if r["method"] != best["method"]]
            runner = max(others, key=lambda r: (r[metric], -r["bytes_per_vector"])) if others else None
            timed = [r for r in fits if r[metric] >= best[metric] - tolerance and r.get("latency_per_query_ms") is not None]
            fastest = min(timed, key=lambda r: (r["latency_per_query_ms"], -r[metric])) if timed else None
            entry.update(best=_summary(best, metric), runner_up=None if runner is None else _summary(runner, metric),
                         margin=None if runner is None else best[metric] - runner[metric],
                         fastest=None if fastest is None else _summary(fastest, metric))
        out.append(entry)
    return out


def pareto_front(rows: list[Row], *, metric: str = METRIC) -> list[Row]:
    """The rows no other row beats on both axes (at most as many bytes and at least the quality, one strictly),
    ordered by bytes per vector: the best quality reachable at each size."""
    ordered = sorted(_measured(rows, metric), key=lambda r: (r["bytes_per_vector"], -r[metric]))
    front: list[Row] = []
    for row in ordered:
        if not front or row[metric] > front[-1][metric] + _EPS:
            front.append(row)
    return front
