"""The bench's query sample (issue 46, ``--fit-queries N``, off by default): a dataset's ``dev_queries`` (never
evaluated) go to the fits whose choices they judge; without them the CLI holds a seeded share of the queries out of
the evaluation, only when a method of the run takes a sample, and says so."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from adaptemb.cli import app
from adaptemb.datasets import Dataset, read_dataset, save_dataset
from adaptemb.evaluate.runner import BenchConfig, query_takers, run_bench

N, Q, D = 400, 60, 32


def _dataset(dev: int = 0) -> Dataset:
    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((N, D)).astype(np.float32)
    corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
    gold = rng.choice(N, Q + dev, replace=False)
    queries = (corpus[gold] + 0.12 * rng.standard_normal((Q + dev, D))).astype(np.float32)
    return Dataset.from_gold("tiny", corpus, queries[:Q], gold[:Q], query_ids=np.array([f"q{i}" for i in range(Q)]),
                             dev_queries=queries[Q:] if dev else None)


def test_dev_queries_round_trip_and_are_checked(tmp_path: Path) -> None:
    data = _dataset(dev=20)
    loaded = read_dataset(save_dataset(data, tmp_path / "d.npz"))
    np.testing.assert_array_equal(loaded.dev_queries, data.dev_queries)
    with pytest.raises(ValueError, match="dev_queries must be a non-empty 2-D float array of dimension 32"):
        Dataset.from_gold("bad", data.corpus, data.queries, np.zeros(Q, dtype=np.int64), dev_queries=data.queries[:, :5])


def test_holding_out_queries_keeps_each_kept_querys_relevance_and_id() -> None:
    data = _dataset()
    held = data.holding_out_queries(20, seed=1)
    assert len(held.queries) == Q - 20 and held.dev_queries.shape == (20, D)
    kept = [int(i[1:]) for i in held.query_ids]
    np.testing.assert_array_equal(held.queries, data.queries[kept])
    assert (held.qrels != data.qrels[kept]).nnz == 0
    rows = {tuple(row) for row in data.queries.tolist()}
    assert all(tuple(row) in rows and tuple(row) not in {tuple(r) for r in held.queries.tolist()}
               for row in held.dev_queries.tolist())
    with pytest.raises(ValueError, match="between 1 and 59"):
        data.holding_out_queries(Q)


def test_the_runner_gives_dev_queries_to_the_methods_that_take_them() -> None:
    data = _dataset(dev=30)
    assert BenchConfig(methods=["svd+binary"]).fit_queries == 0  # off by default (docs/results.md)
    config = BenchConfig(methods=["svd", "svd+binary"], bytes=[2, 4], rounds=1, warmup=0, batch_size=32, device="cpu",
                         fit_queries=500)
    assert query_takers(config) == ["svd+binary"]
    result = run_bench(data, config)
    assert result.dataset["dev_queries"] == 30 and result.dataset["queries"] == Q
    assert any("svd+binary: fitted with 30 real queries that are never evaluated" in note for note in result.notes)
    assert not any(note.startswith("svd: its fit-time") for note in result.notes)
    fixed = BenchConfig(methods=["svd+binary"], method_params={"svd+binary": {"rotation": "itq", "bits_per_dim": 1}})
    assert query_takers(fixed) == []


@pytest.mark.slow
def test_the_cli_holds_queries_out_only_for_a_method_that_takes_them(tmp_path: Path) -> None:
    save_dataset(_dataset(), tmp_path / "tiny.npz")
    base = ["bench", "--data", str(tmp_path / "tiny.npz"), "--bytes", "2,4", "--rounds", "1", "--warmup", "0",
            "--batch-size", "32", "--device", "cpu", "--quiet", "--fit-queries", "500"]
    for methods, evaluated in (("svd+binary", Q - Q // 3), ("svd", Q)):
        out = tmp_path / methods
        result = CliRunner().invoke(app, [*base, "--methods", methods, "--out", str(out)], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        report = json.loads((out / "results.json").read_text())
        assert report["dataset"]["queries"] == evaluated
        held = [note for note in report["notes"] if "held out of the evaluation" in note]
        assert bool(held) == (evaluated < Q)
