"""A composition's stages measured by a sample of real queries (``fit(x, queries=sample)``); the stages are those
``adaptemb.compose.choice`` says (``StageChoice``), with or without a sample.

Before a sign-bit quantiser (binary) the sample is measured, and no longer chooses: each prepared code width keeps
the stage the config fits without a sample (the rotation ``StageChoice.stage_rotation_kind`` gives at its rank; 1
bit per dimension up to the full rank, 2 past it), and the fit report gives its recall of each sample query's exact float
top-10 among a seeded sample of the fit rows (the float query scored through the stage as ``search`` scores it).

Why the sample no longer chooses: that recall (computed exactly as the index scores; and so were the recall of the
float top-100, the float top-1 in the top-10, rank correlation and graded NDCG against the float ranking, and the
top-10 of half-whitened float scores) preferred ITQ at every rank and 2 bits on half the rank at 64 B, while real
relevance preferred no rotation at 8-16 B, ``itq-tail`` above and 1 bit, by up to 0.037 NDCG@10 on the 768-d
stand-in; no proxy measured picked within 0.005 of the best on both data sets (benchmarks/results/query_proxy_*.json,
rotation_default_*_sample500_itq_tail.json; docs/results.md, "Choices judged by real queries").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from adaptemb.compose.levels import exact_neighbours, neighbour_recall
from adaptemb.compose.stages import Stage, transformed_documents

ComposedCompressor = Any
"""A composition (``adaptemb.compose.compressor.ComposedCompressor``, not imported: it imports this module)."""

JUDGE_QUERIES, JUDGE_DOCUMENTS = 2_000, 10_000
"""At most this many sample queries (a seeded sample) judge, ranking at most this many fit rows (a seeded sample)."""


@dataclass(frozen=True)
class QueryJudge:
    """Sample queries (q, d), the fit rows they rank (m, d) and each query's exact float top-10 among them."""

    queries: torch.Tensor
    documents: torch.Tensor
    exact: np.ndarray

    @staticmethod
    def of(x: torch.Tensor, queries: torch.Tensor, seed: int) -> QueryJudge:
        rng = np.random.default_rng((seed, len(x), len(queries)))
        if len(queries) > JUDGE_QUERIES:
            queries = queries[torch.from_numpy(np.sort(rng.choice(len(queries), JUDGE_QUERIES, replace=False)))]
        documents = x if len(x) <= JUDGE_DOCUMENTS else x[torch.from_numpy(
            np.sort(rng.choice(len(x), JUDGE_DOCUMENTS, replace=False)))]
        return QueryJudge(queries, documents, exact_neighbours(queries, documents))


def recall_of(composed: ComposedCompressor, stage: Stage, rank: int, judge: QueryJudge) -> float:
    """The recall@10 of the judge's exact float top-10 that ``stage`` (at projection ``rank``) finds."""
    transform, quantizer = stage
    doc_codes = quantizer.encode(transformed_documents(transform, composed._projected(judge.documents, rank)))
    query_codes = composed._stage_queries(stage, composed._projected(judge.queries, rank))
    return neighbour_recall(composed._scores(quantizer, query_codes, doc_codes), judge.exact)


def measure_by_queries(composed: ComposedCompressor, x: torch.Tensor,
                       queries: torch.Tensor) -> dict[int, dict[str, Any]]:
    """The report of the fitted stages (``composed._stages``) measured by the sample ``queries`` (see the module
    docstring): per width, its stage's rotation and bits, its recall@10 (keyed ``"<rotation>/<bits>bit"``) and how
    many queries and fit rows measured it."""
    judge = QueryJudge.of(x, queries, composed.config.seed)
    report = {}
    for width, stage in sorted(composed._stages.items()):
        rank = composed._rank(width)
        bits = width // rank
        kind = composed.stage_rotation_kind(rank, bits)
        report[width] = {"rotation": kind, "bits": bits,
                         "recall_at_10": {f"{kind}/{bits}bit": round(recall_of(composed, stage, rank, judge), 4)},
                         "queries": len(judge.queries), "documents": len(judge.documents)}
    return report
