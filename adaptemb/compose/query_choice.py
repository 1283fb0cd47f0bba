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

from adaptemb.compose.levels import exact_neighbours, fit_levels, lift, neighbour_recall
from adaptemb.compose.rotation import Rotation, fit_rotation
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


def bits_candidates(composed: ComposedCompressor, width: int, ranks: set[int]) -> tuple[int, ...]:
    """The bits per dimension measured at ``width``: what the config fits without a sample (``auto``: 1 bit up to
    the full rank, 2 past it; 2 where set to 2 and half the width is a rank of the projection)."""
    if width > max(ranks):  # past the full rank only 2 bits code the width
        return (2,)
    two = width % 2 == 0 and width // 2 in ranks
    return (2,) if composed.config.bits_per_dim == 2 and two else (1,)


class _Candidates:
    """Fits candidate stages of one composition, each rank's projected rows and each (rank, kind) rotation once."""

    def __init__(self, composed: ComposedCompressor, x: torch.Tensor) -> None:
        self.composed, self.x = composed, x
        self._projected: dict[int, torch.Tensor] = {}
        self._rotations: dict[tuple[int, str], Rotation | None] = {}

    def projected(self, rank: int) -> torch.Tensor:
        if rank not in self._projected:
            self._projected[rank] = self.composed._projected(self.x, rank)
        return self._projected[rank]

    def rotation(self, rank: int, kind: str) -> Rotation | None:
        if (rank, kind) not in self._rotations:
            config = self.composed.config
            self._rotations[rank, kind] = fit_rotation(self.projected(rank), kind, config.seed, config.itq_iterations)
        return self._rotations[rank, kind]

    def stage(self, rank: int, kind: str, bits: int) -> Stage:
        """The stage of 1 bit on ``rank`` or 2 bits on it (code width 2 ``rank``), after rotation ``kind``."""
        rotation = self.rotation(rank, kind)
        z = transformed_documents(rotation, self.projected(rank))
        new_quantizer = self.composed.Quantizer(config=self.composed.config.quantizer)  # type: ignore[attr-defined]
        if bits == 1:
            return rotation, new_quantizer.fit(z)
        levels = fit_levels(z, rotation)
        return levels, new_quantizer.fit(lift(z, levels.threshold))


def recall_of(composed: ComposedCompressor, stage: Stage, rank: int, judge: QueryJudge) -> float:
    """The recall@10 of the judge's exact float top-10 that ``stage`` (at projection ``rank``) finds."""
    transform, quantizer = stage
    doc_codes = quantizer.encode(transformed_documents(transform, composed._projected(judge.documents, rank)))
    query_codes = composed._stage_queries(stage, composed._projected(judge.queries, rank))
    return neighbour_recall(composed._scores(quantizer, query_codes, doc_codes), judge.exact)


def choose_by_queries(composed: ComposedCompressor, x: torch.Tensor, widths: list[int],
                      queries: torch.Tensor) -> tuple[dict[int, Stage], dict[int, str], dict[int, dict[str, Any]]]:
    """Each width's stage (see the module docstring) measured by the sample ``queries``: the stages, each width's
    rotation kind and the report (per width: the stage's rotation and bits, its recall@10, how many queries and
    rows)."""
    judge = QueryJudge.of(x, queries, composed.config.seed)
    fits = _Candidates(composed, x)
    ranks = set(composed._projection.budgets().options())
    stages, kinds, report = {}, {}, {}
    for width in widths:
        best: tuple[float, str, int, Stage] | None = None
        recalls: dict[str, float] = {}
        for bits in bits_candidates(composed, width, ranks):
            rank = width // bits
            kind = composed.stage_rotation_kind(rank, bits)
            stage = fits.stage(rank, kind, bits)
            recall = recall_of(composed, stage, rank, judge)
            recalls[f"{kind}/{bits}bit"] = round(recall, 4)
            if best is None or recall > best[0]:
                best = (recall, kind, bits, stage)
        assert best is not None
        _, kinds[width], bits, stages[width] = best
        report[width] = {"rotation": kinds[width], "bits": bits, "recall_at_10": recalls,
                         "queries": len(judge.queries), "documents": len(judge.documents)}
    return stages, kinds, report
