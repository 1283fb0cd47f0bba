"""The bench's fits, run side by side in worker processes before any row is measured.

A bench fits a dozen methods, each on a small batch of rows at a time: one fit keeps one core far busier than two
threads of one fit keep two (torch's intra-op threads gain little on 256 x 384 batches). With two or more
cores the bench therefore fits in worker processes, one per core (each with a share of the free cores), and measures
every row afterwards in the main process, alone on the machine, so that no fit disturbs a row's latency.

Workers are forked (Linux): they inherit the corpus, the registry (plugins registered at run time included) and the
method's supervision without copying them; each fit comes back pickled, with its wall and CPU seconds measured in
the worker. A job whose fit fails in a worker is left to the caller, which fits it again in-process so that its
error, or the note that skips it, is the one a sequential run gives.

``FitJob`` names a fit: the method, its parameters and, for a composition that shares a method's fit, that fitted
projection. ``run_fit_jobs`` runs the first jobs and the ones ``follow_up`` derives from each finished fit (a
method's refits per budget, the compositions that reuse its projection) on ``workers`` processes.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from adaptemb.method import Compressor

MAX_FIT_WORKERS = 4
"""At most this many fits run at once (more processes than that gain little on the bench's dozen fits)."""


@dataclass
class FitJob:
    """One fit: ``key`` identifies it for the caller; ``projection`` is a fitted projection a composition reuses
    (``reuse_projection``), ``start`` an unfitted compressor to fit instead of one made from ``params`` (a refit that
    starts from the method's first fit, ``Compressor.budget_start``); either was fitted in ``shared_s`` seconds."""

    key: Hashable
    name: str
    params: dict[str, Any]
    projection: Compressor | None = None
    shared_s: float = 0.0
    start: Compressor | None = None


@dataclass
class FitOutcome:
    """A finished fit: the fitted compressor (None when the fit failed in the worker: fit it again in-process) and
    the worker's wall and CPU seconds."""

    job: FitJob
    compressor: Compressor | None
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    error: str = ""


@dataclass
class _Inherited:
    """What forked workers read instead of receiving it: the rows and each method's supervision."""

    corpus: np.ndarray | None = None
    supervision: dict[str, Any] = field(default_factory=dict)
    threads: int = 1


_INHERITED = _Inherited()


def fork_available() -> bool:
    """True where worker processes can be forked (Linux; not macOS, where forking a threaded process is unsafe)."""
    return "fork" in multiprocessing.get_all_start_methods() and os.uname().sysname == "Linux"


def plan_workers(requested: int | None, cores: int, free_cores: int, jobs: int, device: str) -> tuple[int, int]:
    """(workers, threads per worker): ``requested`` workers (1: fit in-process), or automatically one per core
    (``cores``: the machine's physical cores, or the count the user fixed; at most ``MAX_FIT_WORKERS``) on the CPU
    where fork is available, each with an equal share of the ``free_cores`` as threads (at least one).

    Workers are counted from the cores, not from the cores free at the moment: one-thread worker processes share
    the CPU fairly with other processes and never spin against each other, so a brief burst of other work (which
    ``free_cores`` samples over 0.1 s) must not turn a two-worker run into a sequential one. The default bench
    took 271 s sequential against 110-162 s with two workers on the 2-core machine (main_job_time.json)."""
    if requested is not None:
        workers = max(1, requested)
    elif device != "cpu" or not fork_available():
        workers = 1
    else:
        workers = max(1, min(cores, MAX_FIT_WORKERS, jobs))
    return workers, max(1, free_cores // workers)


def run_fit_jobs(first: list[FitJob], follow_up: Callable[[FitOutcome], list[FitJob]],
                 on_done: Callable[[FitOutcome], None], *, corpus: np.ndarray, supervision: dict[str, Any],
                 workers: int, threads: int) -> dict[Hashable, FitOutcome]:
    """Run ``first`` and every job ``follow_up`` returns for a finished fit on ``workers`` forked processes of
    ``threads`` threads each; ``on_done`` hears each finished fit as it arrives. Returns the outcomes by key.

    A worker that comes free takes the next job of one queue: ``first`` in its order, with each finished fit's
    follow-ups ahead of the jobs not yet started (a method's refits per budget and the compositions that share its
    projection continue a chain already under way, so that no chain is left to run alone at the end)."""
    _INHERITED.corpus, _INHERITED.supervision, _INHERITED.threads = corpus, supervision, threads
    outcomes: dict[Hashable, FitOutcome] = {}
    queue = deque(first)
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
            pending: dict[Future[_Fitted], FitJob] = {}
            while queue or pending:
                while queue and len(pending) < workers:
                    job = queue.popleft()
                    pending[pool.submit(_fit_job, job)] = job
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    outcome = _outcome(future, pending.pop(future))
                    outcomes[outcome.job.key] = outcome
                    on_done(outcome)
                    queue.extendleft(reversed(follow_up(outcome)))
    finally:
        _INHERITED.corpus, _INHERITED.supervision = None, {}
    return outcomes


def supervision_for(compressor: Compressor, supervision: dict[str, Any]) -> dict[str, Any]:
    """The part of the run's ``supervision`` that ``compressor`` takes (its ``fit_inputs``, which a composition's
    config may narrow)."""
    return {key: value for key, value in supervision.items() if key in compressor.fit_inputs}


def _outcome(future: Future[_Fitted], job: FitJob) -> FitOutcome:
    try:
        compressor, seconds, cpu_seconds, error, report = future.result()
    except Exception as err:  # noqa: BLE001 - a worker that died or a result that did not pickle: fit it in-process
        return FitOutcome(job, None, error=f"{type(err).__name__}: {err}")
    if compressor is not None and compressor.fit_report is None:  # a composition pickles without its fit report
        compressor.fit_report = report
    return FitOutcome(job, compressor, seconds, cpu_seconds, error)


_Fitted = tuple[Compressor | None, float, float, str, dict[str, Any] | None]
"""What a worker sends back: the fitted compressor (None on failure), wall and CPU seconds, the error and the fit
report (which a composition's pickle leaves behind, ``ComposedCompressor.__reduce__``)."""


def _fit_job(job: FitJob) -> _Fitted:
    """In a worker: fit ``job`` on the inherited rows with the supervision its method takes (``fit_inputs``: the
    dataset's labels, the bench's query sample)."""
    import torch
    from threadpoolctl import threadpool_limits

    from adaptemb.api import get_compressor
    from adaptemb.threads import set_threads

    set_threads(_INHERITED.threads)
    torch.set_num_threads(_INHERITED.threads)
    threadpool_limits(_INHERITED.threads)  # numpy's and faiss' BLAS and OpenMP pools: one share of the cores each
    started, cpu_started = time.perf_counter(), time.process_time()
    try:
        compressor = job.start if job.start is not None else get_compressor(job.name, **job.params)
        if job.projection is not None:
            compressor.reuse_projection(job.projection)  # type: ignore[attr-defined]
        compressor.fit(_INHERITED.corpus, **supervision_for(compressor, _INHERITED.supervision))
    except Exception as err:  # noqa: BLE001 - the caller fits it again in-process for the sequential run's behaviour
        return None, 0.0, 0.0, f"{type(err).__name__}: {err}", None
    return compressor, time.perf_counter() - started, time.process_time() - cpu_started, "", compressor.fit_report
