"""The ``--ann`` part of the bench report: recall@10 against QPS (``ann.png``) and a Markdown section with the
recommendation per budget and target recall and every point."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from adaptemb.evaluate.ann_curves import recommendation_lines
from adaptemb.serialization import atomic_write


def plot_ann(result: Any, path: Path) -> Path:
    """Recall@10 (against the exact float top-10) against QPS, one line per approximate index, its bytes per vector
    in the legend."""
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=120)
    series: dict[str, list[dict[str, Any]]] = {}
    for point in result.ann:
        label = point["series"] + ("" if point["k"] is None else f" k={point['k']}")
        series.setdefault(f"{label} ({point['bytes_per_vector']:.0f} B)", []).append(point)
    for label, points in series.items():
        points = sorted(points, key=lambda p: p["qps"])
        faiss = label.startswith("faiss")
        ax.plot([p["qps"] for p in points], [p["recall_at_10"] for p in points], label=label,
                linestyle="--" if faiss else "-", marker="*" if faiss else "o", markersize=4)
    ax.set_xscale("log")
    ax.set_xlabel("queries per second (one batch of every query)")
    ax.set_ylabel("recall@10 against exact float search")
    ax.set_title(f"{result.dataset['name']} at {result.scale[0]['n']:,} rows: approximate search")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, format="png"))
    finally:
        plt.close(fig)
    return path


def ann_markdown(result: Any) -> list[str]:
    """The report's section on approximate search (none without ``--ann``)."""
    if not result.ann:
        return []
    lines = ["", f"## Approximate search: {result.scale[0]['n']:,} rows", "",
             ("Recall@10 against the exact float top-10, QPS of one batched search of every query, bytes per vector "
             "with the index's own overhead. Recommendation: the fastest index that reaches the recall within the "
             "bytes."), ""]
    lines += [f"- {line}" for line in recommendation_lines(result.ann_recommendation)]
    lines += ["", "| index | k | setting | recall@10 | recall vs exact codes | QPS | B/vector | build s |",
              "|---|---|---|---|---|---|---|---|"]
    for p in result.ann:
        own = "" if p["recall_vs_exact_codes"] is None else f"{p['recall_vs_exact_codes']:.3f}"
        lines.append(f"| {p['series']} | {'' if p['k'] is None else p['k']} | {p['setting']} | {p['recall_at_10']:.3f} "
                     f"| {own} | {p['qps']:,.0f} | {p['bytes_per_vector']:.1f} | {p['build_s']:.1f} |")
    return lines
