"""TREC run files: tied scores are written so every TREC tool reads back exactly the bench's ranking, and pytrec_eval
on a run agrees with the bench's metrics (graded gains, judged-query averaging) on hand-checked cases."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from adaptemb.datasets import Dataset
from adaptemb.evaluate.metrics import evaluate_ranking, judged_ndcg_at_10
from adaptemb.evaluate.runs import run_name, unique_names
from adaptemb.evaluate.trec import qrels_of, read_run, strictly_decreasing, trec_metrics, write_run

pytrec_eval = pytest.importorskip("pytrec_eval")


def _trec_order(run: dict[str, float]) -> list[str]:
    """trec_eval's order of one query's documents: score descending, ties by the larger document id first."""
    return [doc for doc, _ in sorted(run.items(), key=lambda item: (item[1], item[0]), reverse=True)]


def test_ties_become_one_float32_step_below_the_score_above() -> None:
    scores = np.array([[3.0, 2.0, 2.0, 2.0, 1.0], [5.0, 4.0, 3.0, 2.0, 1.0]], dtype=np.float32)
    written, raised = strictly_decreasing(scores)
    assert written.dtype == np.float32 and raised == 0
    two = np.float32(2.0)
    below = np.nextafter(two, np.float32(-np.inf))
    assert written[0].tolist() == [3.0, 2.0, float(below), float(np.nextafter(below, np.float32(-np.inf))), 1.0]
    np.testing.assert_array_equal(written[1], scores[1])  # no tie: the scores as they are
    assert (np.diff(written, axis=1) < 0).all()


def test_a_tie_run_into_the_next_score_pushes_it_down_too() -> None:
    step = np.nextafter(np.float32(1.0), np.float32(-np.inf))
    written, _ = strictly_decreasing(np.array([[1.0, 1.0, step, 0.5]], dtype=np.float32))
    assert (np.diff(written, axis=1) < 0).all() and written[0, 3] == np.float32(0.5)


def test_a_ranking_not_sorted_by_score_keeps_its_order_and_is_counted() -> None:
    written, raised = strictly_decreasing(np.array([[1.0, 2.0, 0.5]], dtype=np.float32))
    assert raised == 1 and (np.diff(written, axis=1) < 0).all()
    with pytest.raises(ValueError, match="finite"):
        strictly_decreasing(np.array([[1.0, np.nan]]))


def test_a_tied_run_reads_back_as_the_benchs_ranking_in_pytrec_eval(tmp_path: Path) -> None:
    """Every score tied, ids whose trec_eval order (larger id first) is the reverse of the bench's (lower row first):
    read back, the run must keep the bench's order, and pytrec_eval's reciprocal rank must be the bench's."""
    doc_ids = ["d0", "d1", "d2", "d3"]
    ranking = (np.full((1, 4), 7.0, np.float32), np.array([[0, 1, 2, 3]]))
    write_run(tmp_path / "tied.trec", ranking, ["q0"], doc_ids, tag="binary")
    run = read_run(tmp_path / "tied.trec")
    assert _trec_order(run["q0"]) == doc_ids
    assert (tmp_path / "tied.trec").read_text().splitlines()[0] == "q0 Q0 d0 1 7.0 binary"
    qrels = {"q0": {"d0": 1}}
    assert pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run)["q0"]["recip_rank"] == 1.0
    naive = {"q0": {doc: 7.0 for doc in doc_ids}}  # what writing the tied scores as they are would give
    assert pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(naive)["q0"]["recip_rank"] == 0.25


def test_graded_gains_and_judged_averaging_match_pytrec_eval(tmp_path: Path) -> None:
    """q0: grades 2 and 1 (linear gain); q1: judged only not relevant (counts 0); q2: never judged (left out)."""
    grades = np.zeros((3, 12), dtype=np.float32)
    grades[0, 1], grades[0, 3] = 2, 1
    qrels = sp.csr_matrix(grades)
    judged = np.array([True, True, False])
    first = np.array([3, 1, 0, 2, *range(4, 12)])
    ids = np.stack([first, np.arange(12), np.arange(12)])
    ours = evaluate_ranking(ids, qrels, judged)
    dcg = 1 / math.log2(2) + 2 / math.log2(3)
    ideal = 2 / math.log2(2) + 1 / math.log2(3)
    assert ours.queries == 2
    assert ours.ndcg_at_10 == pytest.approx((dcg / ideal + 0.0) / 2, abs=1e-12)
    assert ours.mrr_at_10 == pytest.approx(0.5) and ours.recall_at_100 == pytest.approx(0.5)
    assert judged_ndcg_at_10(ids, qrels, judged) == [round(dcg / ideal, 6), 0.0]
    assert evaluate_ranking(ids, qrels).queries == 1  # without judged: the queries with a relevant row
    query_ids, doc_ids = ["q0", "q1", "q2"], [f"d{i}" for i in range(12)]
    scores = np.tile(np.linspace(1, 0, 12, dtype=np.float32), (3, 1))
    write_run(tmp_path / "r.trec", (scores, ids), query_ids, doc_ids, tag="t")
    theirs = trec_metrics(read_run(tmp_path / "r.trec"), qrels_of(qrels, query_ids, doc_ids, judged))
    assert theirs["ndcg_cut_10"] == pytest.approx(ours.ndcg_at_10, abs=1e-12)
    assert theirs["recall_100"] == pytest.approx(ours.recall_at_100, abs=1e-12)
    assert theirs["recip_rank_10"] == pytest.approx(ours.mrr_at_10, abs=1e-12)


def test_mrr_at_10_ignores_a_relevant_document_below_rank_10(tmp_path: Path) -> None:
    qrels = sp.csr_matrix(([1.0], ([0], [11])), shape=(1, 12))
    ids = np.arange(12)[None, :]
    write_run(tmp_path / "r.trec", (np.linspace(1, 0, 12, dtype=np.float32)[None, :], ids), ["q"],
              [f"d{i}" for i in range(12)], tag="t")
    theirs = trec_metrics(read_run(tmp_path / "r.trec"), qrels_of(qrels, ["q"], [f"d{i}" for i in range(12)]))
    assert theirs["recip_rank_10"] == 0.0 == evaluate_ranking(ids, qrels).mrr_at_10
    assert theirs["recall_100"] == 1.0


def test_ids_with_whitespace_and_fractional_grades_are_refused(tmp_path: Path) -> None:
    ranking = (np.ones((1, 1), np.float32), np.zeros((1, 1), np.int64))
    with pytest.raises(ValueError, match="whitespace"):
        write_run(tmp_path / "r.trec", ranking, ["q 1"], ["d"], tag="t")
    assert not (tmp_path / "r.trec").exists()
    with pytest.raises(ValueError, match="whole-number grades"):
        qrels_of(sp.csr_matrix(np.array([[0.5]])), ["q"], ["d"])


def test_run_names_are_file_safe_and_unique() -> None:
    rows = [{"method": "float32", "k": None, "variant": "reference"}, {"method": "csr", "k": 10, "variant": "codes"},
            {"method": "svd+binary", "k": 64, "variant": "codes"}, {"method": "svd", "k": 16, "variant": "rerank-int8"},
            {"method": "my method/v2", "k": None, "variant": "codes"}, {"method": "csr", "k": 10, "variant": "codes"}]
    assert [run_name(row) for row in rows[:5]] == ["float32", "csr-k10", "svd+binary-k64", "svd-k16-rerank-int8",
                                                    "my-method-v2"]
    assert unique_names(rows)[-1] == "csr-k10-2"


def test_dataset_ids_and_judged_mask_are_checked() -> None:
    corpus, queries = np.eye(3, dtype=np.float32), np.eye(3, dtype=np.float32)[:2]
    qrels = sp.csr_matrix(([1.0], ([0], [0])), shape=(2, 3))
    data = Dataset("d", corpus, queries, qrels, query_ids=np.array(["a", "b"]), judged=np.array([True, True]))
    assert data.row_ids("queries") == ["a", "b"] and data.row_ids("corpus") == ["0", "1", "2"]
    assert data.evaluated().tolist() == [True, True]
    with pytest.raises(ValueError, match="duplicate"):
        Dataset("d", corpus, queries, qrels, corpus_ids=np.array(["x", "x", "y"]))
    with pytest.raises(ValueError, match="relevant row"):
        Dataset("d", corpus, queries, qrels, judged=np.array([False, True]))


def test_array_datasets_keep_their_ids_in_saved_runs_and_row_numbers_without(tmp_path: Path) -> None:
    from adaptemb.datasets import read_dataset
    from adaptemb.evaluate.runner import BenchConfig, run_bench
    from adaptemb.evaluate.runs import save_runs

    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((40, 8)).astype(np.float32)
    gold = rng.choice(40, 6, replace=False)
    arrays = {"corpus": corpus, "queries": corpus[gold] + 0.1, "gold": gold}
    np.savez(tmp_path / "ids.npz", **arrays, corpus_ids=np.array([f"doc{i}" for i in range(40)]),
             query_ids=np.array([f"q{i}" for i in range(6)]))
    np.savez(tmp_path / "plain.npz", **arrays)
    config = BenchConfig(methods=["int8"], rounds=1, warmup=0, batch_size=8, device="cpu", keep_rankings=True)
    for name, first_query in (("ids", "q0"), ("plain", "0")):
        data = read_dataset(tmp_path / f"{name}.npz")
        saved = save_runs(run_bench(data, config), data, tmp_path / name)
        line = saved.files["int8"].read_text().splitlines()[0].split()
        assert line[0] == first_query and line[2] in data.row_ids("corpus")
        assert line[2].startswith("doc") == (name == "ids") and line[2].removeprefix("doc").isdigit()
        assert all(entry["max_abs_diff"] <= 1e-6 for entry in saved.check.values())
    assert read_dataset(tmp_path / "ids.npz").corpus_ids[3] == "doc3"


def test_ids_a_run_cannot_hold_fail_before_the_bench() -> None:
    from adaptemb.evaluate.runs import check_run_ids

    corpus = np.eye(3, dtype=np.float32)
    qrels = sp.csr_matrix(([1.0], ([0], [0])), shape=(1, 3))
    check_run_ids(Dataset("d", corpus, corpus[:1], qrels))  # row numbers are fine
    with pytest.raises(ValueError, match="document id 'a b' is empty or holds whitespace"):
        check_run_ids(Dataset("d", corpus, corpus[:1], qrels, corpus_ids=np.array(["a b", "c", "d"])))
