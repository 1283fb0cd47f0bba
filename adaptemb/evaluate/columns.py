"""The bench tables' columns and cells, shared by the terminal (``adaptemb.evaluate.terminal``) and the Markdown
report (``adaptemb.evaluate.report``).

The ``k`` column is the row's budget k and, where its codes declare them (``Codes.value_bits``), the bits of each
stored value: ``8·2b`` is csr at 8 active latents of 2-bit values, ``10·1b`` bsa at 10 active features (binary).
"""

from __future__ import annotations

from adaptemb.evaluate.context import BenchResult
from adaptemb.evaluate.metrics import Row
from adaptemb.evaluate.recommend import TOLERANCE

_COLUMN_SPECS: dict[str, tuple[str, str, str]] = {key: (title, key, fmt) for title, key, fmt in [
    ("method", "method", "{}"),
    ("method", "_label", "{}"),  # the method with its rerank variant joined
    ("k", "k", "{}"),
    ("k", "_k_bits", "{}"),  # the budget k and, where the codes declare them, the bits per value: 8·2b
    ("variant", "variant", "{}"),
    ("backend", "backend", "{}"),
    ("active", "active_dims", "{:.0f}"),
    ("bytes/vec", "bytes_per_vector", "{:.1f}"),
    ("NDCG@10", "ndcg_at_10", "{:.4f}"),
    ("R@10", "recall_at_10", "{:.4f}"),
    ("R@100", "recall_at_100", "{:.4f}"),
    ("MRR@10", "mrr_at_10", "{:.4f}"),
    ("NN-R@10", "neighbour_recall_at_10", "{:.3f}"),
    ("1-NN acc", "one_nn_accuracy", "{:.4f}"),
    ("ratio", "compression_ratio", "{:.1f}x"),
    ("ms/query", "latency_per_query_ms", "{:.4f}"),
    ("vs flat", "speedup_vs_flat", "{:.1f}x"),
    ("batch p10–p90 s", "_spread", "{}"),
    ("fit s", "fit_s", "{:.2f}"),
    ("encode s", "encode_s", "{:.1f}"),
    ("build s", "index_build_s", "{:.2f}"),
    ("index MB", "index_mb", "{:.1f}"),
    ("peak MB", "peak_memory_mb", "{:.0f}"),
    ("= score()", "_score_check", "{}"),
]}
"""Each column once: (column title, row key, format) as the terminal and Markdown tables show it."""



def _columns(keys: str) -> list[tuple[str, str, str]]:
    return [_COLUMN_SPECS[key] for key in keys.split()]


COLUMNS = _columns("method _k_bits variant active_dims ndcg_at_10 recall_at_10 recall_at_100 mrr_at_10 "
                   "neighbour_recall_at_10 one_nn_accuracy bytes_per_vector compression_ratio latency_per_query_ms "
                   "_spread fit_s")
"""The main table's columns (``print_table(..., wide=True)`` and the Markdown report)."""
SCALE_COLUMNS = _columns("method _k_bits backend bytes_per_vector ndcg_at_10 recall_at_10 neighbour_recall_at_10 "
                         "latency_per_query_ms speedup_vs_flat encode_s index_build_s index_mb peak_memory_mb _score_check")
"""The scale study's columns (``adaptemb bench --scale N``)."""
COMPACT_COLUMNS = _columns("_label _k_bits bytes_per_vector ndcg_at_10 recall_at_10 latency_per_query_ms fit_s")
"""The terminal table's default columns (``print_table(..., wide=False)``); rerank variants join the method."""
COMPACT_SCALE_COLUMNS = _columns("method _k_bits bytes_per_vector ndcg_at_10 recall_at_10 neighbour_recall_at_10 "
                                 "latency_per_query_ms speedup_vs_flat index_build_s")
"""The scale table's default columns in the terminal."""
LEFT = ("method", "_label", "variant", "backend")
MACHINE_COLUMNS = ("cpu", "cpu_cores_usable", "gpu")
RECOMMENDATION_TITLES = ("≤ bytes/vec", "best NDCG@10", "bytes/vec", "margin", "margin 95% CI", "runner-up", "fit s",
                         "recommended", f"fastest within {TOLERANCE} (ms/query)")


def recommendation_cells(entry: Row) -> list[str]:
    """One recommendation entry as table cells (see ``adaptemb.evaluate.recommend``)."""
    best, runner, fastest = entry["best"], entry["runner_up"], entry["fastest"]
    budget = f"{entry['budget_bytes']:g}"
    if best is None:
        return [budget, "nothing fits (reasons below)", "—", "—", "—", "—", "—", "—", "—"]
    runner_cell = "—" if runner is None else f"{runner['label']} ({runner['ndcg_at_10']:.4f})"
    margin = "—" if entry["margin"] is None else f"+{entry['margin']:.4f}"
    fit = "—" if best.get("fit_s") is None else f"{best['fit_s']:.2f}"
    fast = "—" if fastest is None else (
        f"{fastest['label']} ({fastest['latency_per_query_ms']:.4f} ms, {fastest['ndcg_at_10']:.4f})")
    return [budget, f"{best['label']} ({best['ndcg_at_10']:.4f})", f"{best['bytes_per_vector']:.1f}", margin,
            interval_text(entry) or "—", runner_cell, fit, pick_text(entry) or best["label"], fast]


def interval_text(entry: Row) -> str:
    """``"95% CI [+0.0012, +0.0081]"``: the margin's paired-bootstrap interval ('' without one)."""
    interval = entry.get("margin_interval")
    return "" if interval is None else f"95% CI [{interval[0]:+.4f}, {interval[1]:+.4f}]"


def pick_text(entry: Row) -> str:
    """What the recommendation picks: ``"clear: <best>"``, or ``"within noise: <row> (cheaper)"`` ('' without an
    interval; ``adaptemb.evaluate.recommend`` states the rule)."""
    if entry.get("within_noise") is None:
        return ""
    label = entry["recommended"]["label"]
    return f"within noise: {label} (cheaper)" if entry["within_noise"] else f"clear: {label}"


COMPACT_RECOMMENDATION_TITLES = ("≤ B/vec", "best: NDCG@10 · bytes · fit; pick", "runner-up (margin, 95% CI)",
                                 f"fastest within {TOLERANCE}")


def compact_recommendation_cells(entry: Row) -> list[str]:
    """One recommendation entry as four cells of two or three lines: budget, best (and the pick), runner-up (and
    the margin's interval), fastest (a 100-column table)."""
    best, runner, fastest = entry["best"], entry["runner_up"], entry["fastest"]
    budget = f"{entry['budget_bytes']:g}"
    if best is None:
        return [budget, "nothing fits\n(reasons below)", "—", "—"]
    fit = "" if best.get("fit_s") is None else f" · fit {best['fit_s']:.1f} s"
    best_cell = "\n".join(filter(None, [best["label"], f"{best['ndcg_at_10']:.4f} · {best['bytes_per_vector']:g} B{fit}",
                                         pick_text(entry)]))
    runner_cell = "—" if runner is None else "\n".join(filter(None, [
        runner["label"], f"{runner['ndcg_at_10']:.4f} (+{entry['margin']:.4f})", interval_text(entry)]))
    fast_cell = "—" if fastest is None else (
        f"{fastest['label']}\n{fastest['ndcg_at_10']:.4f} · {fastest['latency_per_query_ms']:.4f} ms/query")
    return [budget, best_cell, runner_cell, fast_cell]


def recommendation_title(result: BenchResult) -> str:
    """What the recommendation ranks: the main table's rows, or the scale study's rows at N rows."""
    if result.recommendation_rows == "scale" and result.scale:
        return (f"recommendation at {result.scale[0]['n']:,} rows (the scale study's rows): the best NDCG@10 among "
                "rows of at most B bytes per vector")
    return "recommendation: the best NDCG@10 among all rows of at most B bytes per vector"



def cell_text(row: Row, key: str, fmt: str) -> str:
    if key == "_label":
        variant = row.get("variant", "codes")
        return row["method"] if variant in ("codes", "reference", "scale") else f"{row['method']} + {variant}"
    if key == "_spread":
        return f"{row['latency_p10_s']:.4f}–{row['latency_p90_s']:.4f}"
    if key == "_k_bits":
        budget = cell_text(row, "k", "{}")
        return budget if row.get("k") is None or row.get("value_bits") is None else f"{budget}·{row['value_bits']}b"
    if key == "_score_check":
        check = row.get("score_check")
        return "—" if not check else f"{check['identical_top_10']:.1%} of {check['queries']}"
    value = row.get(key)
    if value is None:
        reference = row.get("method") == "float32" or str(row.get("method")).startswith("faiss-")
        if key != "k" or reference:
            return "—"
        return "fixed"  # a fixed-size method (int8, binary): no budget
    return fmt.format(value)

