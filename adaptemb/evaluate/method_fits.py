"""The bench's fits: each method's parameters, its first fit (shared by the compositions that reuse its projection),
its refits per budget, and all of them fitted ahead in worker processes when cores are free (``fit_pool``).

``fit_ahead`` runs before the first row: it fits every method, the refits its budgets need and the compositions on
its projection side by side, and keeps each fit under its key (method, ``k`` of a refit or None). ``first_fit``
and ``refit`` then take the fit made ahead, or fit in the calling process when none was (one worker, a GPU, or a
fit that failed in its worker, so that its error is the one a sequential run gives).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from adaptemb.api import get_compressor
from adaptemb.budgets import Budgets
from adaptemb.evaluate.context import RunContext
from adaptemb.evaluate.fit_pool import FitJob, FitOutcome, plan_workers, run_fit_jobs, supervision_for
from adaptemb.evaluate.latency import timed
from adaptemb.method import Compressor
from adaptemb.registry import get_registry
from adaptemb.threads import choose_threads, fixed_threads, physical_cores


def fit_params(name: str, ctx: RunContext) -> dict[str, Any]:
    """The parameters the bench fits ``name`` with: the run's seed, its progress setting and byte budgets where the
    method has those fields, then the user's ``method_params``."""
    fields = get_registry().get(name).Config.model_fields
    params: dict[str, Any] = {"seed": ctx.config.seed}
    if "progress" in fields:
        params["progress"] = ctx.config.fit_progress
    if ctx.config.bytes is not None and "byte_budgets" in fields:
        params["byte_budgets"] = list(ctx.config.bytes)  # fitted for the budgets it is benched at (fit(bytes=...))
    params.update(ctx.config.method_params.get(name, {}))
    return params


def first_fit(name: str, params: dict[str, Any], ctx: RunContext) -> tuple[Compressor, float]:
    """The method's first fit and its seconds (a composition's include its shared projection's), made ahead or now;
    kept in ``ctx.fitted`` / ``ctx.fit_seconds``."""
    compressor, fit_s = _take(name, None, params, ctx)
    ctx.fitted[name], ctx.fit_seconds[name] = compressor, fit_s
    return compressor, fit_s


def refit(name: str, params: dict[str, Any], k: int, ctx: RunContext) -> tuple[Any, int | None, float]:
    """A method of one budget per fit, refitted with ``k``: (compressor or None when skipped, k, seconds)."""
    try:
        compressor, fit_s = _take(name, k, {**params, "k": k}, ctx)
        return compressor, k, fit_s
    except ValueError as err:
        ctx.notes.append(f"{name}: budget k={k} skipped ({err})")
        return None, k, 0.0


def refit_budgets(compressor: Compressor, ks: list[int]) -> list[int]:
    """The budgets of ``ks`` a fitted method serves only by a refit (one budget per fit, with a ``k`` field)."""
    budgets: Budgets = compressor.budgets()
    if not budgets.fixed or "k" not in type(compressor).Config.model_fields:
        return []
    return [k for k in ks if not budgets.allows(k)]


def fit_ahead(ctx: RunContext, names: list[str], budgets_of: Any) -> None:
    """Fit every method of ``names``, their refits and the compositions that share a projection, on worker processes
    when the machine has more than one core (``BenchConfig.fit_workers``); the fits are kept in ``ctx.ahead`` and their
    steps in the step log. ``budgets_of(name, compressor)`` gives the budgets a fitted method is benched at."""
    cores = fixed_threads() or physical_cores()
    workers, threads = plan_workers(ctx.config.fit_workers, cores, choose_threads(), len(names), ctx.device)
    if workers < 2:
        return
    ctx.steps.start("fits", f"fitting {len(names)} methods in {workers} worker processes")
    waiting = {name: _projection_name(name) for name in names}
    first = [FitJob((name, None), name, fit_params(name, ctx)) for name in sorted(names, key=_trained_first)
             if waiting[name] is None or waiting[name] not in names]

    def follow_up(done: FitOutcome) -> list[FitJob]:
        name, k = done.job.key  # type: ignore[misc]
        if k is not None:
            return []
        if done.compressor is None:  # fitted again in-process later; so are its refits and compositions
            return []
        jobs = [_refit_job(done, k) for k in refit_budgets(done.compressor, budgets_of(name, done.compressor))]
        for other, part in waiting.items():
            if part == name:
                jobs.append(_composition_job(other, done, ctx))
        return jobs

    def on_done(done: FitOutcome) -> None:
        if done.compressor is not None:
            ctx.steps.record("fit", f"{done.job.name}: fit{_k_label(done.job.key)} on {len(ctx.corpus):,} × "
                             f"{ctx.corpus.shape[1]} (worker process)", done.seconds, done.cpu_seconds,
                             method=done.job.name)

    ctx.ahead = run_fit_jobs(first, follow_up, on_done, corpus=ctx.corpus, supervision=ctx.supervision,
                             workers=workers, threads=threads)
    ctx.notes.append(f"fits: {len(ctx.ahead)} fitted in {workers} worker processes of {threads} thread(s) each "
                     "before the rows were measured")


def _trained_first(name: str) -> bool:
    """Sort key: methods trained by gradient steps (a config with ``epochs`` or ``steps``: the longest fits) start
    first, so that no long fit starts last and keeps one worker busy alone at the end, and the refits that follow a
    quick method's first fit are not left behind a long one (the default run: 102 s of fits in name order, see
    main_job_time)."""
    fields = get_registry().get(name).Config.model_fields
    return "epochs" not in fields and "steps" not in fields


def _refit_job(first: FitOutcome, k: int) -> FitJob:
    """The refit of ``first``'s method for budget ``k``: from ``first``'s fit where the method starts one there
    (``budget_start``; its time then includes ``first``'s), else a new fit."""
    assert first.compressor is not None
    name, params = first.job.name, {**first.job.params, "k": k}
    start = first.compressor.budget_start(k)
    if start is None:
        return FitJob((name, k), name, params)
    return FitJob((name, k), name, params, shared_s=first.job.shared_s + first.seconds, start=start)


def _composition_job(name: str, projection: FitOutcome, ctx: RunContext) -> FitJob:
    params = fit_params(name, ctx)
    template = get_compressor(name, **params)
    if projection.compressor is not None and template.shares_projection(projection.compressor):  # type: ignore[attr-defined]
        return FitJob((name, None), name, params, projection.compressor, projection.seconds)
    return FitJob((name, None), name, params)


def _projection_name(name: str) -> str | None:
    part = getattr(get_registry().get(name), "Projection", None)
    return part.name if part is not None else None


def _k_label(key: Hashable) -> str:
    k = key[1]  # type: ignore[index]
    return "" if k is None else f" k={k}"


def _take(name: str, k: int | None, params: dict[str, Any], ctx: RunContext) -> tuple[Compressor, float]:
    """The fit made ahead under (name, k), with its notes, or a fit now (its step started here)."""
    done = ctx.ahead.pop((name, k), None)
    if done is not None and done.compressor is not None:
        compressor = done.compressor
        if done.job.projection is not None:
            _note_shared(compressor, done.job.projection.name, done.job.shared_s, ctx)
        if done.job.start is not None:
            _note_started(name, k, done.job.shared_s, ctx)
        _note_supervision(compressor, ctx)
        return compressor, done.job.shared_s + done.seconds
    if k is None:
        ctx.steps.start("fit", f"{name}: fit on {len(ctx.corpus):,} × {ctx.corpus.shape[1]}", method=name)
    started = ctx.fitted[name].budget_start(k) if k is not None and name in ctx.fitted else None
    if started is not None:
        _note_started(name, k, ctx.fit_seconds[name], ctx)
        return started, ctx.fit_seconds[name] + _fit(started, ctx)
    compressor = get_compressor(name, **params)
    return compressor, _share_projection(compressor, ctx) + _fit(compressor, ctx)


def _note_started(name: str, k: int | None, seconds: float, ctx: RunContext) -> None:
    ctx.notes.append(f"{name}: the k={k} fit starts from its first fit (budget_start); its fit time includes that "
                     f"fit's {seconds:.1f}s")


def _share_projection(compressor: Compressor, ctx: RunContext) -> float:
    """A composition whose projection this run has fitted already, with the same settings, fits with that projection
    instead of fitting it again (``reuse_projection``); the seconds that fit took, which the composition's fit time
    includes (its row says what fitting it alone costs), and a note. 0 when nothing is shared."""
    part = getattr(compressor, "Projection", None)
    fitted = ctx.fitted.get(part.name) if part is not None else None
    if fitted is None or not compressor.shares_projection(fitted):  # type: ignore[attr-defined]
        return 0.0
    compressor.reuse_projection(fitted)  # type: ignore[attr-defined]
    _note_shared(compressor, part.name, ctx.fit_seconds[part.name], ctx)
    return ctx.fit_seconds[part.name]


def _note_shared(compressor: Compressor, part: str, seconds: float, ctx: RunContext) -> None:
    ctx.notes.append(f"{compressor.name}: its projection is the {part} row's fit (same rows and settings, fitted "
                     f"once); its fit time includes that fit's {seconds:.1f}s")


def _note_supervision(compressor: Compressor, ctx: RunContext) -> dict[str, Any]:
    """The supervision ``compressor`` takes (its ``fit_inputs``, which a composition's config may narrow: no query
    sample where it leaves nothing to choose), noted."""
    own = supervision_for(compressor, ctx.supervision)
    learned = [key for key in own if key != "queries"]
    if learned:
        ctx.notes.append(f"{compressor.name}: fitted with the dataset's corpus {' and '.join(learned)}"
                         + (" (seen by the fit, so leave-one-out 1-NN accuracy is optimistic)" if ctx.loo_rows is not None else ""))
    if "queries" in own:
        ctx.notes.append(f"{compressor.name}: fitted with {len(own['queries']):,} real queries that are never evaluated "
                         "(the dataset's dev_queries; its fit report says what they judged)")
    return own


def _fit(compressor: Compressor, ctx: RunContext) -> float:
    """Fit on the corpus with the supervision the method learns from (noted); the seconds it took."""
    own = _note_supervision(compressor, ctx)
    _, seconds = timed(lambda: compressor.fit(ctx.corpus, **own))
    return seconds
