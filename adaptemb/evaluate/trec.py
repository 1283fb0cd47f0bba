"""TREC run files and their evaluation by pytrec_eval (trec_eval's measures, as BEIR uses them).

A run file holds one line per (query, ranked document): ``qid Q0 docid rank score tag``. TREC tools ignore the
rank column: they sort each query's documents by score, descending, and break ties by document id (trec_eval and
pytrec_eval: the larger id first), and trec_eval keeps a score in single precision (float32). The bench breaks ties
by ranking order (the lower corpus row first, ``adaptemb.ranking``), and binary codes tie a lot. So ``write_run``
writes every score as the float32 value closest to the bench's score that is still strictly below the score
written one rank above (``strictly_decreasing``): a tie becomes a gap of one float32 step (about 6e-8 of the score;
on integer-valued binary scores, far below their spacing of 1), and every tool, reading scores as float32 or
float64, reads the run back as exactly the bench's ranking, whatever its tie rule. Scores are written with
Python's shortest round-trip ``repr`` of that float32 value, so every reader parses exactly the value written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from adaptemb.ranking import TopK
from adaptemb.serialization import atomic_write

Run = dict[str, dict[str, float]]
"""A run as pytrec_eval takes it: ``{query id: {document id: score}}``."""
Qrels = dict[str, dict[str, int]]
"""Judgements as pytrec_eval takes them: ``{query id: {document id: grade}}``."""
MEASURES = ("ndcg_cut_10", "recall_100", "recip_rank_10")
"""What ``trec_metrics`` returns: NDCG@10, Recall@100 and MRR@10 (reciprocal rank in the run's top 10)."""


def strictly_decreasing(scores: np.ndarray) -> tuple[np.ndarray, int]:
    """``scores`` (q, K), best first, as float32 strictly decreasing along each row: a score not below the one
    written before it becomes the largest float32 below that one (``np.nextafter``). Returns the scores and how
    many were raised from below, not tied (a ranking not sorted by score: its order is kept all the same)."""
    given = np.asarray(scores)
    if given.ndim != 2:
        raise ValueError(f"scores must be a (queries, K) array; got shape {given.shape}")
    if not np.isfinite(given).all():
        raise ValueError("scores hold NaN or infinite values; a TREC run needs finite scores")
    out = given.astype(np.float32)
    lowest = np.float32(-np.inf)
    for col in range(1, out.shape[1]):
        out[:, col] = np.minimum(out[:, col], np.nextafter(out[:, col - 1], lowest))
    raised = int((given[:, 1:] > given[:, :-1]).sum())
    return out, raised


def run_lines(ranking: TopK, query_ids: Sequence[str], doc_ids: Sequence[str], tag: str) -> tuple[list[str], int]:
    """The lines of a TREC run of ``ranking`` ((scores, corpus rows), best first; a row id < 0 is padding and is
    left out), and how many scores were out of rank order (``strictly_decreasing``)."""
    scores, rows = (np.asarray(part) for part in ranking)
    if scores.shape != rows.shape or rows.shape[0] != len(query_ids):
        raise ValueError(f"ranking of shape {rows.shape} (scores {scores.shape}) for {len(query_ids)} queries")
    check_tokens([tag], "tag")
    written, raised = strictly_decreasing(scores)
    values, ids = written.tolist(), rows.tolist()
    lines = []
    for qid, doc_rows, doc_scores in zip(query_ids, ids, values):
        rank = 0
        for row, score in zip(doc_rows, doc_scores):
            if row >= 0:
                rank += 1
                lines.append(f"{qid} Q0 {doc_ids[row]} {rank} {score!r} {tag}\n")
    return lines, raised


def write_run(path: str | Path, ranking: TopK, query_ids: Sequence[str], doc_ids: Sequence[str], tag: str) -> int:
    """Write ``ranking`` as a TREC run file, atomically (see the module docstring); returns ``run_lines``' count of
    scores out of rank order. Ids must be free of whitespace (a run's columns are separated by it)."""
    check_tokens(query_ids, "query id")
    check_tokens(doc_ids, "document id")
    lines, raised = run_lines(ranking, query_ids, doc_ids, tag)
    atomic_write(path, lambda tmp: tmp.write_text("".join(lines), encoding="utf-8"))
    return raised


def read_run(path: str | Path) -> Run:
    """A TREC run file as ``{query id: {document id: score}}`` (``pytrec_eval.parse_run``)."""
    pytrec_eval = _pytrec_eval()
    with open(path, encoding="utf-8") as handle:
        return dict(pytrec_eval.parse_run(handle))


def qrels_of(qrels: sp.csr_matrix, query_ids: Sequence[str], doc_ids: Sequence[str],
             judged: np.ndarray | None = None) -> Qrels:
    """pytrec_eval judgements of a (q, n) grade matrix: every grade > 0, and for a ``judged`` query without one a
    grade-0 judgement of the first document (pytrec_eval evaluates only the queries it has judgements for; a
    grade 0 changes no measure). Grades must be whole numbers, as in trec_eval."""
    matrix = sp.csr_matrix(qrels)
    grades = matrix.data[matrix.data > 0]
    if not np.array_equal(grades, np.round(grades)):
        raise ValueError("pytrec_eval (trec_eval) takes whole-number grades; this dataset's grades are not")
    out: Qrels = {}
    for row, qid in enumerate(query_ids):
        start, stop = matrix.indptr[row], matrix.indptr[row + 1]
        judgements = {doc_ids[col]: int(grade) for col, grade in zip(matrix.indices[start:stop], matrix.data[start:stop])
                      if grade > 0}
        if judgements:
            out[qid] = judgements
        elif judged is not None and judged[row]:
            out[qid] = {doc_ids[0]: 0}
    return out


def trec_metrics(run: Mapping[str, Mapping[str, float]], qrels: Qrels) -> dict[str, float]:
    """Mean NDCG@10 (``ndcg_cut_10``), Recall@100 (``recall_100``) and MRR@10 (``recip_rank`` of the run cut to its
    10 best-scored documents, ties by the larger document id as trec_eval breaks them) by pytrec_eval, over every
    query of ``qrels`` (one missing from the run counts 0, as ``trec_eval -c`` counts it)."""
    pytrec_eval = _pytrec_eval()
    if not qrels:
        raise ValueError("the qrels judge no query")
    full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"}).evaluate(
        {qid: dict(docs) for qid, docs in run.items()})
    top10 = {qid: dict(sorted(docs.items(), key=lambda item: (item[1], item[0]), reverse=True)[:10])
             for qid, docs in run.items()}
    reciprocal = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)

    def mean(per_query: dict[str, dict[str, float]], measure: str) -> float:
        return float(np.mean([per_query.get(qid, {}).get(measure, 0.0) for qid in qrels]))

    return {"ndcg_cut_10": mean(full, "ndcg_cut_10"), "recall_100": mean(full, "recall_100"),
            "recip_rank_10": mean(reciprocal, "recip_rank")}


def check_tokens(values: Iterable[str], what: str) -> None:
    """A clear error for an empty value or one holding whitespace (a TREC file's columns are split on it)."""
    bad = next((value for value in values if not value or any(char.isspace() for char in value)), None)
    if bad is not None:
        raise ValueError(f"{what} {bad!r} is empty or holds whitespace; a TREC run's columns are separated by "
                         "whitespace, so every id and tag must be one non-empty token")


def _pytrec_eval():  # type: ignore[no-untyped-def]
    try:
        import pytrec_eval
    except ImportError:
        raise ModuleNotFoundError("evaluating TREC runs needs pytrec_eval: pip install 'adaptemb[beir]' "
                                  "(pytrec-eval-terrier)") from None
    return pytrec_eval
