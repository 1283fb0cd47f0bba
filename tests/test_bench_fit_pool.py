"""The bench's fits in worker processes (``adaptemb.evaluate.fit_pool``): the same rows as fits in-process, refits
and shared projections included, plugins registered at run time fitted in a worker, a fit that fails in a worker
fitted again here, and how many workers and threads a run takes."""

from __future__ import annotations

import os
import types
from typing import Any

import numpy as np
import pytest
import torch

import adaptemb
from adaptemb.datasets import Dataset
from adaptemb.evaluate.fit_pool import (
    MAX_FIT_WORKERS,
    FitJob,
    FitOutcome,
    fork_available,
    plan_workers,
    run_fit_jobs,
)
from adaptemb.evaluate.runner import BenchConfig, run_bench
from adaptemb.evaluate.steps import StepLog
from adaptemb.registry import CompressorRegistry

pytestmark = pytest.mark.skipif(not fork_available(), reason="fit workers are forked (Linux)")
ORIGIN = os.getpid()


def _data() -> Dataset:
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((40, 32)).astype(np.float32)
    corpus = centres[rng.integers(0, 40, 1500)] + 0.5 * rng.standard_normal((1500, 32)).astype(np.float32)
    return Dataset.from_gold("toy", corpus, corpus[:60] + 0.05, np.arange(60))


def _config(methods: list[str], workers: int) -> BenchConfig:
    return BenchConfig(methods=methods, bytes=[8, 16], device="cpu", rounds=1, fit_progress=False, fit_workers=workers)


def _rows(result: Any) -> list[tuple[Any, ...]]:
    return [(row["method"], row["k"], row["bytes_per_vector"], row["ndcg_at_10"]) for row in result.rows]


def test_fits_in_workers_give_the_rows_of_fits_in_process() -> None:
    """pq is refitted per budget, svd+binary reuses the svd row's fit: both done ahead in the workers."""
    data, methods = _data(), ["pq", "svd", "svd+binary"]
    alone, side_by_side = (run_bench(data, _config(methods, workers)) for workers in (1, 2))
    assert _rows(side_by_side) == _rows(alone)
    worker_fits = [step["label"] for step in side_by_side.steps if step["label"].endswith("(worker process)")]
    assert len(worker_fits) == 5 and sum(label.startswith("pq: fit k=") for label in worker_fits) == 2  # one per budget
    assert [step["kind"] for step in side_by_side.steps].count("fits") == 1
    assert not any("(worker process)" in step["label"] for step in alone.steps)
    assert any(note.startswith("fits: 5 fitted in 2 worker processes") for note in side_by_side.notes)
    assert any(note.startswith("svd+binary: its projection is the svd row's fit") for note in side_by_side.notes)
    shared = {row["method"]: row["fit_s"] for row in side_by_side.rows}
    assert shared["svd+binary"] > shared["svd"] > 0  # the shared fit's seconds included, as in-process


def test_the_query_sample_reaches_the_fits_in_workers() -> None:
    """--fit-queries: the dev queries judge svd+binary's choices in its worker as in-process (the same rows and fit
    reports, carried back beside the pickled fit); svd+rabitq has no choice a sample judges and takes none there."""
    data = _data()
    rng = np.random.default_rng(1)
    data.dev_queries = (data.corpus[rng.choice(len(data.corpus), 40, replace=False)] + 0.05).astype(np.float32)
    runs = [run_bench(data, BenchConfig(methods=["svd", "svd+binary", "svd+rabitq"], bytes=[8, 16], device="cpu",
                                        rounds=1, fit_progress=False, fit_workers=workers, fit_queries=500))
            for workers in (1, 2)]
    assert _rows(runs[1]) == _rows(runs[0])
    assert [row.get("fit_report") for row in runs[1].rows] == [row.get("fit_report") for row in runs[0].rows]
    labels = [step["label"] for step in runs[1].steps]
    assert any(label.startswith("svd+binary: fit on") and label.endswith("(worker process)") for label in labels)
    for result in runs:
        reports = [row["fit_report"] for row in result.rows if row["method"] == "svd+binary"]
        assert reports and all(report["query_choice"]["64"]["queries"] == 40 for report in reports)
        assert any("svd+binary: fitted with 40 real queries that are never evaluated" in note for note in result.notes)
        assert not any(note.startswith("svd+rabitq: its fit-time") for note in result.notes)


class PidToy(adaptemb.get_registry().get("mrl")):  # type: ignore[misc]
    """Test method registered at run time: mrl that remembers which process fitted it, and fails when
    ``fail_in_worker`` is set and that process is not the test's."""

    name = "pidtoy"
    fail_in_worker = False

    def _fit(self, x: torch.Tensor, **supervision: Any) -> None:
        self.fitted_in = os.getpid()
        if PidToy.fail_in_worker and self.fitted_in != ORIGIN:
            raise RuntimeError("this toy fails in a worker")
        super()._fit(x, **supervision)


@pytest.fixture
def pid_toy(fresh_plugins: None) -> Any:
    @adaptemb.hookimpl
    def register_compressors(registry: CompressorRegistry) -> None:
        registry.add(PidToy)

    adaptemb.register_plugin(types.SimpleNamespace(register_compressors=register_compressors), name="pidtoy")
    yield
    PidToy.fail_in_worker = False


def test_a_plugin_registered_at_run_time_is_fitted_in_a_worker(pid_toy: None) -> None:
    ahead = run_bench(_data(), _config(["pidtoy", "svd"], 2))
    assert any(step["label"].startswith("pidtoy: fit on") and step["label"].endswith("(worker process)")
               for step in ahead.steps)
    assert _rows(ahead) == _rows(run_bench(_data(), _config(["pidtoy", "svd"], 1)))


def test_a_fit_that_fails_in_a_worker_is_fitted_again_in_process(pid_toy: None) -> None:
    PidToy.fail_in_worker = True
    result = run_bench(_data(), _config(["pidtoy", "svd"], 2))
    labels = [step["label"] for step in result.steps]
    assert "pidtoy: fit on 1,500 × 32" in labels  # this process's fit step, no worker's
    assert any(label.startswith("svd: fit on") and label.endswith("(worker process)") for label in labels)
    assert _rows(result) == _rows(run_bench(_data(), _config(["pidtoy", "svd"], 1)))


def test_a_finished_fits_follow_ups_run_before_the_jobs_not_yet_started() -> None:
    """One worker: int8's refit follows int8 before binary starts (a chain under way is never left for the end), and
    a worker has one job at a time."""
    corpus = _data().corpus
    finished: list[tuple[str, Any]] = []

    def follow_up(done: FitOutcome) -> list[FitJob]:
        return [FitJob(("sq", 4), "sq", {"k": 4}), FitJob(("sq", 8), "sq", {"k": 8})] if done.job.name == "int8" else []

    outcomes = run_fit_jobs([FitJob(("int8", None), "int8", {}), FitJob(("binary", None), "binary", {})], follow_up,
                            lambda done: finished.append(done.job.key), corpus=corpus, supervision={}, workers=1,
                            threads=1)
    assert finished == [("int8", None), ("sq", 4), ("sq", 8), ("binary", None)]
    assert all(outcome.compressor is not None and outcome.seconds > 0 for outcome in outcomes.values())


@pytest.mark.parametrize(("requested", "cores", "free", "jobs", "device", "expected"), [
    (None, 2, 2, 12, "cpu", (2, 1)),  # the CI machine, quiet: two workers of one thread
    (None, 2, 1, 12, "cpu", (2, 1)),  # another process busy for a moment: still two one-thread workers
    (None, 1, 1, 12, "cpu", (1, 1)),  # one core (or set_threads(1)): fit in-process
    (None, 8, 8, 12, "cpu", (MAX_FIT_WORKERS, 2)),
    (None, 8, 2, 12, "cpu", (MAX_FIT_WORKERS, 1)),
    (None, 8, 8, 3, "cpu", (3, 2)),  # no more workers than fits
    (None, 8, 8, 12, "cuda", (1, 8)),  # a GPU fits in-process
    (3, 2, 2, 12, "cpu", (3, 1)),  # asked for: as asked, at least one thread each
])
def test_workers_and_threads_per_run(requested: int | None, cores: int, free: int, jobs: int, device: str,
                                     expected: tuple[int, int]) -> None:
    assert plan_workers(requested, cores, free, jobs, device) == expected


def test_a_step_recorded_from_a_worker_leaves_the_running_step_last() -> None:
    log = StepLog()
    log.start("fits", "fitting 2 methods")
    log.record("fit", "a: fit (worker process)", 2.0, 1.9, method="a")
    log.record("fit", "b: fit (worker process)", 3.0, 2.9, method="b")
    log.start("row", "a: k=4")
    steps = log.finish()
    assert [step["kind"] for step in steps] == ["fit", "fit", "fits", "row"]
    assert [step["seconds"] for step in steps[:2]] == [2.0, 3.0] and steps[2]["seconds"] > 0
    assert log.fit_seconds() == {"a": 2.0, "b": 3.0}
