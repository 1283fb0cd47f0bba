"""The bench's terminal tables at 100 columns (compact default, wide mode) and one colour per method in every plot."""

from __future__ import annotations

import itertools
import types
from pathlib import Path
from typing import Any

import matplotlib.colors as mcolors
import numpy as np
import pytest
from rich.console import Console

import adaptemb
from adaptemb.evaluate import columns, report, terminal
from adaptemb.evaluate.colours import PALETTE, REFERENCE_COLOURS, method_colour, method_colours
from adaptemb.evaluate.metrics import PER_QUERY_NDCG
from adaptemb.evaluate.recommend import MethodSizes, recommend
from adaptemb.evaluate.runner import BenchResult
from adaptemb.registry import CompressorRegistry

LONG = "acme_hierarchical_supersparse_adapter"  # a third-party method with a long name
MACHINE = {"cpu": "AMD EPYC 7B13 64-Core Processor", "cpu_cores_usable": 2, "gpu": None, "load_average": [1.0, 1.0, 1.0],
           "versions": {"torch": "2.14.1+cu130", "faiss": "1.15.1"}}


VALUE_BITS = {"csr": {4: 16, 8: 8, 16: 2, 32: 1}, "bsa": {4: 1, 8: 1, 16: 1, 32: 1}}
"""What the codes of csr and bsa declare (``Codes.value_bits``); other methods' codes declare none."""


def _row(method: str, k: int | None, nbytes: float, ndcg: float, *, variant: str = "codes", fit_s: float = 12.5,
         ms: float = 0.1234) -> dict[str, Any]:
    return {"method": method, "k": k, "variant": variant, "active_dims": 16.0, "ndcg_at_10": ndcg,
            "recall_at_10": ndcg + 0.1, "recall_at_100": ndcg + 0.3, "mrr_at_10": ndcg - 0.03,
            "neighbour_recall_at_10": 0.8, "one_nn_accuracy": 0.25, "bytes_per_vector": nbytes,
            "compression_ratio": 1536 / nbytes, "latency_per_query_ms": ms, "latency_p10_s": 0.0512,
            "latency_p90_s": 0.0634, "fit_s": fit_s, "device": "cpu"}


def _hits(ndcg: float, queries: int = 200) -> list[float]:
    """Per-query NDCG@10 of 0 or 1 whose mean is about ``ndcg`` (the same list for the same ``ndcg``)."""
    return (np.random.default_rng(round(ndcg * 1e4)).random(queries) < ndcg).astype(float).tolist()


def _scale_row(method: str, k: int | None, nbytes: float, ndcg: float, ms: float) -> dict[str, Any]:
    return {"method": method, "k": k, "variant": "scale", "n": 200_000, "ndcg_at_10": ndcg, PER_QUERY_NDCG: _hits(ndcg),
            "recall_at_10": ndcg + 0.1,
            "mrr_at_10": ndcg - 0.03, "neighbour_recall_at_10": 0.9, "bytes_per_vector": nbytes, "encode_s": 3.2,
            "index_build_s": 1.25, "index_mb": 12.5, "peak_memory_mb": 310.0, "backend": "numba-rows",
            "latency_per_query_ms": ms, "latency_p10_s": 0.01, "latency_p90_s": 0.02, "speedup_vs_flat": 3.5,
            "fit_s": 12.5, "score_check": {"queries": 100, "identical_top_10": 1.0}}


def realistic_result() -> BenchResult:
    """Every built-in method at 16..128 B with rerank rows, a long third-party name, a scale study and a verdict
    with a byte budget nothing fits."""
    rows = [_row("float32", None, 1536.0, 0.2162, variant="reference", fit_s=0.0)]
    for i, method in enumerate(["bsa", "cllr", "csr", "mrl", "opq", "pq", "svd", LONG]):
        for j, (k, nbytes) in enumerate([(4, 16.0), (8, 32.0), (16, 64.0), (32, 128.0)]):
            rows.append(_row(method, k, nbytes, 0.10 + 0.01 * i + 0.02 * j, fit_s=155.81 if method == "opq" else 9.74))
            rows[-1]["value_bits"] = VALUE_BITS.get(method, {}).get(k)
        rows.append(_row(method, 4, 1600.0, 0.21, variant="rerank-float32"))
        rows.append(_row(method, 4, 400.0, 0.209, variant="rerank-int8"))
    rows += [_row("int8", None, 384.0, 0.2164), _row("binary", None, 48.0, 0.1827), _row("sq", 4, 192.0, 0.2154),
             _row("rabitq", 1, 56.0, 0.1972), _row("rabitq", 2, 116.0, 0.2104)]
    scale = [_scale_row("faiss-flat", None, 1536.0, 0.2, 8.0), _scale_row("faiss-hnsw", None, 1792.0, 0.19, 0.3),
             _scale_row("faiss-ivfpq", None, 56.0, 0.15, 0.2)]
    scale += [_scale_row(m, k, b, 0.1 + 0.01 * k, 0.5) for m in ("csr", "opq", LONG) for k, b in ((4, 16.0), (32, 128.0))]
    scale += [_scale_row("int8", None, 384.0, 0.2, 1.0)]
    sizes = {"int8": MethodSizes(fixed=True, smallest_bytes=384.0), "sq": MethodSizes(smallest_bytes=192.0, smallest_k=4),
             LONG: MethodSizes(smallest_bytes=16.0, smallest_k=4, fits={8: None})}
    return BenchResult(
        dataset={"name": "default", "corpus": 8000, "queries": 1500, "dim": 384, "judged_queries": 1500},
        config={}, machine=MACHINE, rows=rows, notes=["a note that is long enough to need wrapping " * 4],
        total_s=147.25, scale=scale, recommendation=recommend(scale, [8, 16, 32, 64, 128], sizes=sizes),
        recommendation_rows="scale", corpus_recommendation=recommend(rows, [8, 16, 32, 64, 128], sizes=sizes))


def _printed(result: BenchResult, *, width: int = 100, wide: bool = False) -> str:
    console = Console(width=width, record=True)
    terminal.print_table(result, console, wide=wide)
    return console.export_text()


def test_compact_tables_fit_100_columns_without_truncating() -> None:
    result = realistic_result()
    text = _printed(result)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 100
    lines = text.splitlines()
    assert any(LONG in line for line in lines)  # a long method name is shown whole
    assert "ms/query" in text and "fit s" in text and "MRR@10" not in text  # compact columns
    assert any(f"{LONG} + rerank-float32" in line or (LONG in line and "rerank" in nxt)
               for line, nxt in itertools.pairwise(lines))
    assert "recommendation at 200,000 rows (the scale study's rows)" in " ".join(text.split())
    for entry in result.recommendation:  # every verdict label is printed in full
        if entry["best"] is not None:
            assert entry["best"]["label"] in text and entry["fastest"]["label"] in text
    assert "nothing fits" in text
    assert "95% CI [" in text and "within noise:" in text  # the margin's interval and the pick


def test_tables_and_report_show_the_chosen_k_and_value_bits(tmp_path: Path) -> None:
    """csr and bsa rows read ``k·bits`` in the k column (8·8b: 8 active at 8-bit values; 4·1b: bsa's 4 binary features); rows whose
    codes declare no value bits show k alone, fixed-size methods ``fixed``; compact, wide and Markdown alike."""
    result = realistic_result()
    compact = _printed(result)
    lines = compact.splitlines()
    assert max(len(line) for line in lines) <= 100
    main_table = lines[: next(i for i, line in enumerate(lines) if line.startswith("└"))]
    cells = {(line.split("│")[1].strip(), line.split("│")[2].strip()) for line in main_table if line.startswith("│")}
    for expected in [("csr", "4·16b"), ("csr", "8·8b"), ("csr", "16·2b"), ("csr", "32·1b"), ("bsa", "16·1b"),
                     ("svd", "16"), ("int8", "fixed"), ("float32", "—")]:
        assert expected in cells, expected
    assert "·" not in "".join(budget for method, budget in cells if method not in ("csr", "bsa"))
    wide = _printed(result, width=260, wide=True)
    assert "32·1b" in wide and "4·16b" in wide
    markdown = report.markdown_table(result.rows)
    assert "| csr | 8·8b | codes |" in markdown and "| bsa | 32·1b | codes |" in markdown and "| svd | 8 | codes |" in markdown


def test_wide_mode_has_every_column_and_folds_rather_than_truncates() -> None:
    result = realistic_result()
    text = _printed(result, width=260, wide=True)
    for title, _, _ in columns.COLUMNS + columns.SCALE_COLUMNS:
        assert title in text, title
    assert "runner-up" in text and "margin" in text
    assert "…" not in _printed(result, width=100, wide=True)


@pytest.mark.slow
def test_markdown_report_explains_nothing_fits_and_the_scale_basis(tmp_path: Path) -> None:
    result = realistic_result()
    files = report.write_report(result, tmp_path)
    text = files["markdown"].read_text()
    assert "scale study's rows at 200,000 rows" in text and "corpus rows of the table alone" in text
    assert "Nothing fits 8 B per vector:" in text
    assert "- int8: fixed 384 B per vector" in text and "- sq: smallest code 192 B per vector (k=4)" in text
    assert "paired bootstrap over the judged queries" in text and "faster to search by more than a factor 1.25, else the faster to fit" in text
    for entry in result.recommendation:  # each budget's interval and pick, in full
        if entry["margin_interval"] is not None:
            low, high = entry["margin_interval"]
            assert f"95% CI [{low:+.4f}, {high:+.4f}]" in text
            pick = "within noise" if entry["within_noise"] else "clear"
            assert f"{pick}: {entry['recommended']['label']}" in text


# -- colours --------------------------------------------------------------------------------------


def _colours_of(ax: Any) -> dict[str, str]:
    """label -> hex colour of every labelled line and scatter collection of ``ax``."""
    found: dict[str, str] = {}
    for line in ax.get_lines():
        if not line.get_label().startswith("_"):
            found[line.get_label()] = mcolors.to_hex(line.get_color())
    for collection in ax.collections:
        if not collection.get_label().startswith("_"):
            found[collection.get_label()] = mcolors.to_hex(collection.get_edgecolor()[0])
    return found


@pytest.mark.slow
def test_every_figure_colours_a_method_the_same_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures: dict[str, dict[str, str]] = {}
    finish = report._finish

    def capture(fig: Any, ax: Any, path: Path, **kw: Any) -> Path:
        figures[path.stem] = _colours_of(ax)
        return finish(fig, ax, path, **kw)

    monkeypatch.setattr(report, "_finish", capture)
    report.write_report(realistic_result(), tmp_path)
    assert set(figures) == {"quality_vs_bytes", "quality_vs_latency", "pareto", "scale"}
    seen: dict[str, set[str]] = {}
    for labels in figures.values():
        for label, colour in labels.items():
            if label == "Pareto front":
                continue
            method = label.split("+")[0].strip()
            seen.setdefault(method, set()).add(colour)
    assert {"csr", "opq", LONG, "int8", "float32", "faiss-hnsw"} <= set(seen)
    palette = report.result_colours(realistic_result())
    for method, colours in seen.items():
        assert colours == {palette[method]}, method  # one colour per method, in every figure
        if method != LONG:
            assert palette[method] == method_colour(method)  # registered methods and references: the registry's
    assert method_colour("float32") == method_colour("faiss-flat") == "#000000"
    assert len({palette[m] for m in seen if m not in REFERENCE_COLOURS}) == len(seen.keys() - REFERENCE_COLOURS.keys())


def test_palette_follows_the_sorted_registry_third_party_included(fresh_plugins: None) -> None:
    class Toy(adaptemb.get_registry().get("svd")):  # type: ignore[misc,valid-type]
        name = "aaa_toy"

    @adaptemb.hookimpl
    def register_compressors(registry: CompressorRegistry) -> None:
        registry.add(Toy)

    adaptemb.register_plugin(types.SimpleNamespace(register_compressors=register_compressors), name="toy-colours")
    names = sorted(adaptemb.get_registry().names())
    assert names[0] == "aaa_toy"
    colours = method_colours(names)
    assert [colours[n] for n in names] == [PALETTE[i % len(PALETTE)] for i in range(len(names))]
    assert not set(colours.values()) & set(REFERENCE_COLOURS.values())  # references stay apart
    assert method_colour("not-installed") == method_colour("not-installed") in PALETTE  # a stable fallback


@pytest.mark.slow
def test_bench_rows_carry_the_value_bits_their_codes_declare() -> None:
    """A real run at byte budgets: csr's and bsa's rows hold the bits per value of their codes (bsa 1; csr what its
    packed codes declare, with which k indices and values fill the row's bytes exactly), the table shows them."""
    from adaptemb import PackedSparseCodes
    from adaptemb.datasets import Dataset
    from adaptemb.evaluate.runner import BenchConfig, run_bench

    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((400, 32)).astype(np.float32)
    gold = rng.choice(400, 40, replace=False)
    data = Dataset.from_gold("toy", corpus, corpus[gold] + 0.1 * rng.standard_normal((40, 32)).astype(np.float32), gold)
    params = {"csr": {"hidden": 64, "k": 4, "epochs": 2, "batch_size": 64, "k_aux": 16},
              "bsa": {"h": 64, "k": 8, "epochs": 2, "batch_size": 64}}
    config = BenchConfig(methods=["bsa", "csr", "svd"], bytes=[16, 32], device="cpu", rounds=1, warmup=0, batch_size=16,
                         fit_progress=False, method_params=params)
    result = run_bench(data, config)
    rows = [r for r in result.rows if r["variant"] == "codes" and r["method"] != "float32"]
    index_bits = 7  # ceil(log2(64 + 1)): an index of h = 64 (bsa) or hidden = 64 (csr)
    for row in rows:
        if row["method"] == "bsa":
            # packed rows, or the 8-byte bitmap of h = 64 where k indices would take more
            assert row["value_bits"] == 1 and row["bytes_per_vector"] == min(-(-row["k"] * index_bits // 8), 8)
        elif row["method"] == "csr":
            assert row["value_bits"] in (1, 2, 3, 4, 8, 16)
            # indices at fixed width or Elias-Fano coded, whichever row is smaller (row_bytes, checked by hand)
            fixed = -(-row["k"] * (index_bits + row["value_bits"]) // 8)
            assert row["bytes_per_vector"] == PackedSparseCodes.row_bytes(row["k"], 64, row["value_bits"]) <= fixed
        else:
            assert row["value_bits"] is None
    assert {r["method"] for r in rows} == {"bsa", "csr", "svd"}
    console = Console(width=100, record=True)
    terminal.print_table(result, console)
    text = console.export_text()
    for row in rows:
        cell = f"{row['k']}·{row['value_bits']}b" if row["value_bits"] else f"{row['k']}"
        assert any(line.split("│")[1].strip() == row["method"] and line.split("│")[2].strip() == cell
                   for line in text.splitlines() if line.startswith("│")), cell


def test_the_terminal_shows_each_familys_best_row_per_budget_and_every_row_on_request() -> None:
    result = realistic_result()
    result.rows += [_row("svd+binary", 128, 16.0, 0.175), _row("svd+rabitq", 96, 16.0, 0.137),
                    _row("svd+binary", 256, 32.0, 0.1925)]
    groups = terminal.best_rows(result)
    assert [row["method"] for row in groups[0]] == ["float32"]
    budgets = [8, 16, 32, 64, 128, float("inf")]  # the recommendation's, then above them all

    def budget(row: dict[str, Any]) -> float:
        return next(b for b in budgets if row["bytes_per_vector"] <= b)

    held = [{budget(row) for row in group} for group in groups[1:]]
    assert all(len(one) == 1 for one in held) and [min(one) for one in held] == sorted(min(one) for one in held)
    for group in groups[1:]:
        families = [str(row["method"]).split("+")[0] for row in group]
        assert len(families) == len(set(families))  # one row a family
        assert [row["ndcg_at_10"] for row in group] == sorted((row["ndcg_at_10"] for row in group), reverse=True)
    at_16 = {row["method"]: row["ndcg_at_10"] for row in groups[1]}  # nothing at 8 B: 16 B comes first
    assert at_16["svd+binary"] == 0.175 and "svd" not in at_16 and "svd+rabitq" not in at_16  # svd's best: its code
    above = groups[-1]  # rows above every budget: int8 (384 B), sq (192 B) and rerank rows
    assert {row["method"] for row in above} >= {"int8", "sq"} and all(row["bytes_per_vector"] > 128 for row in above)
    shown = sum(len(group) for group in groups)
    compact, every = _printed(result), _printed_all(result)
    assert f"{shown} of {len(result.rows)} rows (--all-rows)" in " ".join(compact.split())
    assert every.count("svd+rabitq") == 1 and compact.count("svd+rabitq") == 0
    assert "(--all-rows)" not in every


def _printed_all(result: BenchResult) -> str:
    console = Console(width=100, record=True)
    terminal.print_table(result, console, all_rows=True)
    return console.export_text()


def test_the_summary_gives_the_time_of_each_fit_and_where_the_files_are(tmp_path: Path) -> None:
    result = realistic_result()
    result.steps = [{"kind": "reference", "method": "float32", "seconds": 1.5},
                    {"kind": "fit", "method": "csr", "seconds": 20.04}, {"kind": "row", "method": "csr", "seconds": 0.3},
                    *[{"kind": "fit", "method": "opq", "seconds": s} for s in (2.0, 3.0, 4.5)]]
    files = {"json": tmp_path / "results.json", "markdown": tmp_path / "report.md", "pareto": tmp_path / "pareto.png"}
    console = Console(width=100, record=True)
    terminal.print_summary(result, files, console)
    text = " ".join(console.export_text().split())
    assert "time per fit: csr 20.0s, opq 9.5s (3 fits); whole run 147s" in text
    assert "1 note (what was skipped, shared or fitted how) is in the report" in text
    assert f"results: {tmp_path / 'report.md'} (every row), and beside it results.json, pareto.png" in text
