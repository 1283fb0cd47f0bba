"""Retrieval and classification metrics over ranked result ids.

Conventions follow trec_eval / pytrec_eval as BEIR and MTEB use them:

* relevance grades come from ``qrels`` (a (q, n) sparse matrix); a corpus row is *relevant* when its
  grade is > 0;
* NDCG@k uses linear gain (the grade itself) and the log2 discount: ``DCG = sum_i grade_i / log2(i + 1)``
  over ranks ``i = 1..k``; the ideal DCG sorts the query's own grades from ``qrels``;
* the means are over the *evaluated* queries (``evaluate_ranking`` reports how many): by default those with a
  relevant row; with ``judged`` (``Dataset.judged``), every query that has a judgement, as trec_eval averages
  over the queries of its qrels, a query judged only non-relevant counting 0. The per-query functions return
  NaN for a query without a relevant row.

Every per-query function takes ``ranked_ids`` (q, K) of corpus row ids, best first (K >= the cut-off).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

Row = dict[str, Any]
"""One bench result row, flat and JSON-ready (method, k, variant, metrics, sizes, timings): a line of results.json's
``rows`` / ``scale`` and of results.csv, and the unit the recommendation and the report read. A codes row holds
the chosen budget ``k``, the codes' ``bytes_per_vector`` and ``value_bits`` (``Codes.value_bits``: bits per stored
value, None where the kind does not declare them), which the tables show as ``k·bits`` (e.g. ``8·2b``)."""


def _gains(ranked_ids: np.ndarray, qrels: sp.csr_matrix, k: int) -> np.ndarray:
    """The grades (q, k) of the first ``k`` ranked rows of each query (0 for unjudged rows)."""
    ids = _check_ids(ranked_ids, qrels, k)[:, :k]
    rows = np.repeat(np.arange(ids.shape[0]), ids.shape[1])
    return np.asarray(qrels[rows, ids.reshape(-1)], dtype=np.float64).reshape(ids.shape)


def _check_ids(ranked_ids: np.ndarray, qrels: sp.csr_matrix, k: int) -> np.ndarray:
    ids = np.asarray(ranked_ids)
    if ids.ndim != 2 or ids.shape[0] != qrels.shape[0]:
        raise ValueError(f"ranked_ids must have shape ({qrels.shape[0]}, K); got {ids.shape}")
    if ids.shape[1] < k:
        raise ValueError(f"need at least {k} ranked ids per query for a cut-off of {k}; got {ids.shape[1]}")
    return ids


def _relevant_counts(qrels: sp.csr_matrix) -> np.ndarray:
    return np.asarray((qrels > 0).sum(axis=1)).ravel()


def _discounts(k: int) -> np.ndarray:
    return 1.0 / np.log2(np.arange(2, k + 2))


def ndcg_at_k(ranked_ids: np.ndarray, qrels: sp.csr_matrix, k: int = 10) -> np.ndarray:
    """Per-query NDCG@k with linear gain (trec_eval ``ndcg_cut``); NaN for queries with nothing relevant."""
    qrels = sp.csr_matrix(qrels)
    gains = np.clip(_gains(ranked_ids, qrels, k), 0.0, None)
    dcg = gains @ _discounts(k)
    ideal = np.zeros(qrels.shape[0])
    for row in range(qrels.shape[0]):
        grades = qrels.data[qrels.indptr[row] : qrels.indptr[row + 1]]
        best = np.sort(grades[grades > 0])[::-1][:k]
        ideal[row] = best @ _discounts(k)[: len(best)]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ideal > 0, dcg / ideal, np.nan)


PER_QUERY_NDCG = "ndcg_at_10_per_query"
"""The row key of a bench row's per-query NDCG@10 (``judged_ndcg_at_10``), kept for the recommendation's paired
bootstrap; written to per_query.npz beside results.json (``adaptemb.evaluate.report.write_json``), not printed."""


def judged_ndcg_at_10(ranked_ids: np.ndarray, qrels: sp.csr_matrix, judged: np.ndarray | None = None) -> list[float]:
    """NDCG@10 of each evaluated query (the queries ``evaluate_ranking`` averages), in query order, rounded to 6
    decimals: the per-query values of a row's mean NDCG@10."""
    values = ndcg_at_k(ranked_ids, qrels, 10)
    mask = _evaluated(sp.csr_matrix(qrels), judged)
    return np.round(np.nan_to_num(values[mask]), 6).tolist()  # type: ignore[no-any-return]


def _evaluated(qrels: sp.csr_matrix, judged: np.ndarray | None) -> np.ndarray:
    """The queries the means are over: ``judged`` (which must hold every query with a relevant row), else the
    queries with a relevant row."""
    relevant = _relevant_counts(qrels) > 0
    if judged is None:
        return relevant
    judged = np.asarray(judged, dtype=bool)
    if judged.shape != relevant.shape or (relevant & ~judged).any():
        raise ValueError(f"judged must be a bool ({len(relevant)},) mask holding every query with a relevant row")
    return judged


def recall_at_k(ranked_ids: np.ndarray, qrels: sp.csr_matrix, k: int) -> np.ndarray:
    """Per-query fraction of the relevant rows found in the top ``k``; NaN when nothing is relevant."""
    qrels = sp.csr_matrix(qrels)
    hits = (_gains(ranked_ids, qrels, k) > 0).sum(axis=1)
    relevant = _relevant_counts(qrels)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(relevant > 0, hits / relevant, np.nan)


def mrr_at_k(ranked_ids: np.ndarray, qrels: sp.csr_matrix, k: int = 10) -> np.ndarray:
    """Per-query reciprocal rank of the first relevant row within the top ``k`` (0 if none there)."""
    qrels = sp.csr_matrix(qrels)
    hit = _gains(ranked_ids, qrels, k) > 0
    first = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, np.inf)
    return np.where(_relevant_counts(qrels) > 0, 1.0 / first, np.nan)


def same_top_k(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray], *, tol: float = 1e-4) -> np.ndarray:
    """Per query: whether two top-k lists (scores, ids) hold the same documents, ties at the cut aside.

    Lists agree when their scores match within ``tol`` (relative to the scores' scale) and every id in one
    list but not the other scores within ``tol`` of the k-th best (an exact tie that either side may break).
    """
    got_scores, got_ids = (np.asarray(a) for a in got)
    want_scores, want_ids = (np.asarray(a) for a in want)
    if got_ids.shape != want_ids.shape:
        raise ValueError(f"top-k lists differ in shape: {got_ids.shape} vs {want_ids.shape}")
    atol = tol * max(1.0, float(np.abs(want_scores).max(initial=0.0)))
    agree = np.all(np.isclose(got_scores, want_scores, rtol=tol, atol=atol), axis=1)
    for row in np.flatnonzero(agree):
        differing = set(got_ids[row].tolist()) ^ set(want_ids[row].tolist())
        if differing:  # allowed only where both lists end on a tie
            kth = want_scores[row, -1]
            agree[row] = bool(np.isclose(got_scores[row, -1], kth, rtol=tol, atol=atol)) and all(
                np.isclose(score, kth, rtol=tol, atol=atol)
                for ids, scores in ((got_ids[row], got_scores[row]), (want_ids[row], want_scores[row]))
                for doc, score in zip(ids, scores) if doc in differing)
    return agree


def one_nn_accuracy(nearest_ids: np.ndarray, corpus_labels: np.ndarray, query_labels: np.ndarray) -> float:
    """Fraction of queries whose nearest corpus row (``nearest_ids`` (q,)) carries the query's label."""
    nearest = np.asarray(nearest_ids).reshape(-1)
    if nearest.shape[0] != len(query_labels):
        raise ValueError(f"{nearest.shape[0]} nearest ids for {len(query_labels)} query labels")
    return float(np.mean(np.asarray(corpus_labels)[nearest] == np.asarray(query_labels)))


def nearest_excluding_self(ranked_ids: np.ndarray, self_ids: np.ndarray) -> np.ndarray:
    """For leave-one-out 1-NN: the first ranked id of each row that is not the query's own row."""
    ids = np.asarray(ranked_ids)
    is_self = ids == np.asarray(self_ids)[:, None]
    first_other = np.argmax(~is_self, axis=1)
    return ids[np.arange(len(ids)), first_other]


@dataclass(frozen=True)
class RankingMetrics:
    """Mean metrics over the queries with at least one relevant row (``queries`` of them)."""

    ndcg_at_10: float
    recall_at_10: float
    recall_at_100: float
    mrr_at_10: float
    queries: int

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def evaluate_ranking(ranked_ids: np.ndarray, qrels: sp.csr_matrix, judged: np.ndarray | None = None) -> RankingMetrics:
    """NDCG@10, Recall@10, Recall@100 (at min(100, K)) and MRR@10 averaged over the evaluated queries (``judged``,
    else those with a relevant row; a judged query without one counts 0)."""
    qrels = sp.csr_matrix(qrels)
    deep = min(100, np.asarray(ranked_ids).shape[1])
    if not (_relevant_counts(qrels) > 0).any():
        raise ValueError("no query has a relevant corpus row (every qrels grade is <= 0)")
    judged = _evaluated(qrels, judged)

    def mean(values: np.ndarray) -> float:
        return float(np.mean(np.nan_to_num(values[judged])))

    return RankingMetrics(
        ndcg_at_10=mean(ndcg_at_k(ranked_ids, qrels, 10)),
        recall_at_10=mean(recall_at_k(ranked_ids, qrels, 10)),
        recall_at_100=mean(recall_at_k(ranked_ids, qrels, deep)),
        mrr_at_10=mean(mrr_at_k(ranked_ids, qrels, 10)),
        queries=int(judged.sum()),
    )
