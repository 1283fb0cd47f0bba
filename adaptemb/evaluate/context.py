"""What a bench run is given and holds while it runs: ``BenchConfig`` (what to run), ``RunContext`` (the dataset
prepared once for every method) and ``BenchResult`` (everything it measured)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from adaptemb.codes import Codes
from adaptemb.datasets import Dataset
from adaptemb.evaluate.metrics import Row
from adaptemb.evaluate.scale import ScaleConfig
from adaptemb.evaluate.steps import StepLog
from adaptemb.method import Compressor
from adaptemb.ranking import TopK


@dataclass
class BenchConfig:
    """What to run. ``rerank_stores``: ``"float32"`` and/or names of registered fixed-size methods
    (e.g. ``"int8"``) whose ``to_dense()`` codes live in the embedding space."""

    methods: list[str]
    budgets: list[int] = field(default_factory=lambda: [16, 32, 64])
    bytes: list[int] | None = None
    """Byte budgets per vector: when set, they replace ``budgets`` and each method encodes at its largest
    ``k`` whose codes fit (``Compressor.budget_for_bytes``), so every method is compared at equal bytes."""
    device: str = "auto"
    rerank: bool = False
    rerank_stores: tuple[str, ...] = ("float32", "int8")
    shortlist: int = 100
    depth: int = 100
    seed: int = 0
    batch_size: int = 512
    warmup: int = 0
    """Untimed rounds before the timed ones; none by default: each row's quality search over every query runs the
    same index just before (its caches and compiled kernels are warm)."""
    rounds: int = 3
    loo_queries: int = 1000
    method_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    fit_progress: bool = True
    """Passed as ``progress`` to methods whose config has that field (learned methods' training bars)."""
    fit_labels: bool = False
    """Pass the dataset's corpus labels to ``fit`` of the methods that learn from labels (``fit_inputs``). Off by
    default: a dataset's labels are its 1-NN evaluation's, and class labels need not help retrieval."""
    fit_queries: int = 0
    """At most this many of the dataset's ``dev_queries`` (real queries never evaluated) go to ``fit(x, queries=...)``
    of the methods whose fit-time choices they judge (``"queries"`` in ``fit_inputs``); 0 (the default): fits choose
    without them. ``adaptemb bench`` holds this many of a dataset's queries out of the evaluation for it when it has
    none. Off by default: judged by the sample's float top-10, svd+binary chose ITQ at 8-16 B where no rotation
    ranked the other queries better by 0.02 NDCG@10 on the 768-d stand-in (docs/results.md)."""
    scale: ScaleConfig | None = None
    """With a config, also run the scale study (``adaptemb.evaluate.scale``) on the fitted methods."""
    fit_workers: int | None = 1
    """Processes that fit the methods side by side before the rows are measured (``adaptemb.evaluate.fit_pool``):
    1 fits each method in this process as its turn comes; None chooses one per core on the CPU (the CLI's
    default)."""
    keep_rankings: bool = False
    """Keep each main-table row's ranking (scores and ids at ``depth``) in ``BenchResult.rankings`` (for saved
    TREC runs: ``adaptemb.evaluate.runs``)."""


@dataclass
class BenchResult:
    """Everything a bench run measured; ``rows`` are flat JSON-ready dicts, one per method × budget."""

    dataset: dict[str, Any]
    config: dict[str, Any]
    machine: dict[str, Any]
    rows: list[Row]
    notes: list[str]
    total_s: float = 0.0
    scale: list[Row] = field(default_factory=list)
    recommendation: list[Row] = field(default_factory=list)
    """Per byte budget: the best row by NDCG@10, its margin and the fastest row of equal quality
    (``adaptemb.evaluate.recommend``), over the rows ``recommendation_rows`` names."""
    recommendation_rows: str = "corpus"
    """Which rows the recommendation ranks: ``"corpus"`` (the main table) or ``"scale"`` (the scale study's rows,
    every method and faiss baseline at N rows; whenever a scale study ran)."""
    corpus_recommendation: list[Row] = field(default_factory=list)
    """With a scale study: the recommendation the main table's rows alone would give (for comparison)."""
    steps: list[dict[str, Any]] = field(default_factory=list)
    """Every step of the run (``adaptemb.evaluate.steps.Step``): its kind, label, method, budget and wall seconds."""
    rankings: list[tuple[Row, TopK]] = field(default_factory=list)
    """With ``BenchConfig.keep_rankings``: (row of ``rows``, its (scores, ids) best first) per row; not in
    ``as_dict``."""
    ann: list[Row] = field(default_factory=list)
    """With ``--ann``: the recall@10 / QPS points of every approximate index (``adaptemb.evaluate.ann_curves``)."""
    ann_recommendation: list[Row] = field(default_factory=list)
    """With ``--ann``: per byte budget and target recall, the fastest approximate index reaching it."""

    def as_dict(self) -> dict[str, Any]:
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.name != "rankings"}


@dataclass
class RunContext:
    """The dataset prepared once for every method."""

    data: Dataset
    config: BenchConfig
    device: str
    corpus: np.ndarray
    queries: np.ndarray
    exact_ids: np.ndarray
    loo_rows: np.ndarray | None
    steps: StepLog
    """Times each step and tells the progress display (``adaptemb.evaluate.steps``)."""
    notes: list[str]
    supervision: dict[str, Any]
    """What ``fit`` gets besides the rows, for the methods that learn from it (``fit_supervision``)."""
    stores: dict[str, Codes | np.ndarray] = field(default_factory=dict)
    fitted: dict[str, Compressor] = field(default_factory=dict)
    """The first fit of each method (the one that serves every budget it supports)."""
    fit_seconds: dict[str, float] = field(default_factory=dict)
    """The seconds of each method's first fit (what a composition that shares it adds to its own)."""
    benched: list[tuple[Compressor, int | None, float]] = field(default_factory=list)
    """(fitted compressor, budget, fit seconds) of every main-table codes row, in order: the scale study's plan."""
    ann: list[Row] = field(default_factory=list)
    rankings: list[tuple[Row, TopK]] = field(default_factory=list)
    """With ``BenchConfig.keep_rankings``: each row and its ranking (``keep_ranking``)."""
    ahead: dict[Any, Any] = field(default_factory=dict)
    """Fits made ahead in worker processes, by (method, k of a refit or None), until the rows take them
    (``adaptemb.evaluate.method_fits``)."""

    def keep_ranking(self, row: Row, scores: np.ndarray, ids: np.ndarray) -> Row:
        """Keep ``row``'s ranking when the config asks for it; returns ``row``."""
        if self.config.keep_rankings:
            self.rankings.append((row, (scores, ids)))
        return row
