"""The bench's per-query NDCG@10: kept out of results.json, stored compressed in per_query.npz beside it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from typer.testing import CliRunner

from adaptemb.cli import app
from adaptemb.datasets import Dataset
from adaptemb.evaluate.metrics import PER_QUERY_NDCG
from adaptemb.evaluate.report import PER_QUERY_FILE, evaluated_query_ids, write_report
from adaptemb.evaluate.runner import BenchConfig, run_bench

N, Q, D = 300, 40, 16


def _dataset() -> Dataset:
    """Queries near their gold rows, each with its own id; query 5 has no relevant row (not evaluated)."""
    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((N, D)).astype(np.float32)
    gold = rng.choice(N, Q, replace=False)
    queries = corpus[gold] + 0.5 * rng.standard_normal((Q, D)).astype(np.float32)
    judged = np.arange(Q) != 5
    qrels = sp.csr_matrix((np.ones(judged.sum(), np.float32), (np.flatnonzero(judged), gold[judged])), shape=(Q, N))
    return Dataset(name="ids", corpus=corpus, queries=queries, qrels=qrels,
                   query_ids=np.array([f"q-{i}" for i in range(Q)]), corpus_ids=np.array([f"d-{i}" for i in range(N)]))


def test_a_benchs_results_json_has_no_per_query_list_and_its_npz_round_trips(tmp_path: Path) -> None:
    data = _dataset()
    result = run_bench(data, BenchConfig(methods=["svd", "int8"], budgets=[4, 8], device="cpu", rounds=1, warmup=0,
                                         batch_size=16, rerank=True))
    files = write_report(result, tmp_path, query_ids=evaluated_query_ids(data))
    text = files["json"].read_text()
    assert PER_QUERY_NDCG not in text
    rows = json.loads(text)["rows"]
    assert len(rows) == len(result.rows) >= 6 and files["per_query"] == tmp_path / PER_QUERY_FILE
    with np.load(files["per_query"]) as stored:  # no pickle needed: plain float32 and str arrays
        assert sorted(stored.files) == sorted([f"row_{i}" for i in range(len(rows))] + ["query_ids"])
        assert stored["query_ids"].tolist() == [f"q-{i}" for i in range(Q) if i != 5]
        for i, (row, kept) in enumerate(zip(rows, result.rows)):
            values = stored[f"row_{i}"]
            assert values.dtype == np.float32 and values.shape == (Q - 1,)
            np.testing.assert_array_equal(values, np.asarray(kept[PER_QUERY_NDCG], np.float32))
            np.testing.assert_allclose(values, kept[PER_QUERY_NDCG], rtol=0, atol=1e-7)
            assert abs(float(values.astype(np.float64).mean()) - row["ndcg_at_10"]) < 1e-6  # the row's own mean
    assert all(PER_QUERY_NDCG in row for row in result.rows)  # the in-memory result keeps them (the bootstrap's)


def test_a_rewritten_folder_keeps_no_stale_per_query_file(tmp_path: Path) -> None:
    data = _dataset()
    result = run_bench(data, BenchConfig(methods=["svd"], budgets=[4], device="cpu", rounds=1, warmup=0, batch_size=16))
    write_report(result, tmp_path)
    with np.load(tmp_path / PER_QUERY_FILE) as stored:
        assert "query_ids" not in stored.files  # no ids given: the values follow the evaluated queries' order
    for row in result.rows:
        del row[PER_QUERY_NDCG]
    files = write_report(result, tmp_path)
    assert not (tmp_path / PER_QUERY_FILE).exists() and "per_query" not in files


def test_the_cli_writes_per_query_npz_beside_results_json(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    corpus = rng.standard_normal((N, D)).astype(np.float32)
    gold = rng.choice(N, Q, replace=False)
    np.savez(tmp_path / "tiny.npz", corpus=corpus, queries=corpus[gold] + 0.3, gold=gold)
    out = tmp_path / "out"
    cli = CliRunner().invoke(app, ["bench", "--data", str(tmp_path / "tiny.npz"), "--methods", "svd", "--budgets", "4",
                                   "--rounds", "1", "--warmup", "0", "--device", "cpu", "--out", str(out), "--quiet"])
    assert cli.exit_code == 0, cli.output
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert rows and all(PER_QUERY_NDCG not in row for row in rows)
    with np.load(out / PER_QUERY_FILE) as stored:
        assert sorted(stored.files) == sorted(f"row_{i}" for i in range(len(rows)))  # a dataset without ids
        for i, row in enumerate(rows):
            assert abs(float(stored[f"row_{i}"].astype(np.float64).mean()) - row["ndcg_at_10"]) < 1e-6
    assert PER_QUERY_FILE in (out / "report.md").read_text()
