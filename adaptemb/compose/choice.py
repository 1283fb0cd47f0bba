"""How a composition's fit chooses its stages: ``StageChoice``, a mixin of ``ComposedCompressor``.

* the rotation ``rotation="auto"`` fits at a rank (``rotation_kind``: before sign bits none up to
  ``NO_ROTATION_MAX_RANK``, ``itq-tail`` up to ``ITQ_MAX_RANK``, Hadamard above; with or without a query sample);
* the ranks to prepare: the largest rank whose codes fit each byte budget (``byte_budgets``, by default
  ``default_byte_ladder``), code sizes measured by fitting the quantiser on a sample of projected rows, and before
  a sign-bit quantiser the 2-bit widths that fill budgets past the full rank's 1-bit code;
* ``rotation="pairs"``: the rotation whose labelled pairs rank best (MRR) among the fit rows' codes;
* ``bits_per_dim``: without a query sample ``auto`` keeps 1 bit up to the full rank, 2 bits past it and 3 bits past
  twice it (``adaptemb.compose.planes``), and ``bits_per_dim=2`` 2 bits on half the rank at every width where that
  half is a rank (``adaptemb.compose.levels``);
* the float query of a stage past the full rank after an affine projection (``affine_values``: svd) is scored
  uncentred, ``<q, x>`` up to a document-independent shift (``_query_shift``), where the projection centres it like
  the documents; the other stages keep the centred query.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from adaptemb.budgets import largest_budget_within
from adaptemb.compose.levels import SignMagnitude, fit_levels, lift, widths_beyond_full_rank
from adaptemb.compose.planes import SignAdditiveMagnitude, fit_planes
from adaptemb.compose.rotation import ITQ_MAX_RANK, NO_ROTATION_MAX_RANK, Rotation, fit_rotation
from adaptemb.compose.stages import Stage, transformed_documents
from adaptemb.method import Compressor
from adaptemb.ranking import reciprocal_ranks

if TYPE_CHECKING:
    from adaptemb.codes import Codes
    from adaptemb.compose.config import ComposedConfig

SIZE_SAMPLE_ROWS = 1024
"""Fit rows a quantiser is fitted on to measure its code size at a candidate rank (more where the rank is larger)."""
PAIR_ROTATIONS = ("random", "itq", "none")
"""The rotations ``rotation="pairs"`` chooses among, in the order that breaks a tie, up to rank ``ITQ_MAX_RANK``;
above it ``LARGE_RANK_PAIR_ROTATIONS`` (ITQ would take minutes per rank, and Hadamard stands in for the dense random
matrix)."""
LARGE_RANK_PAIR_ROTATIONS = ("hadamard", "none")
PAIR_ROWS, PAIR_SAMPLE = 10_000, 2_000
"""At most this many fit rows (the distractors) and pairs (seeded samples) measure the pairs' MRR of a rotation."""


def default_byte_ladder(largest: float) -> list[int]:
    """1, 2, 3, 4, 6, 8, 12, 16, 24, ... (powers of two and 1.5 times them) below ``largest`` bytes."""
    ladder, power = set(), 1
    while power < largest:
        ladder |= {b for b in (power, 3 * power // 2) if b < largest}
        power *= 2
    return sorted(ladder)


class StageChoice:
    """The choices of a composition's fit (a mixin of ``ComposedCompressor``; it uses the composition's ``config``,
    ``Quantizer``, fitted ``_projection`` and ``_stages``, and its ``_projected``, ``_stage_queries`` and
    ``_scores``)."""

    Quantizer: ClassVar[type[Compressor]]
    config: ComposedConfig
    _projection: Compressor
    _stages: dict[int, Stage]
    _choices: dict[int, dict[str, Any]]

    if TYPE_CHECKING:
        def _projected(self, x: torch.Tensor, rank: int) -> torch.Tensor: ...
        def _stage_queries(self, stage: Stage, y: torch.Tensor) -> Codes: ...
        def _scores(self, quantizer: Compressor, query_codes: Codes, doc_codes: Codes) -> np.ndarray: ...

    def rotation_kind(self, rank: int) -> str:
        """The rotation this config fits at ``rank``: ``rotation``; ``auto`` before a sign-bit quantiser (its
        ``sign_bits``) is none up to rank ``NO_ROTATION_MAX_RANK``, ``itq-tail`` (the leading directions unrotated,
        ITQ on the rest) up to ``ITQ_MAX_RANK`` and Hadamard above, before any other quantiser none. A query sample
        (``fit(x, queries=...)``) does not judge the rotation: the recall of its float top-10 preferred ITQ at every
        rank, while real relevance preferred none or itq-tail on both data sets (docs/results.md)."""
        if self.config.rotation != "auto":
            return self.config.rotation
        if not self.Quantizer.sign_bits or rank <= NO_ROTATION_MAX_RANK:
            return "none"
        return "itq-tail" if rank <= ITQ_MAX_RANK else "hadamard"

    def stage_rotation_kind(self, rank: int, bits: int) -> str:
        """The rotation a stage of ``bits`` per dimension fits at ``rank``: ``rotation_kind``, except that ``auto``
        rotates 2-bit stages by ITQ where 1-bit ones take itq-tail (2 bits after itq-tail measured -0.007 NDCG@10 on
        384-d rows at 64 B and -0.010 on 768-d ones at 128 B against 2 bits after ITQ; large_budgets_*.json), and
        3-bit stages too (3 bits on rank 341, NDCG@10 on the 384-d / 768-d data: ITQ 0.2149 / 0.2136, itq-tail
        0.2137 / 0.2118, none 0.2114 / 0.2108, three random draws 0.2094-0.2146 / 0.2075-0.2143, Hadamard 0.2167 /
        0.2114; docs/results.md)."""
        kind = self.rotation_kind(rank)
        return "itq" if bits >= 2 and kind == "itq-tail" and self.config.rotation == "auto" else kind

    def _fit_rotation(self, y: torch.Tensor, kind: str) -> Rotation | None:
        """``fit_rotation`` of projected rows ``y`` with this config's seed, ITQ rounds and itq-tail head."""
        return fit_rotation(y, kind, self.config.seed, self.config.itq_iterations, self.config.itq_tail_unrotated)

    def _plan_ranks(self, x: torch.Tensor) -> list[int]:
        """The ranks to prepare: the largest rank whose codes fit each byte budget (sizes measured by fitting the
        quantiser on a sample of projected rows), the full rank and ``k``; only ``k`` (or the full rank) for a
        quantiser that fixes its size per fit."""
        options = self._projection.budgets().options()
        full = options[-1]
        sample = x[: min(len(x), max(SIZE_SAMPLE_ROWS, 2 * full))]
        sizes: dict[int, float] = {}

        def size(rank: int) -> float:
            if rank not in sizes:
                sizes[rank] = self._sample_size(sample, rank)
            return sizes[rank]

        probe = self.Quantizer(config=self.config.quantizer).fit(self._projected(sample, full))  # type: ignore[attr-defined]
        if probe.budgets().per_fit:
            return [self.config.k or full]
        sizes[full] = float(probe.encode(self._projected(sample[:1], full)).bytes_per_vector)
        budgets = self.config.byte_budgets or default_byte_ladder(sizes[full])
        ranks = {largest_budget_within(nbytes, options, size) for nbytes in budgets}
        if self._two_bit_widths(self._projection, [2 * options[0]]):  # 2 bits may fill budgets past the full rank
            max_bits = 3 if self.config.bits_per_dim == "auto" else 2
            ranks |= set(widths_beyond_full_rank(budgets, options, sizes[full], self._two_bit_size, max_bits))
        return sorted(r for r in ranks | {full, self.config.k} if r is not None)

    @property
    def _full(self) -> int:
        return self._projection.budgets().options()[-1]

    def _sample_size(self, sample: torch.Tensor, rank: int) -> float:
        """Bytes per vector of the quantiser's codes at ``rank`` (infinite where it cannot code that rank)."""
        try:
            quantizer = self.Quantizer(config=self.config.quantizer).fit(self._projected(sample, rank))  # type: ignore[attr-defined]
            return float(quantizer.encode(self._projected(sample[:1], rank)).bytes_per_vector)
        except (ValueError, TypeError, RuntimeError):
            return math.inf

    def _two_bit_widths(self, projection: Compressor, widths: list[int] | None = None) -> list[int]:
        """The prepared widths that may hold 2 bits on half the rank: every even one whose half is a rank of the
        projection, before a sign-bit quantiser that learns from nothing but the rows, unless bits_per_dim=1 or
        rotation='pairs'."""
        if (self.config.bits_per_dim == 1 or not self.Quantizer.sign_bits or self.config.rotation == "pairs"
                or self.Quantizer.fit_inputs):
            return []
        ranks = set(projection.budgets().options())
        return [width for width in widths or sorted(self._stages) if width % 2 == 0 and width // 2 in ranks
                and width <= self._full]

    def _two_bit_size(self, width: int) -> float:
        """Bytes per vector of the sign-bit quantiser's code of ``width`` (two planes of rank width / 2)."""
        return float(self.Quantizer(config=self.config.quantizer).fit(torch.ones(2, width)).encode(torch.ones(1, width)).bytes_per_vector)  # type: ignore[attr-defined]

    def _chosen_stage(self, y: torch.Tensor, rank: int,
                      pairs: tuple[torch.Tensor, torch.Tensor]) -> Stage:
        """rotation='pairs': the stage of each candidate (``PAIR_ROTATIONS``, or ``LARGE_RANK_PAIR_ROTATIONS`` above
        rank ``ITQ_MAX_RANK``); the one whose pairs' MRR is highest (each float pair query ranks its document's code
        among the fit rows' codes), recorded in ``_choices``."""
        rng = np.random.default_rng(self.config.seed)
        take = np.sort(rng.choice(len(pairs[0]), min(len(pairs[0]), PAIR_SAMPLE), replace=False))
        queries, documents = (self._projected(side[torch.from_numpy(take)], rank) for side in pairs)
        rows = y[torch.from_numpy(np.sort(rng.choice(len(y), PAIR_ROWS, replace=False)))] if len(y) > PAIR_ROWS else y
        seen = {row.numpy().tobytes() for row in documents}
        keys = torch.cat([documents, rows[[row.numpy().tobytes() not in seen for row in rows]]])
        stages, mrr = {}, {}
        candidates = PAIR_ROTATIONS if rank <= ITQ_MAX_RANK else LARGE_RANK_PAIR_ROTATIONS
        for kind in candidates:
            rotation = self._fit_rotation(y, kind)
            quantizer = self.Quantizer(config=self.config.quantizer).fit(transformed_documents(rotation, y))  # type: ignore[attr-defined]
            stages[kind] = (rotation, quantizer)
            scores = self._scores(quantizer, self._stage_queries(stages[kind], queries),
                                  quantizer.encode(transformed_documents(rotation, keys)))
            mrr[kind] = float(reciprocal_ranks(torch.from_numpy(scores), torch.eye(*scores.shape, dtype=torch.bool)).mean())
        chosen = max(candidates, key=lambda kind: mrr[kind])
        self._choices[rank] = {"chosen": chosen, "pair_mrr": mrr, "pairs": len(take),
                               "distractor_rows": len(keys) - len(take)}
        return stages[chosen]

    def _fit_two_bit_stage(self, x: torch.Tensor, rank: int, uncentred: bool = False) -> tuple[SignMagnitude, Compressor]:
        """Rotation, 2-bit levels and the sign-bit quantiser of the two planes (width 2 * ``rank``), on ``x``; with
        ``uncentred`` (a stage past the full rank) its float query is scored uncentred (``_query_shift``)."""
        y = self._projected(x, rank)
        rotation = self._fit_rotation(y, self.stage_rotation_kind(rank, 2))
        z = transformed_documents(rotation, y)  # rotated once: the levels and the quantiser's planes both come from it
        levels = fit_levels(z, rotation, self._query_shift(x, rank) if uncentred else None)
        return levels, self.Quantizer(config=self.config.quantizer).fit(lift(z, levels.threshold))  # type: ignore[attr-defined]

    def _fit_three_bit_stage(self, x: torch.Tensor, rank: int) -> tuple[SignAdditiveMagnitude, Compressor]:
        """Rotation, 3-bit magnitudes and the sign-bit quantiser of the three planes (width 3 * ``rank``), on ``x``;
        its float query is scored uncentred (``_query_shift``)."""
        y = self._projected(x, rank)
        rotation = self._fit_rotation(y, self.stage_rotation_kind(rank, 3))
        z = transformed_documents(rotation, y)
        planes = fit_planes(z, rotation, self._query_shift(x, rank))
        return planes, self.Quantizer(config=self.config.quantizer).fit(planes.documents(y))  # type: ignore[attr-defined]

    def _query_shift(self, x: torch.Tensor, rank: int) -> torch.Tensor | None:
        """The projection of the zero row at ``rank``, negated, for an affine projection (``affine_values``): added
        to a projected query it gives ``A q``, so a stage past the full rank scores ``<q, x>`` up to a
        document-independent shift. There the centred query (what the projection gives) measured 0.004 to 0.012
        NDCG@10 below it on both data sets; 1-bit stages keep it (the uncentred one measured 0.012 to 0.014 below on
        the 768-d stand-in), and so do 2-bit stages of half the rank below the full rank (mixed at 16-32 B); see
        docs/results.md. None for any other projection."""
        if not self._projection.affine_values:
            return None
        return -self._projected(torch.zeros(1, x.shape[1], dtype=x.dtype), rank)[0]
