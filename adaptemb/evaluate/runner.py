"""Bench orchestration: every method × budget on one dataset → quality, storage and latency rows.

Per method: fit once on the corpus (with ``fit_labels``, and the dataset's corpus labels for a method that learns
from labels: ``fit_supervision``; one fit serves every budget of an adaptive method; a method whose
fitted budget range is a single ``k`` but which has a ``k`` parameter is refitted per budget), then
per budget: encode corpus and queries, build the method's own index (``Compressor.index``: the backend
registered for its query and document kinds; a method no backend serves is searched by brute force
through its ``score`` and named in the notes), compute the metrics, read the storage from the codes, and
time the search with the latency protocol. With byte budgets (``BenchConfig.bytes``) each method's
budgets are the ``k`` its ``budget_for_bytes`` maps each byte budget to. Plus a full-precision reference
row and, with ``rerank``, funnel rows (shortlist with the codes, rerank with float32 or int8 vectors), and
the recommendation per byte budget (``adaptemb.evaluate.recommend``).

With a scale study (``BenchConfig.scale``), each method is searched at N rows at the same budgets as its rows
of the main table (the same fitted compressors; an explicit ``ScaleConfig.budgets`` list narrows them), and
the recommendation is computed over the scale rows: quality at N rows, which is what the study asks about.
The corpus-size verdict is kept as ``corpus_recommendation``, and a note names every budget where it differs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np

from adaptemb.budgets import Budgets
from adaptemb.codes import Codes, DenseCodes
from adaptemb.datasets import Dataset
from adaptemb.devices import resolve_device
from adaptemb.evaluate.ann_curves import recommend_ann
from adaptemb.evaluate.context import BenchConfig, BenchResult, RunContext
from adaptemb.evaluate.funnel_rows import REFERENCE, rerank_rows
from adaptemb.evaluate.latency import time_search, timed
from adaptemb.evaluate.machine import machine_info
from adaptemb.evaluate.method_fits import first_fit, fit_ahead, fit_params, refit, refit_budgets
from adaptemb.evaluate.metrics import (
    PER_QUERY_NDCG,
    Row,
    evaluate_ranking,
    judged_ndcg_at_10,
    nearest_excluding_self,
    one_nn_accuracy,
)
from adaptemb.evaluate.recommend import MethodSizes, recommend
from adaptemb.evaluate.scale import run_scale
from adaptemb.evaluate.steps import StepListener, StepLog
from adaptemb.method import Compressor
from adaptemb.ranking import neighbour_recall_at_k
from adaptemb.registry import build_index, get_registry

RECOMMENDATION_BYTES = (16, 32, 64)
"""The byte budgets the recommendation covers when the bench ran on ``k`` budgets rather than bytes."""


def check_methods(methods: list[str]) -> None:
    """Raise ``UnknownCompressorError`` (listing the registered ones) for any unknown method."""
    registry = get_registry()
    for name in methods:
        registry.get(name)


def run_bench(data: Dataset, config: BenchConfig,
              progress: StepListener | Callable[[str], None] | None = None) -> BenchResult:
    """Run every method × budget of ``config`` on ``data`` and return the rows. ``progress`` hears each step as it
    starts (``adaptemb.evaluate.steps``: a ``StepListener``, or a callable that takes the step's label)."""
    check_methods(config.methods)
    if config.depth < 10 or config.shortlist < 1:
        raise ValueError("depth must be >= 10 and shortlist >= 1")
    start = time.perf_counter()
    ctx = _prepare(data, config, StepLog(progress, planned=_planned_steps(config)))
    if data.metadata.get("ignored_arrays"):
        ctx.notes.append(f"dataset: ignored array(s) {data.metadata['ignored_arrays']} (not dataset arrays)")
    ctx.notes.extend(data.notes)
    if "queries" in ctx.supervision:
        ctx.notes.append(f"fit queries: {len(ctx.supervision['queries']):,} real queries apart from the evaluated ones "
                         "(the dataset's dev_queries, never evaluated) judge the fit-time choices of the methods that "
                         "make them (csr, compositions before sign bits)")
    rows = [_reference_row(ctx)]
    fit_ahead(ctx, config.methods, lambda name, compressor: _benched_budgets(name, compressor, ctx, []))
    for name in config.methods:
        rows.extend(_bench_method(name, ctx))
    scale = _scale_rows(ctx) if config.scale is not None else []
    budgets = list(config.bytes or RECOMMENDATION_BYTES)
    ctx.steps.start("recommend", "recommendation: sizes per budget and the margins' intervals")
    sizes = method_sizes(ctx.fitted, budgets, ctx.corpus[: min(len(ctx.corpus), 64)])
    corpus_verdict = recommend(rows, budgets, sizes=sizes, seed=config.seed)
    verdict = recommend(scale, budgets, sizes=sizes, seed=config.seed) if scale else corpus_verdict
    if scale:
        _compare_verdicts(verdict, corpus_verdict, scale[0]["n"], len(ctx.corpus), ctx.notes)
    for entry in verdict:
        if entry["best"] is None:
            reasons = "; ".join(f"{name}: {why}" for name, why in entry["why_nothing_fits"].items())
            ctx.notes.append(f"{entry['budget_bytes']:g} B per vector: nothing fits ({reasons or 'no method ran'})")
    return BenchResult(
        recommendation=verdict,
        recommendation_rows="scale" if scale else "corpus",
        corpus_recommendation=corpus_verdict if scale else [],
        dataset=_dataset_info(data),
        config=asdict(config),
        machine=machine_info(),
        rows=rows,
        notes=list(dict.fromkeys(ctx.notes)),  # once each, in order
        total_s=time.perf_counter() - start,
        scale=scale,
        steps=ctx.steps.finish(),
        rankings=ctx.rankings,
        ann=ctx.ann,
        ann_recommendation=recommend_ann(ctx.ann, budgets) if ctx.ann else [],
    )


def _planned_steps(config: BenchConfig) -> int:
    """The steps a run is expected to take before any method is fitted: the reference row, a fit and a row per
    budget of each method, and the recommendation (corrected as methods report their rows)."""
    return 2 + len(config.methods) * (1 + _planned_budgets(config)) + (config.scale is not None)


def method_sizes(fitted: dict[str, Compressor], budgets: list[int], sample: np.ndarray) -> dict[str, MethodSizes]:
    """Per fitted method, what its codes can take per vector (``MethodSizes``): fixed or not, its smallest code
    (measured on ``sample``) and the ``k`` each byte budget maps to (``budget_for_bytes``)."""
    out: dict[str, MethodSizes] = {}
    for name, compressor in fitted.items():
        budgets_ = compressor.budgets()
        fixed = budgets_.fixed and "k" not in type(compressor).Config.model_fields
        size = MethodSizes(fixed=fixed)
        # only an explanation of a budget: never fail a finished run for it
        with contextlib.suppress(Exception):
            if fixed or not budgets_.per_fit:  # a per-fit method's smallest code would need another fit
                size.smallest_k = None if fixed else budgets_.options()[0]
                size.smallest_bytes = float(compressor.encode(sample, k=size.smallest_k).bytes_per_vector)
            if not fixed:
                size.fits = {b: compressor.budget_for_bytes(b, sample) for b in budgets}
        out[name] = size
    return out


def _compare_verdicts(verdict: list[Row], corpus: list[Row], rows: int, corpus_rows: int, notes: list[str]) -> None:
    notes.append(f"recommendation: from the scale study's rows at {rows:,} rows (every method and faiss baseline), "
                 f"not from the {corpus_rows:,} corpus rows of the main table")
    for at_scale, small in zip(verdict, corpus):
        if at_scale["best"] is None or small["best"] is None or at_scale["best"]["label"] == small["best"]["label"]:
            continue
        notes.append(f"recommendation at {at_scale['budget_bytes']:g} B: {at_scale['best']['label']} at {rows:,} rows "
                     f"({at_scale['best']['ndcg_at_10']:.4f}); on the corpus alone {small['best']['label']} "
                     f"({small['best']['ndcg_at_10']:.4f})")


def _scale_rows(ctx: RunContext) -> list[Row]:
    """The scale study: by default every (fitted compressor, budget) of the main table's codes rows, so the scale
    rows sit at the same budgets (with ``--bytes``, the same bytes per vector) as the table; with an explicit
    list of budgets, each method at those of them it supports (a refitted method's fit for that ``k`` first)."""
    assert ctx.config.scale is not None
    plan: list[tuple[Compressor, int | None]] = []
    fit_s: dict[tuple[str, int | None], float] = {}
    for compressor, k, seconds in ctx.benched:
        fit_s.setdefault((compressor.name, k), seconds)
    wanted = ctx.config.scale.budgets
    if all(k is None for k in wanted):  # the default: the main table's budgets
        plan = [(compressor, k) for compressor, k, _ in ctx.benched]
    else:
        for name, compressor in ctx.fitted.items():
            plan.extend(_scale_budgets(name, compressor, [k for k in wanted if k is not None], ctx))
    ctx.steps.start("scale", f"scale study: {ctx.config.scale.rows:,} rows, {len(plan)} method rows and faiss baselines")
    rows = run_scale(ctx.data, list(dict.fromkeys(plan)), ctx.config.scale, ctx.notes, ctx.ann)
    for row in rows:
        row["fit_s"] = fit_s.get((row["method"], row["k"]))
    return rows


def _scale_budgets(name: str, compressor: Compressor, wanted: list[int], ctx: RunContext) -> list[tuple[Compressor, int | None]]:
    """(compressor, k) for each wanted budget this method serves: a fixed-size method once at its size; a method
    refitted per budget through its main-table fit for that ``k``; others when ``k`` is within their range."""
    budgets = compressor.budgets()
    refits = {k: c for c, k, _ in ctx.benched if c.name == name and k is not None}
    if budgets.fixed and not refits:  # no budget to choose: one row at its fixed size, as in the main table
        return [(compressor, None)]
    plan: list[tuple[Compressor, int | None]] = []
    for k in wanted:
        if k in refits:
            plan.append((refits[k], k))
        elif budgets.allows(k):
            plan.append((compressor, k))
        else:
            valid = ", ".join(str(v) for v in sorted(refits)) if budgets.fixed else _valid(budgets)
            ctx.notes.append(f"scale: {name} k={k} skipped (valid budgets {valid})")
    return plan


def _prepare(data: Dataset, config: BenchConfig, steps: StepLog) -> RunContext:
    corpus = np.ascontiguousarray(data.corpus, dtype=np.float32)
    queries = np.ascontiguousarray(data.queries, dtype=np.float32)
    loo = None
    if data.labels is not None and data.query_labels is None:
        count = min(config.loo_queries, len(corpus))
        loo = np.sort(np.random.default_rng(config.seed).choice(len(corpus), size=count, replace=False))
    supervision = fit_supervision(data) if config.fit_labels else {}
    if config.fit_queries and data.dev_queries is not None:
        supervision["queries"] = np.ascontiguousarray(data.dev_queries[: config.fit_queries], dtype=np.float32)
    return RunContext(data, config, str(resolve_device(config.device)), corpus, queries, np.empty((0, 10)), loo, steps,
                    [], supervision)


def query_takers(config: BenchConfig) -> list[str]:
    """The methods of the run, as configured, whose fit-time choices a query sample judges (``fit_inputs``)."""
    return [name for name in config.methods
            if "queries" in get_registry().get(name)(**config.method_params.get(name, {})).fit_inputs]


def fit_supervision(data: Dataset) -> dict[str, Any]:
    """The supervision a dataset brings to the methods that learn from it (``Compressor.fit_inputs``): its corpus
    ``labels`` (a ``Dataset`` holds no pairs: its queries are the evaluation's)."""
    return {} if data.labels is None else {"labels": data.labels}


def _planned_budgets(config: BenchConfig) -> int:
    return len(config.bytes) if config.bytes is not None else len(config.budgets)


def _dataset_info(data: Dataset) -> dict[str, Any]:
    judged = int(data.evaluated().sum())
    return {
        "name": data.name, "corpus": len(data.corpus), "queries": len(data.queries), "dim": data.dim,
        "judged_queries": judged, "labels": data.labels is not None, "query_labels": data.query_labels is not None,
        "dev_queries": 0 if data.dev_queries is None else len(data.dev_queries),
        "description": data.description,
    }


# -- rows -----------------------------------------------------------------------------------------


def _reference_row(ctx: RunContext) -> Row:
    ctx.steps.start("reference", f"{REFERENCE}: exact search on the full-precision embeddings", method=REFERENCE)
    docs, queries = DenseCodes(ctx.corpus), DenseCodes(ctx.queries)
    index, build_s = timed(lambda: build_index(docs, device=ctx.device, query_batch=ctx.config.batch_size))
    scores, ids = index.search(queries, ctx.config.depth)
    ctx.exact_ids = ids[:, :10]
    loo = DenseCodes(ctx.corpus[ctx.loo_rows]) if ctx.loo_rows is not None else None
    row = _measure(ctx, index, queries, ids, docs, loo)
    return ctx.keep_ranking({"method": REFERENCE, "k": None, "variant": "reference", **row, "fit_s": 0.0,
                             "encode_vectors_per_s": None, "index_build_s": build_s,
                             "note": "exact inner product on the float32 embeddings"}, scores, ids)


def _bench_method(name: str, ctx: RunContext) -> list[Row]:
    rows: list[Row] = []
    plan = _fitted_budgets(name, ctx)
    ctx.steps.replan(len(plan) - _planned_budgets(ctx.config))
    for compressor, k, fit_s in plan:
        ctx.steps.start("row", f"{name}: k={k if k is not None else 'fixed'} encode, search, time", method=name, k=k)
        try:
            rows.extend(_bench_budget(compressor, k, fit_s, ctx))
            ctx.benched.append((compressor, k, fit_s))
        except (ValueError, TypeError, NotImplementedError, RuntimeError) as err:
            ctx.notes.append(f"{name} k={k}: skipped, {type(err).__name__}: {err}")
    return rows


def _fitted_budgets(name: str, ctx: RunContext) -> list[tuple[Compressor, int | None, float]]:
    """(fitted compressor, budget, fit seconds) for each budget this method can honour."""
    params = fit_params(name, ctx)
    compressor, fit_s = first_fit(name, params, ctx)
    budgets = compressor.budgets()
    retrainable = "k" in type(compressor).Config.model_fields
    if budgets.fixed and not retrainable:
        ctx.notes.append(f"{name}: fixed size (no budget); one row at all {budgets.high} dims")
        return [(compressor, None, fit_s)]
    ks = _benched_budgets(name, compressor, ctx, ctx.notes)
    refits = refit_budgets(compressor, ks)
    plan: list[tuple[Compressor, int | None, float]] = []
    for k in ks:
        if budgets.allows(k):
            plan.append((compressor, k, fit_s))
        elif k in refits:  # one fit per budget: refit with this k
            plan.append(refit(name, params, k, ctx))
        else:
            ctx.notes.append(f"{name}: budget k={k} skipped (valid budgets {_valid(budgets)})")
    if ks and not any(budgets.allows(k) or budgets.fixed for k in ks):  # nothing requested fits this method
        ctx.notes.append(f"{name}: none of the budgets is valid; one row at its default k={budgets.default}")
        plan.append((compressor, budgets.default, fit_s))
    return [p for p in plan if p[0] is not None]


def _benched_budgets(name: str, compressor: Compressor, ctx: RunContext, notes: list[str]) -> list[int]:
    """The budgets a fitted method is benched at: its ``k`` per byte budget, or the configured budgets."""
    return _budgets_for_bytes(name, compressor, ctx, notes) if ctx.config.bytes is not None else list(ctx.config.budgets)


def _budgets_for_bytes(name: str, compressor: Compressor, ctx: RunContext, notes: list[str]) -> list[int]:
    """Each byte budget mapped to the method's own ``k`` (distinct, in order); a method whose smallest code
    exceeds every byte budget gets one row at its smallest budget, like a fixed-size method."""
    assert ctx.config.bytes is not None
    sample = ctx.corpus[: min(len(ctx.corpus), 256)]
    ks: list[int] = []
    for nbytes in ctx.config.bytes:
        k = compressor.budget_for_bytes(nbytes, sample)
        if k is None:
            notes.append(f"{name}: no budget fits {nbytes} B per vector")
        elif k not in ks:
            ks.append(k)
        else:
            notes.append(f"{name}: {nbytes} B per vector maps to k={k} again (one row)")
    if not ks:
        smallest = compressor.budgets().options()[0]
        notes.append(f"{name}: its smallest code (k={smallest}) exceeds every byte budget; one row at k={smallest}")
        ks.append(smallest)
    return ks


def _valid(budgets: Budgets) -> str:
    if budgets.values is not None:
        return ", ".join(str(v) for v in budgets.values)
    return f"{budgets.low}..{budgets.high}"


def _bench_budget(compressor: Compressor, k: int | None, fit_s: float, ctx: RunContext) -> list[Row]:
    doc_codes, encode_s = timed(lambda: compressor.encode(ctx.corpus, k=k))
    index, build_s = timed(lambda: compressor.index(doc_codes, device=ctx.device, k=k, query_batch=ctx.config.batch_size))
    if index.brute_force:
        kinds = "declares no query code kind" if compressor.query_kind is None else (
            f"no index backend serves {compressor.query_kind} queries against {doc_codes.kind} documents")
        ctx.notes.append(f"{compressor.name}: {kinds}; searched by brute force through score()")
    # an index with a rerank stage needs the float queries; every other one is timed on query codes
    query_codes = ctx.queries if index.second_stage is not None else index.encode_queries(ctx.queries)
    scores, ids = index.search(query_codes, ctx.config.depth)
    loo = None
    if ctx.loo_rows is not None:
        loo = ctx.corpus[ctx.loo_rows] if index.second_stage is not None else index.encode_queries(ctx.corpus[ctx.loo_rows])
    base = {
        "method": compressor.name, "k": k, "value_bits": doc_codes.value_bits,  # the code's k and bits per value
        "fit_s": fit_s, "encode_vectors_per_s": len(ctx.corpus) / max(encode_s, 1e-9),
        "index_build_s": build_s, "fit_report": _jsonable(compressor.fit_report),
    }
    rows = [ctx.keep_ranking({**base, "variant": "codes", **_measure(ctx, index, query_codes, ids, doc_codes, loo),
                              "note": ""}, scores, ids)]
    if ctx.config.rerank:
        rows.extend(rerank_rows(compressor, index, query_codes, doc_codes, base, ctx))
    return rows


def _measure(ctx: RunContext, index: Any, queries: Codes | np.ndarray, ids: np.ndarray, docs: Codes, loo: Any) -> Row:
    judged = ctx.data.judged
    metrics = {**evaluate_ranking(ids, ctx.data.qrels, judged).as_dict(),
               PER_QUERY_NDCG: judged_ndcg_at_10(ids, ctx.data.qrels, judged)}
    latency = time_search(index.search, queries, batch_size=ctx.config.batch_size, warmup=ctx.config.warmup,
                          rounds=ctx.config.rounds)
    dim = ctx.corpus.shape[1]
    return {
        **metrics,
        "neighbour_recall_at_10": float(np.mean(neighbour_recall_at_k(ids, ctx.exact_ids, 10))) if len(ctx.exact_ids) else 1.0,
        "one_nn_accuracy": _one_nn(ctx, index, ids, loo),
        "code_kind": docs.kind, "query_kind": getattr(queries, "kind", "float32"), "code_dim": docs.dim,
        "active_dims": float(np.mean(docs.active_counts())),
        "bytes_per_vector": docs.bytes_per_vector, "compression_ratio": 4.0 * dim / docs.bytes_per_vector,
        "backend": getattr(index, "backend", type(index).__name__), "device": ctx.device,
        **{f"latency_{key}": value for key, value in latency.as_dict().items()},
    }


def _one_nn(ctx: RunContext, index: Any, ids: np.ndarray, loo: Codes | None) -> float | None:
    data = ctx.data
    if data.labels is None:
        return None
    if data.query_labels is not None:
        return one_nn_accuracy(ids[:, 0], data.labels, data.query_labels)
    assert loo is not None and ctx.loo_rows is not None
    _, near = index.search(loo, 2)
    return one_nn_accuracy(nearest_excluding_self(near, ctx.loo_rows), data.labels, data.labels[ctx.loo_rows])


def _jsonable(value: Any) -> Any:
    """A JSON-ready copy of a fit report (dataclasses, numpy and torch scalars become plain values)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "__dataclass_fields__"):
        return _jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "tolist"):
        return _jsonable(value.tolist())
    return str(value)
