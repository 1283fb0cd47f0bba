"""The bench in the terminal: a compact table of each method family's best row per byte budget (every row with
``all_rows``), the recommendation and a summary of the run (time per fit, where the files are).

The tables fit a 100-column terminal without truncating a cell (``print_table(result, console)``: method, k,
bytes/vec, NDCG@10, R@10, ms/query, fit s; the recommendation two lines per byte budget) and have a wide mode with
every column (``wide=True``). Cells never end in rich's ellipsis: a cell too long for its column folds onto another
line.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from adaptemb.evaluate.columns import (
    COLUMNS,
    COMPACT_COLUMNS,
    COMPACT_RECOMMENDATION_TITLES,
    COMPACT_SCALE_COLUMNS,
    LEFT,
    RECOMMENDATION_TITLES,
    SCALE_COLUMNS,
    cell_text,
    compact_recommendation_cells,
    recommendation_cells,
    recommendation_title,
)
from adaptemb.evaluate.context import BenchResult
from adaptemb.evaluate.machine import describe
from adaptemb.evaluate.metrics import Row
from adaptemb.evaluate.steps import fits_by_method


def _table(title: str, columns: list[tuple[str, str, str]], rows: list[Row] | list[list[Row]],
           caption: str | None = None) -> Table:
    """A rich table whose cells fold onto further lines instead of ending in an ellipsis; ``rows`` given as groups
    are set apart by a rule."""
    table = Table(title=title, caption=caption)
    for name, key, _ in columns:
        table.add_column(name, justify="left" if key in LEFT else "right", overflow="fold")
    groups = rows if rows and isinstance(rows[0], list) else [rows]
    for group in groups:
        for row in group:
            table.add_row(*(cell_text(row, key, fmt) for _, key, fmt in columns))
        table.add_section()
    return table


def print_table(result: BenchResult, console: Console | None = None, *, wide: bool = False,
                all_rows: bool = False) -> None:
    """The rows, the scale study and the recommendation as rich tables.

    The main table shows each method family's best row per byte budget (``best_rows``), or every row with
    ``all_rows``. Default: the compact columns (``COMPACT_COLUMNS``, ``COMPACT_SCALE_COLUMNS``, the recommendation
    two lines per budget), which fit a 100-column terminal. ``wide=True``: every column (``COLUMNS``,
    ``SCALE_COLUMNS``, ``RECOMMENDATION_TITLES``), as in ``report.md``. No cell is cut short: a long one folds."""
    console = console or Console()
    d = result.dataset
    title = f"adaptemb bench — {d['name']} ({d['corpus']:,} docs, {d['queries']:,} queries, d={d['dim']})"
    shown = [result.rows] if all_rows else best_rows(result)
    count = sum(len(group) for group in shown)
    kept = "" if all_rows else f"; each family's best row per budget: {count} of {len(result.rows)} rows (--all-rows)"
    caption = f"{describe(result.machine)}; whole run {result.total_s:.1f}s{kept}"
    console.print(_table(title, COLUMNS if wide else COMPACT_COLUMNS, shown, caption))
    if result.scale:
        scale_title = f"scale study: {result.scale[0]['n']:,} rows (corpus + noise-perturbed copies)"
        console.print(_table(scale_title, SCALE_COLUMNS if wide else COMPACT_SCALE_COLUMNS, result.scale))
    if result.recommendation:
        console.print(recommendation_table(result, wide=wide))
        for entry in result.recommendation:  # the reasons "nothing fits (reasons below)" points at
            if entry["best"] is None:
                reasons = "; ".join(f"{name}: {why}" for name, why in (entry.get("why_nothing_fits") or {}).items())
                console.print(f"[dim]{entry['budget_bytes']:g} B per vector: nothing fits ({reasons or 'no method ran'})[/dim]")


def best_rows(result: BenchResult) -> list[list[Row]]:
    """The reference row, then per byte budget B, smallest first, the best row by NDCG@10 of each method family (the
    method before its ``+``: svd, svd+binary and svd+rabitq compete) among the rows above the previous budget and at
    most B bytes per vector, best first; then the rows above every budget, best per family. One list per group."""
    budgets = sorted(entry["budget_bytes"] for entry in result.recommendation) or [float("inf")]
    groups: dict[float, dict[str, Row]] = {}
    for row in result.rows:
        if row.get("variant") == "reference":
            continue
        group = groups.setdefault(next((b for b in budgets if row["bytes_per_vector"] <= b), float("inf")), {})
        family = str(row["method"]).split("+", 1)[0]
        if family not in group or row["ndcg_at_10"] > group[family]["ndcg_at_10"]:
            group[family] = row
    reference = [row for row in result.rows if row.get("variant") == "reference"]
    ordered = [sorted(groups[g].values(), key=lambda row: -row["ndcg_at_10"]) for g in sorted(groups)]
    return [group for group in [reference, *ordered] if group]


def print_summary(result: BenchResult, files: dict[str, Path], console: Console | None = None) -> None:
    """Time per fit (from the run's steps; a shared fit is named once), the whole run, the notes' count and where
    the files are."""
    console = console or Console()
    times = ", ".join(f"{m} {sum(s):.1f}s" + (f" ({len(s)} fits)" if len(s) > 1 else "")
                      for m, s in fits_by_method(result.steps).items())
    console.print(f"time per fit: {times}; whole run {result.total_s:.0f}s")
    if result.notes:
        many = len(result.notes) > 1
        console.print(f"{len(result.notes)} note{'s' if many else ''} (what was skipped, shared or fitted how) "
                      f"{'are' if many else 'is'} in the report")
    report = files.get("markdown")
    others = ", ".join(p.name for key, p in files.items() if key != "markdown")
    console.print(f"results: {report} (every row), and beside it {others}")


def recommendation_table(result: BenchResult, *, wide: bool = False) -> Table:
    """The recommendation as a rich table: two-line cells by default, one line per budget with ``wide``."""
    verdict = Table(title=recommendation_title(result))
    titles = RECOMMENDATION_TITLES if wide else COMPACT_RECOMMENDATION_TITLES
    right = ("≤ bytes/vec", "bytes/vec", "margin", "fit s", "≤ B/vec")
    for title in titles:
        verdict.add_column(title, justify="right" if title in right else "left", overflow="fold")
    for entry in result.recommendation:
        verdict.add_row(*(recommendation_cells(entry) if wide else compact_recommendation_cells(entry)))
    return verdict


