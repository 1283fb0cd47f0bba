"""``adaptemb bench`` end to end on a tiny dataset file, and the runner on methods with custom scoring."""

from __future__ import annotations

import json
import math
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import adaptemb
from adaptemb import Budgets, Codes, Compressor, DenseCodes, ProjectedQueries, SparseCodes
from adaptemb.cli import app  # importing the package registers every command
from adaptemb.datasets import Dataset
from adaptemb.evaluate.runner import BenchConfig, run_bench
from adaptemb.registry import CompressorRegistry

runner = CliRunner()
N, Q, D = 400, 60, 32


def _arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    corpus = rng.standard_normal((N, D)).astype(np.float32)
    corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
    gold = rng.choice(N, Q, replace=False)
    queries = corpus[gold] + 0.12 * rng.standard_normal((Q, D)).astype(np.float32)
    labels = rng.integers(0, 5, N)
    return {"corpus": corpus, "queries": queries.astype(np.float32), "gold": gold, "labels": labels,
            "query_labels": labels[gold]}


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One CLI run shared by the checks below."""
    tmp = tmp_path_factory.mktemp("bench")
    np.savez(tmp / "tiny.npz", **_arrays())
    out = tmp / "out"
    result = runner.invoke(app, ["bench", "--data", str(tmp / "tiny.npz"), "--methods", "svd,mrl,int8", "--budgets",
                                 "8,16,64", "--out", str(out), "--rounds", "1", "--warmup", "0", "--batch-size", "32",
                                 "--device", "cpu", "--rerank", "--quiet"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return out


def _independent_ndcg(scores: np.ndarray, gold: np.ndarray) -> float:
    """One relevant row per query: NDCG@10 = 1 / log2(rank + 1) when its 1-based rank is <= 10."""
    order = np.argsort(-scores, axis=1, kind="stable")
    ranks = np.argmax(order == gold[:, None], axis=1) + 1
    return float(np.mean(np.where(ranks <= 10, 1.0 / np.log2(ranks + 1), 0.0)))


@pytest.mark.slow
def test_bench_writes_every_output(bench_dir: Path) -> None:
    for name in ("results.json", "results.csv", "quality_vs_bytes.png", "quality_vs_latency.png", "report.md"):
        assert (bench_dir / name).is_file(), name
    for png in bench_dir.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(bench_dir.glob(".*.tmp"))  # every file went through atomic_write and was renamed into place
    report = (bench_dir / "report.md").read_text()
    assert "(quality_vs_bytes.png)" in report and "(quality_vs_latency.png)" in report
    header = (bench_dir / "results.csv").read_text().splitlines()[0]
    assert "ndcg_at_10" in header and "bytes_per_vector" in header and "machine_cpu" in header


def test_bench_rows_name_method_and_budget(bench_dir: Path) -> None:
    result = json.loads((bench_dir / "results.json").read_text())
    codes = [(r["method"], r["k"]) for r in result["rows"] if r["variant"] in ("codes", "reference")]
    assert codes == [("float32", None), ("svd", 8), ("svd", 16), ("mrl", 8), ("mrl", 16), ("int8", None)]
    assert any("k=64 skipped" in note for note in result["notes"])  # k > d for svd and mrl
    assert result["machine"]["versions"]["faiss"] and result["machine"]["cpu"]
    rows = {(r["method"], r["k"], r["variant"]): r for r in result["rows"]}
    assert rows[("svd", 8, "codes")]["bytes_per_vector"] == 8 * 4
    assert rows[("svd", 8, "codes")]["compression_ratio"] == pytest.approx(D * 4 / 32)
    assert rows[("int8", None, "codes")]["bytes_per_vector"] == D
    # a funnel row pays for its codes and for its rerank store
    assert rows[("svd", 8, "rerank-float32")]["bytes_per_vector"] == 8 * 4 + D * 4
    assert rows[("svd", 8, "rerank-int8")]["bytes_per_vector"] == 8 * 4 + D
    for row in result["rows"]:
        assert row["latency_median_s"] > 0 and row["latency_batch_size"] == 32
        assert 0.0 <= row["ndcg_at_10"] <= 1.0


def test_bench_ndcg_equals_an_independent_numpy_computation(bench_dir: Path) -> None:
    arrays = _arrays()
    result = json.loads((bench_dir / "results.json").read_text())
    for row in result["rows"]:
        if row["variant"] == "reference":
            scores = arrays["queries"] @ arrays["corpus"].T
        elif row["variant"] == "codes":
            compressor = adaptemb.get_compressor(row["method"], seed=0).fit(arrays["corpus"])
            docs = compressor.encode(arrays["corpus"], k=row["k"]).to_dense()
            scores = compressor.encode_queries(arrays["queries"], k=row["k"]).to_dense() @ docs.T
        else:
            continue
        assert row["ndcg_at_10"] == pytest.approx(_independent_ndcg(scores, arrays["gold"]), abs=1e-6), row["method"]
        nearest = np.argmax(scores, axis=1)
        assert row["one_nn_accuracy"] == pytest.approx(np.mean(arrays["labels"][nearest] == arrays["query_labels"]))


def test_rerank_rows_beat_their_shortlist(bench_dir: Path) -> None:
    rows = {(r["method"], r["k"], r["variant"]): r for r in json.loads((bench_dir / "results.json").read_text())["rows"]}
    assert rows[("mrl", 8, "rerank-float32")]["ndcg_at_10"] > rows[("mrl", 8, "codes")]["ndcg_at_10"]


def test_unknown_method_is_a_clear_error() -> None:
    result = runner.invoke(app, ["bench", "--methods", "svd,nope", "--out", "unused"])
    assert result.exit_code == 2
    assert "error: unknown compressor 'nope'" in result.stderr and "svd" in result.stderr
    assert "Traceback" not in result.output


def test_bad_budgets_and_missing_data_are_clear_errors(tmp_path: Path) -> None:
    bad = runner.invoke(app, ["bench", "--methods", "svd", "--budgets", "16,x"])
    assert bad.exit_code == 2 and "error: --budgets must be a comma-separated list" in bad.stderr
    missing = runner.invoke(app, ["bench", "--methods", "svd", "--data", str(tmp_path / "nope.npz")])
    assert missing.exit_code == 2 and "error: " in missing.stderr and "Traceback" not in missing.stderr


# -- the runner with methods that score their own way -------------------------------------------


class AsymmetricToy(Compressor):
    """Test method: ReLU-TopK sparse document codes, dense (projected) queries in the same h-dim space."""

    name = "asymtoy"
    budget_help = "active dims"
    doc_kind = "sparse"
    symmetric = False
    query_kind = "projected"

    def _fit(self, x: torch.Tensor, **supervision: object) -> None:
        self._w = torch.randn(x.shape[1], 64, generator=self.generator)

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        values, ids = torch.topk(torch.relu(x @ self._w), k, dim=1)
        return SparseCodes(ids.numpy(), values.numpy(), 64)

    def _encode_queries(self, x: torch.Tensor, k: int | None) -> Codes:
        return ProjectedQueries((x @ self._w).numpy())

    def score(self, query_codes: Codes, doc_codes: Codes) -> np.ndarray:
        return query_codes.to_dense() @ doc_codes.to_dense().T

    def _budgets(self) -> Budgets:
        return Budgets(low=1, high=64, default=8)

    def _state(self) -> dict[str, torch.Tensor]:
        return {"w": self._w}

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self._w = tensors["w"]


class NegatedToy(AsymmetricToy):
    """Test method: dense codes, but its own score is the negated dot product (it declares no query kind)."""

    name = "negtoy"
    doc_kind = None
    query_kind = None

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        return DenseCodes((x @ self._w[:, :k]).numpy())

    def _encode_queries(self, x: torch.Tensor, k: int | None) -> Codes:
        return self.encode(x, k=k)

    def score(self, query_codes: Codes, doc_codes: Codes) -> np.ndarray:
        return -(query_codes.to_dense() @ doc_codes.to_dense().T)


@pytest.fixture
def toy_methods(fresh_plugins: None) -> Iterator[None]:
    @adaptemb.hookimpl
    def register_compressors(registry: CompressorRegistry) -> None:
        registry.add(AsymmetricToy)
        registry.add(NegatedToy)

    adaptemb.register_plugin(types.SimpleNamespace(register_compressors=register_compressors), name="toys")
    yield


def _dataset(labels_only: bool = False) -> Dataset:
    a = _arrays(1)
    extra = {"labels": a["labels"]} if labels_only else {"labels": a["labels"], "query_labels": a["query_labels"]}
    return Dataset.from_gold("toy", a["corpus"], a["queries"], a["gold"], **extra)


def _config(methods: list[str], **kw: object) -> BenchConfig:
    return BenchConfig(methods=methods, budgets=[4, 16], device="cpu", rounds=1, warmup=0, batch_size=16, **kw)


@pytest.mark.slow
def test_runner_serves_custom_scoring_methods(toy_methods: None) -> None:
    data = _dataset()
    result = run_bench(data, _config(["asymtoy", "negtoy"]))
    rows = {(r["method"], r["k"]): r for r in result.rows}
    assert rows[("asymtoy", 16)]["backend"] == "numba-rows"  # projected queries against sparse documents
    assert rows[("negtoy", 16)]["backend"] == "score-function"  # no declared query kind: brute force, named
    assert any(n.startswith("negtoy:") and "searched by brute force" in n for n in result.notes)
    assert not any(n.startswith("asymtoy:") for n in result.notes)
    for (method, k), row in rows.items():
        if method == "float32":
            continue
        compressor = adaptemb.get_compressor(method, seed=0).fit(data.corpus)
        scores = compressor.score(compressor.encode_queries(data.queries, k=k), compressor.encode(data.corpus, k=k))
        gold = data.qrels.indices
        assert row["ndcg_at_10"] == pytest.approx(_independent_ndcg(scores, gold), abs=1e-6)


def test_leave_one_out_one_nn_when_only_corpus_labels_exist() -> None:
    data = _dataset(labels_only=True)
    result = run_bench(data, _config(["mrl"], loo_queries=50))
    reference = result.rows[0]
    sample = np.sort(np.random.default_rng(0).choice(N, size=50, replace=False))
    scores = data.corpus[sample] @ data.corpus.T
    scores[np.arange(50), sample] = -np.inf  # leave the query's own row out
    expected = np.mean(data.labels[np.argmax(scores, axis=1)] == data.labels[sample])
    assert reference["one_nn_accuracy"] == pytest.approx(expected)
    assert all(math.isfinite(r["one_nn_accuracy"]) for r in result.rows)


def test_param_flag_must_name_a_benchmarked_method() -> None:
    result = runner.invoke(app, ["bench", "--methods", "svd", "-p", "mrl.k=4"])
    assert result.exit_code == 2 and "error: --param names method(s) mrl" in result.stderr
    result = runner.invoke(app, ["bench", "--methods", "svd", "-p", "k=4"])
    assert result.exit_code == 2 and "METHOD.NAME=VALUE" in result.stderr


@pytest.mark.slow
def test_scale_study_searches_every_method_through_its_own_index(tmp_path: Path) -> None:
    """``--scale N``: the corpus plus perturbed copies, every method at its table budgets through its own index,
    faiss flat / HNSW / IVF-PQ beside it; the copies are distractors, so quality can only drop."""
    np.savez(tmp_path / "tiny.npz", **_arrays())
    out = tmp_path / "out"
    result = runner.invoke(app, ["bench", "--data", str(tmp_path / "tiny.npz"), "--methods", "mrl,csr,int8", "--budgets",
                                 "8", "--out", str(out), "--rounds", "1", "--warmup", "0", "--batch-size", "16",
                                 "--scale", "3000", "--scale-baselines", "flat,hnsw,ivfpq", "--scale-check", "20", "--quiet",
                                 "-p", "csr.epochs=1", "-p", "csr.hidden=64", "-p", "csr.k=4"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "results.json").read_text())
    scale = {r["method"]: r for r in report["scale"]}
    assert set(scale) == {"faiss-flat", "faiss-hnsw", "faiss-ivfpq", "mrl", "csr", "int8"}
    assert all(r["n"] == 3000 for r in report["scale"])
    assert scale["faiss-flat"]["neighbour_recall_at_10"] == 1.0 and scale["faiss-flat"]["speedup_vs_flat"] == 1.0
    assert scale["csr"]["backend"] == "numba-levels" and scale["csr"]["k"] == 8 and not scale["csr"]["brute_force"]
    assert scale["csr"]["active_dims"] == 8 and scale["csr"]["index_mb"] > 0  # the table's budget, not csr's default k=4
    assert scale["csr"]["score_check"] == {"queries": 20, "identical_top_10": 1.0}
    assert scale["int8"]["score_check"]["identical_top_10"] == 1.0
    small = {(r["method"], r["k"]): r for r in report["rows"]}
    assert scale["mrl"]["k"] == 8 and scale["mrl"]["ndcg_at_10"] <= small[("mrl", 8)]["ndcg_at_10"] + 1e-9
    assert scale["faiss-flat"]["ndcg_at_10"] <= small[("float32", None)]["ndcg_at_10"] + 1e-9
    assert (out / "scale.png").is_file() and "## Scale study: 3,000 rows" in (out / "report.md").read_text()


def test_scaled_corpus_keeps_the_corpus_first_and_row_norms() -> None:
    from adaptemb.evaluate.scale import scaled_corpus

    corpus = np.random.default_rng(0).standard_normal((50, 16)).astype(np.float32) * 3
    rows = scaled_corpus(corpus, 170, noise=0.5, seed=1)
    assert rows.shape == (170, 16) and rows.dtype == np.float32
    np.testing.assert_array_equal(rows[:50], corpus)
    copies = rows[50:]
    nearest = (copies / np.linalg.norm(copies, axis=1, keepdims=True)) @ (corpus / np.linalg.norm(corpus, axis=1, keepdims=True)).T
    assert 0.8 < float(np.median(nearest.max(axis=1))) < 0.99  # close to their source row, not identical to it
    np.testing.assert_allclose(np.sort(np.linalg.norm(copies, axis=1)), np.sort(np.linalg.norm(copies, axis=1)))
    with pytest.raises(ValueError, match="smaller than the corpus"):
        scaled_corpus(corpus, 10, noise=0.5)


def test_default_methods_are_every_registered_one_third_party_included(toy_methods: None) -> None:
    from adaptemb.cli.bench import default_compositions, default_methods

    names = default_methods()
    registered = [info.name for info in adaptemb.list_compressors()]
    assert names == sorted(registered) + default_compositions() and {"asymtoy", "negtoy"} <= set(names)


def _tiny_scale(methods: list[str], rows: int = 2000, **kw: object) -> tuple[Dataset, BenchConfig]:
    from adaptemb.evaluate.scale import ScaleConfig

    scale = ScaleConfig(rows=rows, baselines=("flat", "ivfpq"), batch_size=16, warmup=0, rounds=1, progress=False)
    return _dataset(), BenchConfig(methods=methods, device="cpu", rounds=1, warmup=0, batch_size=16, scale=scale,
                                   fit_progress=False, **kw)  # type: ignore[arg-type]


@pytest.mark.slow
def test_scale_study_runs_the_tables_budgets_not_full_rank() -> None:
    """svd's default budget is rank d (no compression); at scale it runs at the table's byte budgets, like every
    method, and a method refitted per budget (pq) keeps its fit for each."""
    data, config = _tiny_scale(["svd", "pq", "int8"], bytes=[16, 32])
    result = run_bench(data, config)
    table = {(r["method"], r["k"]): r["bytes_per_vector"] for r in result.rows if r["variant"] == "codes"}
    at_scale = {(r["method"], r["k"]): r["bytes_per_vector"] for r in result.scale if not r["method"].startswith("faiss-")}
    assert at_scale == table == {("svd", 4): 16, ("svd", 8): 32, ("pq", 16): 16, ("pq", 32): 32, ("int8", None): D}
    fit_s = {(r["method"], r["k"]): r["fit_s"] for r in result.rows if r["variant"] == "codes"}
    assert all(r["fit_s"] == fit_s[(r["method"], r["k"])] for r in result.scale if not r["method"].startswith("faiss-"))


def test_scale_study_with_explicit_budgets_uses_each_refit() -> None:
    from adaptemb.evaluate.scale import ScaleConfig

    data, config = _tiny_scale(["svd", "pq"], budgets=[4, 8])
    config.scale = ScaleConfig(rows=2000, budgets=(8, 64), baselines=("flat",), batch_size=16, warmup=0, rounds=1,
                               progress=False)
    result = run_bench(data, config)
    assert {(r["method"], r["k"]) for r in result.scale} == {("faiss-flat", None), ("svd", 8), ("pq", 8)}
    assert any(n == "scale: svd k=64 skipped (valid budgets 1..32)" for n in result.notes)
    assert any(n.startswith("scale: pq k=64 skipped") for n in result.notes)


@pytest.mark.slow
def test_with_a_scale_study_the_recommendation_ranks_the_scale_rows(tmp_path: Path) -> None:
    data, config = _tiny_scale(["svd", "mrl", "int8"], bytes=[16, 64, 128])
    result = run_bench(data, config)
    assert result.recommendation_rows == "scale" and len(result.corpus_recommendation) == 3
    for entry, small in zip(result.recommendation, result.corpus_recommendation):
        fits = [r for r in result.scale if r["bytes_per_vector"] <= entry["budget_bytes"]]
        best = max(fits, key=lambda r: r["ndcg_at_10"])
        assert entry["best"]["ndcg_at_10"] == best["ndcg_at_10"] and entry["best"]["method"] == best["method"]
        fits = [r for r in result.rows if r["bytes_per_vector"] <= small["budget_bytes"]]
        assert small["best"]["ndcg_at_10"] == max(r["ndcg_at_10"] for r in fits)
    assert any(n.startswith("recommendation: from the scale study's rows at 2,000 rows") for n in result.notes)
    plain = run_bench(data, BenchConfig(methods=["svd"], bytes=[16], device="cpu", rounds=1, warmup=0, batch_size=16))
    assert plain.recommendation_rows == "corpus" and plain.corpus_recommendation == []


@pytest.mark.slow
def test_bench_output_fits_100_columns_and_wide_shows_every_column(tmp_path: Path) -> None:
    np.savez(tmp_path / "tiny.npz", **_arrays())
    args = ["bench", "--data", str(tmp_path / "tiny.npz"), "--methods", "svd", "--budgets", "8", "--rounds", "1",
            "--warmup", "0", "--batch-size", "32", "--device", "cpu"]
    compact = runner.invoke(app, [*args, "--out", str(tmp_path / "a")], env={"COLUMNS": "100"})
    assert compact.exit_code == 0, compact.output
    assert "…" not in compact.output and "NDCG@10" in compact.output
    assert "variant" not in compact.output  # the compact table folds the variant into the method
    wide = runner.invoke(app, [*args, "--wide", "--out", str(tmp_path / "b")], env={"COLUMNS": "260"})
    assert wide.exit_code == 0, wide.output
    assert "variant" in wide.output and "…" not in wide.output


class _Listener:
    """A ``StepListener`` recording what a progress bar would be told."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, int]] = []
        self.finished = False

    def step(self, label: str, planned: int) -> None:
        self.steps.append((label, planned))

    def done(self) -> None:
        self.finished = True


def test_every_step_is_timed_and_announced_with_the_steps_planned() -> None:
    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((300, 16)).astype(np.float32)
    data = Dataset.from_gold("toy", corpus, corpus[:40] + 0.01, np.arange(40))
    listener = _Listener()
    result = run_bench(data, _config(["svd", "int8"]), progress=listener)
    kinds = [(step["kind"], step["method"], step["k"]) for step in result.steps]
    assert kinds == [("reference", "float32", None), ("fit", "svd", None), ("row", "svd", 4), ("row", "svd", 16),
                     ("fit", "int8", None), ("row", "int8", None), ("recommend", None, None)]
    assert all(step["seconds"] > 0 for step in result.steps)
    assert sum(step["seconds"] for step in result.steps) <= result.total_s
    assert [label for label, _ in listener.steps] == [step["label"] for step in result.steps] and listener.finished
    planned = [count for _, count in listener.steps]
    assert planned[0] == 2 + 2 * 3  # before any fit: a fit and a row per budget of each method
    assert planned[-1] == len(result.steps)  # int8 has one row, not two: the plan is corrected
    labels: list[str] = []
    run_bench(data, _config(["svd"]), progress=labels.append)  # a plain callable hears the labels
    assert labels[0] == "float32: exact search on the full-precision embeddings" and len(labels) == 5
