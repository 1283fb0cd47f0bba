"""Markdown tables of a bench record, for the README and docs/results.md (the numbers as the record has them).

    python benchmarks/readme_tables.py benchmarks/results/bench-default-2026-11-29-chooser/results.json
    python benchmarks/readme_tables.py RECORD/results.json --table methods --links-from docs

``--table recommendation`` (the default): the run's verdict per byte budget (best row, runner-up with the margin and
its 95% interval, the pick, the fastest row within 0.01). ``--table methods``: each method's best row of at most B
bytes per vector at every byte budget of the run (its codes, not funnel rows), the best of each budget in bold,
and its smallest row above them (fixed-size codes). Both start with a line naming the record (linked relative to
``--links-from``, the folder of the Markdown file: ``.`` for the README, ``docs`` for docs/results.md), its data and
the float32 reference. NDCG@10, margins and ms per query are printed to 4 decimals, as the bench's report.md prints
them.

After a new default record: paste the recommendation table into the README's "Which code at which budget" (links
from ``.``), both tables into docs/results.md (``--links-from docs``), and copy the record's ``pareto.png`` to
``docs/img/bench-default-pareto.png``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from adaptemb.evaluate import fits_by_method

Row = dict[str, Any]


def caption(record: Path, result: dict[str, Any], links_from: Path = Path(".")) -> str:
    """One line: which record (its report.md linked from ``links_from``), which data, the float32 reference."""
    d = result["dataset"]
    reference = next((r for r in result["rows"] if r["variant"] == "reference"), None)
    full = "" if reference is None else f"; full float32 ({reference['bytes_per_vector']:,.0f} B) {reference['ndcg_at_10']:.4f}"
    link = Path(os.path.relpath(record.parent / "report.md", links_from)).as_posix()
    return (f"From [`{record.parent.name}/`]({link}) ({d['name']}: {d['corpus']:,} documents "
            f"× {d['dim']}, {d['queries']:,} queries{full}).")


def _label(row: Row | None) -> str:
    return "—" if row is None else f"{row['label']} {row['ndcg_at_10']:.4f}"


def recommendation_table(result: dict[str, Any]) -> list[str]:
    """The verdict per byte budget, one line each."""
    lines = ["| ≤ bytes/vector | best (NDCG@10) | runner-up (margin, 95% CI) | recommended | fastest within 0.01 |",
             "|---|---|---|---|---|"]
    for entry in result["recommendation"]:
        best, runner, fastest = entry["best"], entry["runner_up"], entry["fastest"]
        if best is None:
            lines.append(f"| {entry['budget_bytes']:g} | nothing fits | — | — | — |")
            continue
        low, high = entry["margin_interval"] or (None, None)
        margin = "" if entry["margin"] is None else f" (+{entry['margin']:.4f}" + (
            ")" if low is None else f", [{low:+.4f}, {high:+.4f}])")
        pick = entry["recommended"]["label"] + (" (within noise: the cheaper)" if entry["within_noise"] else " (clear)")
        fast = "—" if fastest is None else f"{_label(fastest)}, {fastest['latency_per_query_ms']:.4f} ms/query"
        lines.append(f"| {entry['budget_bytes']:g} | {_label(best)} | {_label(runner)}{margin} | {pick} | {fast} |")
    return lines


def methods_table(result: dict[str, Any]) -> list[str]:
    """Each method's best codes row of at most B bytes per vector, per byte budget of the run."""
    budgets = result["config"].get("bytes") or sorted({e["budget_bytes"] for e in result["recommendation"]})
    rows = [r for r in result["rows"] if r["variant"] == "codes" and r.get("ndcg_at_10") is not None]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    best: dict[tuple[str, float], Row] = {}
    for method in methods:
        for budget in budgets:
            fits = [r for r in rows if r["method"] == method and r["bytes_per_vector"] <= budget]
            if fits:
                best[method, budget] = max(fits, key=lambda r: r["ndcg_at_10"])
    top = {b: max((r["ndcg_at_10"] for (_, bb), r in best.items() if bb == b), default=None) for b in budgets}
    lines = ["| method | " + " | ".join(f"≤ {b:g} B" for b in budgets) + f" | > {budgets[-1]:g} B | fit s |",
             "|---|" + "---|" * (len(budgets) + 2)]
    order = sorted(methods, key=lambda m: -max((best[m, b]["ndcg_at_10"] for b in budgets if (m, b) in best), default=0))
    for method in order:
        cells = [_cell(best.get((method, b)), b, top[b]) for b in budgets]
        larger = [r for r in rows if r["method"] == method and r["bytes_per_vector"] > budgets[-1]]
        cells.append(_cell(min(larger, key=lambda r: r["bytes_per_vector"]), -1, None) if larger else "")
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {_fit_seconds(result, method)} |")
    return lines


def _fit_seconds(result: dict[str, Any], method: str) -> str:
    """The method's fit seconds, as the bench's summary gives them: each of its own fits once (the run's ``steps``;
    a refit that starts from the first fit, or a composition on a shared projection, counts its own seconds), their
    sum and count where there are several. Records without steps: the rows' fit seconds (one number when one fit
    served every row)."""
    steps = fits_by_method(result.get("steps", [])).get(method)
    if steps:
        return f"{steps[0]:.1f}" if len(steps) == 1 else f"{sum(steps):.1f} ({len(steps)} fits)"
    fits = [r["fit_s"] for r in result["rows"] if r["method"] == method and r.get("fit_s") is not None]
    if not fits:
        return "—"
    return f"{fits[0]:.1f}" if len(set(fits)) == 1 else f"{sum(fits):.1f} ({len(fits)} fits)"


def _cell(row: Row | None, budget: float, top: float | None) -> str:
    if row is None:
        return ""
    value = f"{row['ndcg_at_10']:.4f}"
    value = f"**{value}**" if row["ndcg_at_10"] == top else value
    k = "" if row.get("k") is None else f"k={row['k']}"
    size = "" if row["bytes_per_vector"] == budget else f"{row['bytes_per_vector']:g} B"
    detail = ", ".join(part for part in (k, size) if part)
    return f"{value} ({detail})" if detail else value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a bench's results.json")
    parser.add_argument("--table", choices=("recommendation", "methods"), default="recommendation")
    parser.add_argument("--links-from", type=Path, default=Path("."), help="folder of the Markdown file the table goes in")
    args = parser.parse_args()
    result = json.loads(args.results.read_text())
    table = recommendation_table(result) if args.table == "recommendation" else methods_table(result)
    print("\n".join([caption(args.results, result, args.links_from), "", *table]))


if __name__ == "__main__":
    main()
