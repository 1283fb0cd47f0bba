"""Metrics against values computed by hand, and against a plain-loop reimplementation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from adaptemb.evaluate.metrics import (
    evaluate_ranking,
    mrr_at_k,
    ndcg_at_k,
    nearest_excluding_self,
    one_nn_accuracy,
    recall_at_k,
)
from adaptemb.ranking import neighbour_recall_at_k


def _qrels(entries: dict[int, dict[int, float]], q: int, n: int) -> sp.csr_matrix:
    rows, cols, vals = [], [], []
    for qi, docs in entries.items():
        for doc, grade in docs.items():
            rows.append(qi), cols.append(doc), vals.append(grade)
    return sp.csr_matrix((vals, (rows, cols)), shape=(q, n))


# Four queries over a 12-row corpus.
#   q0: relevant {1: grade 2, 3: grade 1}; ranked 3, 0, 1, ...
#   q1: relevant {11: 1}; 11 is not retrieved
#   q2: relevant {5: 1}; 5 is ranked 4th
#   q3: nothing relevant: left out of the means
QRELS = _qrels({0: {1: 2, 3: 1}, 1: {11: 1}, 2: {5: 1}}, q=4, n=12)
RANKED = np.array(
    [
        [3, 0, 1, 4, 5, 6, 7, 8, 9, 10],
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
        [0, 1, 2, 5, 4, 3, 6, 7, 8, 9],
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    ]
)


def test_ndcg_by_hand() -> None:
    # q0: DCG = 1/log2(2) + 0/log2(3) + 2/log2(4) = 1 + 0 + 1 = 2
    #     IDCG = 2/log2(2) + 1/log2(3) = 2 + 0.63092975 = 2.63092975  ->  NDCG = 2 / 2.63092975 = 0.76018753
    q0 = 2.0 / (2.0 + 1.0 / math.log2(3))
    # q2: DCG = 1/log2(5) = 0.43067656, IDCG = 1
    q2 = 1.0 / math.log2(5)
    got = ndcg_at_k(RANKED, QRELS, 10)
    assert got[:3] == pytest.approx([q0, 0.0, q2], abs=1e-12)
    assert math.isnan(got[3])
    assert q0 == pytest.approx(0.7601875334, abs=1e-9)


def test_ndcg_cutoff_ignores_hits_below_it() -> None:
    # at k=3, q2's hit at rank 4 does not count; q0 is unchanged (its hits are at ranks 1 and 3)
    got = ndcg_at_k(RANKED, QRELS, 3)
    assert got[:3] == pytest.approx([2.0 / (2.0 + 1.0 / math.log2(3)), 0.0, 0.0])


def test_recall_by_hand() -> None:
    # recall@3: q0 finds 2 of 2, q1 0 of 1, q2 0 of 1 (its hit is at rank 4)
    assert recall_at_k(RANKED, QRELS, 3)[:3] == pytest.approx([1.0, 0.0, 0.0])
    # recall@10: q2 now finds its one relevant row
    assert recall_at_k(RANKED, QRELS, 10)[:3] == pytest.approx([1.0, 0.0, 1.0])


def test_mrr_by_hand() -> None:
    # q0 first hit at rank 1 -> 1; q1 none -> 0; q2 rank 4 -> 1/4
    assert mrr_at_k(RANKED, QRELS, 10)[:3] == pytest.approx([1.0, 0.0, 0.25])
    # with a cut-off of 3, q2's hit at rank 4 is outside: 0
    assert mrr_at_k(RANKED, QRELS, 3)[2] == 0.0


def test_evaluate_ranking_means_over_judged_queries() -> None:
    metrics = evaluate_ranking(RANKED, QRELS)
    assert metrics.queries == 3
    assert metrics.ndcg_at_10 == pytest.approx((0.7601875334 + 0.0 + 0.4306765581) / 3, abs=1e-9)
    assert metrics.mrr_at_10 == pytest.approx((1 + 0 + 0.25) / 3)
    assert metrics.recall_at_10 == pytest.approx((1 + 0 + 1) / 3)
    assert metrics.recall_at_100 == pytest.approx((1 + 0 + 1) / 3)  # K = 10 < 100: recall at K


def test_neighbour_recall_by_hand() -> None:
    # row 0: {1,2,3} ∩ {3,2,9} = {2,3} -> 2/3; row 1: {4,5,6} ∩ {7,8,9} = {} -> 0
    got = neighbour_recall_at_k(np.array([[1, 2, 3], [4, 5, 6]]), np.array([[3, 2, 9], [7, 8, 9]]), k=3)
    assert got == pytest.approx([2 / 3, 0.0])
    # an id repeated in a list (e.g. -1 padding) counts once, as in a set: {1, -1} ∩ {1, -1, 7} -> 2/3; only the
    # first k of each list count
    got = neighbour_recall_at_k(np.array([[1, 1, -1, 7]]), np.array([[-1, 1, -1, 9]]), k=3)
    assert got == pytest.approx([2 / 3])


def test_one_nn_accuracy_by_hand() -> None:
    # nearest rows 0, 2, 1 carry labels 5, 7, 6; the queries are labelled 5, 7, 7 -> 2 of 3 right
    assert one_nn_accuracy(np.array([0, 2, 1]), np.array([5, 6, 7]), np.array([5, 7, 7])) == pytest.approx(2 / 3)


def test_nearest_excluding_self() -> None:
    ranked = np.array([[4, 1, 2], [0, 1, 2]])
    assert nearest_excluding_self(ranked, np.array([4, 1])).tolist() == [1, 0]


def test_bad_shapes_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="at least 10 ranked ids"):
        ndcg_at_k(RANKED[:, :5], QRELS, 10)
    with pytest.raises(ValueError, match="shape"):
        ndcg_at_k(RANKED[:2], QRELS, 10)


# -- an independent, loop-by-loop implementation on random data --------------------------------


def _loop_metrics(ranked: np.ndarray, qrels: dict[int, dict[int, int]]) -> dict[str, float]:
    sums = {"ndcg": 0.0, "r10": 0.0, "r100": 0.0, "mrr": 0.0}
    judged = 0
    for q, ids in enumerate(ranked):
        rel = {d: g for d, g in qrels.get(q, {}).items() if g > 0}
        if not rel:
            continue
        judged += 1
        dcg = sum(rel.get(int(d), 0) / math.log2(i + 2) for i, d in enumerate(ids[:10]))
        ideal = sorted(rel.values(), reverse=True)[:10]
        idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
        sums["ndcg"] += dcg / idcg
        sums["r10"] += len(set(map(int, ids[:10])) & set(rel)) / len(rel)
        sums["r100"] += len(set(map(int, ids[:100])) & set(rel)) / len(rel)
        for i, d in enumerate(ids[:10]):
            if int(d) in rel:
                sums["mrr"] += 1.0 / (i + 1)
                break
    return {key: value / judged for key, value in sums.items()}


def test_matches_loop_implementation_on_random_data() -> None:
    rng = np.random.default_rng(7)
    q, n = 60, 500
    qrels_dict: dict[int, dict[int, int]] = {}
    for qi in range(q):
        if qi % 10 == 9:
            continue  # some queries without judgements
        docs = rng.choice(n, size=rng.integers(1, 8), replace=False)
        qrels_dict[qi] = {int(d): int(rng.integers(0, 4)) for d in docs}  # grade 0 = judged non-relevant
    qrels_dict[0] = {1: 3}
    matrix = _qrels({qi: {d: float(g) for d, g in docs.items()} for qi, docs in qrels_dict.items()}, q, n)
    # rankings that favour relevant rows, so metrics are not all zero
    scores = rng.random((q, n)) + 0.3 * matrix.toarray()
    ranked = np.argsort(-scores, axis=1)[:, :100]
    expected = _loop_metrics(ranked, qrels_dict)
    got = evaluate_ranking(ranked, matrix)
    assert got.ndcg_at_10 == pytest.approx(expected["ndcg"], abs=1e-12)
    assert got.recall_at_10 == pytest.approx(expected["r10"], abs=1e-12)
    assert got.recall_at_100 == pytest.approx(expected["r100"], abs=1e-12)
    assert got.mrr_at_10 == pytest.approx(expected["mrr"], abs=1e-12)
    assert 0.05 < got.ndcg_at_10 < 1.0


def test_same_top_k_allows_only_ties_at_the_cut() -> None:
    from adaptemb.evaluate.metrics import same_top_k

    want = (np.array([[0.9, 0.5, 0.3], [0.9, 0.5, 0.3]]), np.array([[4, 7, 1], [4, 7, 1]]))
    got = (np.array([[0.9, 0.5, 0.3], [0.9, 0.5, 0.2]]), np.array([[4, 7, 2], [4, 7, 9]]))
    assert same_top_k(got, want).tolist() == [True, False]  # row 0: doc 2 ties doc 1 at the cut; row 1: it does not
    wrong = (np.array([[0.9, 0.5, 0.3]]), np.array([[4, 8, 1]]))  # doc 8 is not tied at the cut
    assert same_top_k(wrong, (want[0][:1], want[1][:1])).tolist() == [False]
    lower = (np.array([[0.9, 0.5, 0.29]]), np.array([[4, 7, 1]]))
    assert same_top_k(lower, (want[0][:1], want[1][:1])).tolist() == [False]
