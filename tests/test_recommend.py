"""The bench's verdict: recommendation per byte budget and the Pareto front (hand-made rows), and the runner's
byte budgets (each method at its own k for a byte budget)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import adaptemb
from adaptemb.datasets import Dataset
from adaptemb.evaluate.metrics import PER_QUERY_NDCG
from adaptemb.evaluate.recommend import cheaper, paired_bootstrap_interval, pareto_front, recommend, row_label
from adaptemb.evaluate.runner import BenchConfig, run_bench


def _row(method: str, k: int | None, nbytes: float, ndcg: float, ms: float, fit_s: float = 1.0,
         variant: str = "codes") -> dict[str, object]:
    return {"method": method, "k": k, "variant": variant, "bytes_per_vector": nbytes, "ndcg_at_10": ndcg,
            "latency_per_query_ms": ms, "fit_s": fit_s}


ROWS = [
    _row("float32", None, 1536, 0.95, 0.05, 0.0, "reference"),
    _row("csr", 8, 32, 0.68, 0.01, 9.9),
    _row("csr", 16, 64, 0.78, 0.02, 9.9),
    _row("pq", 32, 32, 0.80, 0.20, 3.0),
    _row("pq", 64, 64, 0.884, 0.30, 4.0),
    _row("opq", 32, 32, 0.841, 0.25, 60.0),
    _row("opq", 64, 64, 0.89, 0.25, 70.0),
    _row("binary", None, 48, 0.70, 0.01, 0.1),
    _row("csr", 32, 128, 0.881, 0.03, 9.9),
    _row("svd", 16, 64, 0.2, 0.01, 0.2),
    _row("svd", 16, 64 + 384, 0.9, 0.2, 0.2, "rerank-int8"),
]


def test_best_row_within_each_byte_budget_with_margin_and_fit_time() -> None:
    by_budget = {e["budget_bytes"]: e for e in recommend(ROWS, [16, 32, 64, 128, 512])}
    assert by_budget[16]["best"] is None and by_budget[16]["candidates"] == 0
    at32 = by_budget[32]
    assert at32["best"]["label"] == "opq k=32" and at32["best"]["fit_s"] == 60.0
    assert at32["runner_up"]["label"] == "pq k=32" and at32["margin"] == pytest.approx(0.041)
    at64 = by_budget[64]  # every row of at most 64 B counts, whatever budget it was run at
    assert at64["best"]["label"] == "opq k=64"
    assert at64["runner_up"]["label"] == "pq k=64" and at64["margin"] == pytest.approx(0.006)
    best_at_64 = max((r for r in ROWS if r["bytes_per_vector"] <= 64), key=lambda r: r["ndcg_at_10"])
    assert at64["best"]["ndcg_at_10"] == best_at_64["ndcg_at_10"]
    # fastest within 0.01 of 0.89: pq k=64 (0.884) at 0.30 ms loses to opq itself at 0.25 ms
    assert at64["fastest"]["label"] == "opq k=64"
    at128 = by_budget[128]
    assert at128["best"]["label"] == "opq k=64" and at128["runner_up"]["label"] == "pq k=64"
    assert at128["fastest"]["label"] == "csr k=32"  # 0.881 is within 0.01 of 0.89 and 8x faster
    assert by_budget[512]["best"]["label"] == "svd k=16 + rerank-int8"  # funnel rows count with their store's bytes


def test_ties_prefer_fewer_bytes_and_runner_up_is_another_method() -> None:
    rows = [_row("a", 1, 16, 0.5, 1.0), _row("a", 2, 32, 0.5, 1.0), _row("a", 3, 32, 0.4, 1.0)]
    (entry,) = recommend(rows, [32])
    assert entry["best"]["label"] == "a k=1" and entry["runner_up"] is None and entry["margin"] is None


def test_paired_bootstrap_interval_by_hand() -> None:
    same = [0.2, 0.5, 1.0, 0.0] * 10
    assert paired_bootstrap_interval(same, same) == (0.0, 0.0)  # identical per-query scores: no margin at all
    low, high = paired_bootstrap_interval([v + 0.1 for v in same], same)  # every query 0.1 better: every draw 0.1
    assert low == pytest.approx(0.1) and high == pytest.approx(0.1)
    # +1 on 100 queries, -1 on 100: mean 0, standard error 1 / sqrt(200) = 0.0707, so about ±1.96 × 0.0707
    a, b = [1.0] * 100 + [0.0] * 100, [0.0] * 100 + [1.0] * 100
    low, high = paired_bootstrap_interval(a, b, seed=3)
    assert low == pytest.approx(-0.139, abs=0.02) and high == pytest.approx(0.139, abs=0.02)
    assert paired_bootstrap_interval(a, b, seed=3) == (low, high)  # seeded: the same interval again
    # a clear winner: +1 on 60 queries, -1 on 20, 0 on 20: mean 0.4, standard error 0.8 / 10 = 0.08
    a, b = [1.0] * 60 + [0.0] * 20 + [0.5] * 20, [0.0] * 60 + [1.0] * 20 + [0.5] * 20
    low, high = paired_bootstrap_interval(a, b)
    assert low == pytest.approx(0.4 - 0.157, abs=0.03) and high == pytest.approx(0.4 + 0.157, abs=0.03) and low > 0
    with pytest.raises(ValueError, match="equally long"):
        paired_bootstrap_interval([1.0, 0.0], [1.0])


def _scored(method: str, per_query: list[float], ms: float, fit_s: float) -> dict[str, object]:
    return {**_row(method, 32, 32, float(np.mean(per_query)), ms, fit_s), PER_QUERY_NDCG: per_query}


def test_within_noise_the_cheaper_row_is_recommended() -> None:
    # opq: 102 of 200 queries hit, pq: 100 (100 of them the others): margin 0.01, interval about ±0.14
    opq, pq = [1.0] * 102 + [0.0] * 98, [0.0] * 100 + [1.0] * 100
    (entry,) = recommend([_scored("opq", opq, 0.25, 60.0), _scored("pq", pq, 0.20, 3.0)], [32])
    assert entry["best"]["label"] == "opq k=32" and entry["margin"] == pytest.approx(0.01)
    low, high = entry["margin_interval"]
    assert low < 0 < high and entry["within_noise"] is True
    assert entry["recommended"]["label"] == "pq k=32"  # latencies within a factor 1.25 tie; pq fits in 3 s, not 60
    (entry,) = recommend([_scored("opq", opq, 0.10, 1.0), _scored("pq", pq, 0.20, 3.0)], [32])
    assert entry["within_noise"] is True and entry["recommended"]["label"] == "opq k=32"  # cheaper as well
    (entry,) = recommend([_scored("opq", opq, 0.10, 90.0), _scored("pq", pq, 0.20, 3.0)], [32])
    assert entry["recommended"]["label"] == "opq k=32"  # twice as fast to search: that outweighs its fit time
    slow_fit, unknown = _row("a", 1, 8, 0.5, 0.10, 90.0), _row("b", 1, 8, 0.5, None, 1.0)  # type: ignore[arg-type]
    assert cheaper(_row("c", 1, 8, 0.5, 0.12, 1.0), slow_fit) and not cheaper(slow_fit, _row("c", 1, 8, 0.5, 0.12, 1.0))
    assert not cheaper(unknown, slow_fit) and not cheaper(slow_fit, unknown)
    clear = [1.0] * 180 + [0.0] * 20  # +1 on 80 queries, 0 on the rest: margin 0.4
    (entry,) = recommend([_scored("opq", clear, 0.25, 60.0), _scored("pq", [0.0] * 80 + [1.0] * 100 + [0.0] * 20,
                                                                       0.20, 3.0)], [32])
    assert entry["margin_interval"][0] > 0 and entry["within_noise"] is False
    assert entry["recommended"]["label"] == "opq k=32"
    (entry,) = recommend(ROWS, [32])  # rows without per-query scores: no interval, the best is recommended
    assert entry["margin_interval"] is None and entry["within_noise"] is None
    assert entry["recommended"]["label"] == "opq k=32"


def test_pareto_front_keeps_only_undominated_rows_by_bytes() -> None:
    front = [row_label(r) for r in pareto_front(ROWS)]
    assert front == ["opq k=32", "opq k=64", "svd k=16 + rerank-int8", "float32"]  # csr k=8: opq is better at 32 B


def test_bench_maps_byte_budgets_to_each_methods_own_k() -> None:
    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((300, 32)).astype(np.float32)
    corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
    queries = corpus[:40] + 0.1 * rng.standard_normal((40, 32)).astype(np.float32)
    qrels = sp.csr_matrix((np.ones(40), (np.arange(40), np.arange(40))), shape=(40, 300))
    data = Dataset("toy", corpus, queries.astype(np.float32), qrels)
    config = BenchConfig(methods=["svd", "pq", "sq", "int8"], bytes=[8, 16, 64], device="cpu", rounds=1, warmup=0,
                         batch_size=16, method_params={"pq": {"nbits": 8}})
    result = run_bench(data, config)
    rows = {(r["method"], r["k"]): r for r in result.rows}
    assert {k for m, k in rows if m == "svd"} == {2, 4, 16}  # float32 dims: bytes / 4
    assert {k for m, k in rows if m == "pq"} == {8, 16, 32}  # sub-quantisers at 8 bits: the bytes, dividing 32
    assert {k for m, k in rows if m == "sq"} == {4, 8}  # 16 B: 4 bits, 64 B: 8 bits (32 B); 8 B: nothing fits
    assert all(r["bytes_per_vector"] <= 64 for r in result.rows if r["method"] != "float32")
    assert [e["budget_bytes"] for e in result.recommendation] == [8, 16, 64]
    at64 = result.recommendation[-1]
    best = max((r for r in result.rows if r["bytes_per_vector"] <= 64), key=lambda r: r["ndcg_at_10"])
    assert at64["best"]["ndcg_at_10"] == best["ndcg_at_10"]
    assert any("sq: no budget fits 8 B" in note for note in result.notes)
    assert adaptemb.get_registry().get("pq").Config.model_fields["k"].default is None


def test_bytes_and_budgets_are_exclusive_and_bytes_must_be_integers() -> None:
    from typer.testing import CliRunner

    from adaptemb.cli import app

    runner = CliRunner()
    both = runner.invoke(app, ["bench", "--methods", "svd", "--bytes", "16", "--budgets", "4"])
    assert both.exit_code == 2 and "not both" in both.stderr
    bad = runner.invoke(app, ["bench", "--methods", "svd", "--bytes", "16,x"])
    assert bad.exit_code == 2 and "--bytes must be a comma-separated list" in bad.stderr


def test_nothing_fits_is_explained_per_method() -> None:
    from adaptemb.evaluate.recommend import MethodSizes, why_nothing_fits

    sizes = {"int8": MethodSizes(fixed=True, smallest_bytes=384.0),
             "sq": MethodSizes(smallest_bytes=192.0, smallest_k=4, fits={16: None}),
             "svd": MethodSizes(smallest_bytes=4.0, smallest_k=1, fits={16: 4}),
             "pq": MethodSizes(fits={0.5: None})}
    rows = [_row("float32", None, 1536, 0.95, 0.05, 0.0, "reference"), _row("int8", None, 384, 0.9, 0.1),
            _row("sq", 4, 192, 0.9, 0.1), _row("svd", 16, 64, 0.2, 0.01), _row("svd", 32, 128, 0.3, 0.01),
            _row("pq", 16, 16, 0.5, 0.1)]
    (entry,) = recommend(rows, [8], sizes={**sizes, "svd": MethodSizes(smallest_bytes=4.0, smallest_k=1, fits={8: 2})})
    assert entry["best"] is None and set(entry["why_nothing_fits"]) == {"int8", "sq", "svd", "pq"}
    why = why_nothing_fits(rows, 16, sizes)
    assert why == {"int8": "fixed 384 B per vector", "sq": "smallest code 192 B per vector (k=4)",
                   "svd": "k=4 would fit 16 B but was not run (rows 64–128 B per vector; --bytes 16 runs it)"}
    assert why_nothing_fits(rows, 0.5, sizes)["pq"] == "no code fits 0.5 B per vector (16 B per vector)"
    (fits,) = recommend(rows, [16], sizes=sizes)
    assert fits["best"]["label"] == "pq k=16" and fits["why_nothing_fits"] is None


@pytest.mark.slow
def test_bench_explains_a_budget_nothing_fits_in_notes_json_and_report(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from typer.testing import CliRunner

    from adaptemb.cli import app

    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((300, 32)).astype(np.float32)
    gold = np.arange(40)
    np.savez(tmp_path / "tiny.npz", corpus=corpus, queries=corpus[:40] + 0.1, gold=gold)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["bench", "--data", str(tmp_path / "tiny.npz"), "--methods", "int8,sq,svd",
                                      "--budgets", "16,32", "--out", str(out), "--rounds", "1", "--warmup", "0",
                                      "--batch-size", "16", "--device", "cpu", "--quiet"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    report = json.loads((out / "results.json").read_text())
    at16 = report["recommendation"][0]
    assert at16["budget_bytes"] == 16 and at16["best"] is None
    assert at16["why_nothing_fits"] == {
        "int8": "fixed 32 B per vector",
        "sq": "k=4 would fit 16 B but was not run (32 B per vector; --bytes 16 runs it)",  # --budgets 16,32: sq's default
        "svd": "k=4 would fit 16 B but was not run (rows 64–128 B per vector; --bytes 16 runs it)"}
    note = next(n for n in report["notes"] if n.startswith("16 B per vector: nothing fits"))
    assert "int8: fixed 32 B per vector" in note and "svd: k=4 would fit 16 B" in note
    markdown = (out / "report.md").read_text()
    assert "Nothing fits 16 B per vector:" in markdown and "- int8: fixed 32 B per vector" in markdown
    assert "nothing fits" in result.stdout and "int8: fixed 32 B per vector" in " ".join(result.stdout.split())
