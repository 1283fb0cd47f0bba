"""Bench files: JSON and CSV (every number + the machine), the per-query NDCG@10 in a compressed ``per_query.npz``,
PNG plots, a Markdown report (``write_report``). The terminal's tables are ``adaptemb.evaluate.terminal``'s. Every
plot colours a method the same way (``adaptemb.evaluate.colours.method_colour``).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from adaptemb.datasets import Dataset
from adaptemb.evaluate.ann_report import ann_markdown, plot_ann
from adaptemb.evaluate.colours import method_colours
from adaptemb.evaluate.columns import (
    COLUMNS,
    MACHINE_COLUMNS,
    RECOMMENDATION_TITLES,
    SCALE_COLUMNS,
    cell_text,
    recommendation_cells,
)
from adaptemb.evaluate.context import BenchResult
from adaptemb.evaluate.machine import describe
from adaptemb.evaluate.metrics import PER_QUERY_NDCG, Row
from adaptemb.evaluate.recommend import SEARCH_TIE, TOLERANCE, pareto_front, row_label
from adaptemb.serialization import atomic_write

PER_QUERY_FILE = "per_query.npz"
"""Written beside ``results.json``: each row's per-query NDCG@10 (``PER_QUERY_NDCG``) as a float32 array named
``row_<i>`` (``rows[i]``) or ``scale_<i>`` (``scale[i]``), and ``query_ids`` when the dataset has ids."""


def write_json(result: BenchResult, path: Path, *, query_ids: Sequence[str] | None = None) -> Path:
    """Everything but the per-query lists: dataset, config, machine, rows (with fit reports), notes, scale sweep.

    The rows' per-query NDCG@10 go to ``PER_QUERY_FILE`` beside ``path`` (``write_per_query``), with ``query_ids``
    (the ids of the queries the main rows' values are over, ``evaluated_query_ids``); a stale one is removed when
    no row has them."""
    data = result.as_dict()
    arrays = split_per_query(data)
    text = json.dumps(data, indent=2, default=str) + "\n"
    beside = path.with_name(PER_QUERY_FILE)
    if arrays:
        write_per_query(arrays, beside, query_ids=query_ids)
    else:
        beside.unlink(missing_ok=True)
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def split_per_query(data: dict[str, Any]) -> dict[str, np.ndarray]:
    """Take the per-query NDCG@10 lists out of a results dict's ``rows`` and ``scale`` rows (in place), as float32
    arrays named ``row_<i>`` / ``scale_<i>`` after the row's index."""
    arrays: dict[str, np.ndarray] = {}
    for section, prefix in (("rows", "row"), ("scale", "scale")):
        for i, row in enumerate(data.get(section) or []):
            values = row.pop(PER_QUERY_NDCG, None)
            if values is not None:
                arrays[f"{prefix}_{i}"] = np.asarray(values, dtype=np.float32)
    return arrays


def write_per_query(arrays: dict[str, np.ndarray], path: Path, *, query_ids: Sequence[str] | None = None) -> Path:
    """``arrays`` (and ``query_ids`` as strings) into one compressed ``.npz`` (``np.load`` reads it, no pickle)."""
    named = dict(arrays)
    if query_ids is not None:
        named["query_ids"] = np.asarray([str(q) for q in query_ids], dtype=str)

    def write(tmp: Path) -> None:
        with tmp.open("wb") as f:  # a file object: numpy would append ".npz" to the temporary name
            np.savez_compressed(f, **named)

    return atomic_write(path, write)


def evaluated_query_ids(data: Dataset) -> list[str] | None:
    """The dataset's own ids of the queries a row's per-query values are over (``Dataset.evaluated``, in order);
    None for a dataset without query ids (the values are then in the order of the queries with a relevant row)."""
    if data.query_ids is None:
        return None
    return [str(q) for q, evaluated in zip(data.query_ids.tolist(), data.evaluated()) if evaluated]


def write_csv(result: BenchResult, path: Path) -> Path:
    """One line per row with every number, plus the machine and library versions on each line."""
    keys: list[str] = []
    for row in result.rows:
        keys.extend(k for k in row if k not in keys and k not in ("fit_report", PER_QUERY_NDCG))
    machine = {f"machine_{k}": _flat(result.machine.get(k)) for k in MACHINE_COLUMNS}
    machine.update({f"version_{k}": v for k, v in result.machine["versions"].items()})

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=[*keys, "dataset", *machine])
            writer.writeheader()
            for row in result.rows:
                writer.writerow({**{k: row.get(k) for k in keys}, "dataset": result.dataset["name"], **machine})

    return atomic_write(path, write)


def _flat(value: Any) -> Any:
    return value["name"] if isinstance(value, dict) and "name" in value else value


def _series(result: BenchResult) -> dict[str, list[Row]]:
    lines: dict[str, list[Row]] = {}
    for row in result.rows:
        label = row["method"] if row["variant"] in ("codes", "reference") else f"{row['method']}+{row['variant']}"
        lines.setdefault(label, []).append(row)
    return lines


_VARIANT_STYLE = {"codes": ("-", "o"), "rerank-float32": ("--", "s"), "rerank-int8": (":", "^")}


def result_colours(result: BenchResult) -> dict[str, str]:
    """One colour per method of the result (its table and scale rows), the same in every plot of it."""
    return method_colours(sorted({r["method"] for r in [*result.rows, *result.scale]}))


def plot_quality(result: BenchResult, path: Path, *, x: str, xlabel: str, metric: str = "ndcg_at_10") -> Path:
    """Quality (``metric``) against ``x`` (a row key), one line per method and variant (log x axis).

    A method keeps one colour; its rerank variants are dashed (float32) and dotted (int8).
    """
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=120)
    colours = result_colours(result)
    for label, rows in _series(result).items():
        points = sorted((r[x], r[metric]) for r in rows if r.get(x) is not None and r.get(metric) is not None)
        if not points:
            continue
        xs, ys = zip(*points)
        if label == "float32":
            style = {"marker": "*", "markersize": 12, "linestyle": "none", "color": "black"}
        else:
            linestyle, marker = _VARIANT_STYLE.get(rows[0]["variant"], ("-.", "x"))
            style = {"marker": marker, "linestyle": linestyle, "color": colours[rows[0]["method"]]}
        ax.plot(xs, ys, label=label, **style)
    label = metric.replace("_at_", "@").upper()
    return _finish(fig, ax, path, xlabel=xlabel, ylabel=label, title=f"{result.dataset['name']}: {label} vs {xlabel}")


def _finish(fig: Any, ax: Any, path: Path, *, xlabel: str, ylabel: str, title: str, legend_size: int = 8) -> Path:
    """The axes every bench plot shares (log x, grid, legend outside on the right), saved to ``path`` and closed."""
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=legend_size, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, format=path.suffix.lstrip(".") or "png"))
    finally:
        plt.close(fig)
    return path


def plot_pareto(result: BenchResult, path: Path, metric: str = "ndcg_at_10") -> Path:
    """Quality against bytes per vector: every row as a point coloured by method (funnel rows hollow), and the
    Pareto front (the best quality reachable at each size) as a black step line with its rows named."""
    fig, ax = plt.subplots(figsize=(10, 5.4), dpi=120)
    rows = [r for r in result.rows if r.get(metric) is not None and r.get("bytes_per_vector")]
    methods = sorted({r["method"] for r in rows})
    colours = result_colours(result)
    for method in methods:
        mine = [r for r in rows if r["method"] == method]
        for funnel in (False, True):
            points = [r for r in mine if (r.get("variant", "codes") not in ("codes", "reference")) == funnel]
            if points:
                ax.scatter([r["bytes_per_vector"] for r in points], [r[metric] for r in points], s=28,
                           label=method if not funnel else f"{method} + rerank",
                           facecolors="none" if funnel else colours[method], edgecolors=colours[method])
    front = pareto_front(rows, metric=metric)
    if front:
        right = max(r["bytes_per_vector"] for r in rows)  # the front holds its last level up to the largest row
        ax.step([r["bytes_per_vector"] for r in front] + [right], [r[metric] for r in front] + [front[-1][metric]],
                where="post", color="black", linewidth=1, label="Pareto front")
        for r in front:
            ax.annotate(row_label(r), (r["bytes_per_vector"], r[metric]), fontsize=6, xytext=(3, -9),
                        textcoords="offset points")
    label = metric.replace("_at_", "@").upper()
    title = f"{result.dataset['name']}: {label} vs bytes per vector, every method (Pareto front in black)"
    return _finish(fig, ax, path, xlabel="bytes per vector", ylabel=label, title=title, legend_size=7)


def plot_scale(result: BenchResult, path: Path) -> Path:
    """The scale study: NDCG@10 against ms per query at N rows, one series per method (its budgets joined by a
    thin line, each point labelled with its bytes per vector) and a star per faiss baseline."""
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=120)
    by_method: dict[str, list[Row]] = {}
    for row in result.scale:
        if row.get("latency_per_query_ms") is not None and row.get("ndcg_at_10") is not None:
            by_method.setdefault(row["method"], []).append(row)
    colours = result_colours(result)
    for method, rows in by_method.items():
        rows = sorted(rows, key=lambda r: r["bytes_per_vector"])
        baseline = method.startswith("faiss-")
        ax.plot([r["latency_per_query_ms"] for r in rows], [r["ndcg_at_10"] for r in rows], color=colours[method],
                marker="*" if baseline else "o", markersize=10 if baseline else 6, linestyle="none" if baseline else "-",
                linewidth=0.8, label=method)
        for r in rows:
            ax.annotate(f"{r['bytes_per_vector']:.0f} B", (r["latency_per_query_ms"], r["ndcg_at_10"]), fontsize=6,
                        xytext=(3, 3), textcoords="offset points")
    return _finish(fig, ax, path, xlabel="ms per query (median, batch of 512)", ylabel="NDCG@10",
                   title=f"{result.dataset['name']} at {result.scale[0]['n']:,} rows: quality vs search latency")


def markdown_table(rows: list[Row], columns: list[tuple[str, str, str]] = COLUMNS) -> str:
    """The rows as a GitHub Markdown table."""
    lines = ["| " + " | ".join(t for t, _, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell_text(r, k, f) for _, k, f in columns) + " |" for r in rows]
    return "\n".join(lines)


def write_markdown(result: BenchResult, path: Path, files: dict[str, Path]) -> Path:
    """A short report: dataset, machine, table, notes, and links to the plots and data files."""
    d, m = result.dataset, result.machine
    parts = [
        f"# adaptemb bench: {d['name']}",
        f"{d['corpus']:,} corpus rows, {d['queries']:,} queries ({d['judged_queries']:,} with a relevant row), d={d['dim']}.",
        (f"Machine: {describe(m)}; load average at the end {m.get('load_average')}. Device: {result.rows[0]['device']}. "
         f"Whole run: {result.total_s:.1f}s."),
        "", markdown_table(result.rows), "",
    ]
    if result.recommendation:
        at_scale = result.recommendation_rows == "scale" and result.scale
        rows_text = (f"the scale study's rows at {result.scale[0]['n']:,} rows (every method at its table budgets and "
                     "every faiss baseline)" if at_scale else "all rows of the table (every method, budget and funnel)")
        parts += ["## Recommendation", "",
                  (f"For each byte budget B: the row with the best NDCG@10 among {rows_text} of at most B bytes per "
                   "vector, its margin over the best row of another method with the margin's 95% interval (a "
                   "paired bootstrap over the judged queries, 1,000 resamples), its fit time, the recommended row "
                   "(the best; when the interval contains 0 the two are within noise and the cheaper one is "
                   f"recommended: the faster to search by more than a factor {SEARCH_TIE:g}, else the faster to fit), "
                   f"and the fastest row whose NDCG@10 is within {TOLERANCE} of the best."), "",
                  *_recommendation_markdown(result.recommendation)]
        if at_scale and result.corpus_recommendation:
            parts += ["", f"The same verdict from the {d['corpus']:,} corpus rows of the table alone (for comparison):", "",
                      *_recommendation_markdown(result.corpus_recommendation)]
        front = pareto_front(result.rows)
        parts += ["", "Pareto front (NDCG@10 vs bytes per vector): " + ", ".join(
            f"{row_label(r)} ({r['bytes_per_vector']:.0f} B, {r['ndcg_at_10']:.4f})" for r in front), ""]
    parts += [f"- note: {n}" for n in result.notes]
    if result.scale:
        explanation = (
            "The corpus plus noise-perturbed copies of it, each method encoding all rows and searching them "
            "through its own index; faiss on the float vectors beside it. NN-R@10: overlap with exact float "
            "search; vs flat: speed-up over faiss IndexFlatIP; peak MB: memory growth while building and searching."
        )
        parts += ["", f"## Scale study: {result.scale[0]['n']:,} rows", "", explanation, "",
                  markdown_table(result.scale, SCALE_COLUMNS)]
    parts += ann_markdown(result)
    parts += ["", "## Plots", ""]
    parts += [f"![{name}]({p.name})" for name, p in files.items() if p.suffix == ".png"]
    parts += ["", "## Files", ""] + [f"- [{p.name}]({p.name})" for p in files.values() if p.suffix != ".png"]
    text = "\n".join(parts) + "\n"
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def _recommendation_markdown(entries: list[Row]) -> list[str]:
    """The recommendation as a Markdown table, then per budget nothing fits in, each method's reason."""
    lines = ["| " + " | ".join(RECOMMENDATION_TITLES) + " |", "|" + "---|" * len(RECOMMENDATION_TITLES)]
    lines += ["| " + " | ".join(recommendation_cells(e)) + " |" for e in entries]
    for entry in entries:
        if entry["best"] is None:
            lines += ["", f"Nothing fits {entry['budget_bytes']:g} B per vector:"]
            lines += [f"- {method}: {why}" for method, why in (entry.get("why_nothing_fits") or {}).items()]
    return lines


def write_report(result: BenchResult, out_dir: Path, *, query_ids: Sequence[str] | None = None) -> dict[str, Path]:
    """Write JSON (and ``per_query.npz``, with ``query_ids``: ``write_json``), CSV, the PNG plots and ``report.md``
    into ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "json": write_json(result, out_dir / "results.json", query_ids=query_ids),
        "csv": write_csv(result, out_dir / "results.csv"),
        "quality_vs_bytes": plot_quality(result, out_dir / "quality_vs_bytes.png", x="bytes_per_vector",
                                         xlabel="bytes per vector"),
        "quality_vs_latency": plot_quality(result, out_dir / "quality_vs_latency.png", x="latency_per_query_ms",
                                           xlabel="ms per query"),
        "pareto": plot_pareto(result, out_dir / "pareto.png"),
    }
    if (out_dir / PER_QUERY_FILE).is_file():
        files["per_query"] = out_dir / PER_QUERY_FILE
    if result.scale:
        files["scale"] = plot_scale(result, out_dir / "scale.png")
    if result.ann:
        files["ann"] = plot_ann(result, out_dir / "ann.png")
    files["markdown"] = write_markdown(result, out_dir / "report.md", files)
    return files
