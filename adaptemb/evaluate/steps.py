"""The steps of a bench run as they happen: what each was (a fit, a row, ...), its label, its wall seconds and the
process's CPU seconds in it (all threads: a busy machine inflates it far less than the wall time).

``run_bench`` starts a step before each unit of work (``StepLog.start``); the previous one ends there. The log
keeps every step's time (``BenchResult.steps``: what ``benchmarks/main_job_time.py`` records and the summary's time
per fit) and tells its listener, when one is given, each step's label and how many steps the run now plans, so a
progress bar can show the step and an ETA. The plan is an estimate that the run corrects as it learns how many
rows a method has.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol, runtime_checkable

StepKind = Literal["reference", "fits", "fit", "row", "scale", "recommend"]
"""``fits``: the fits made side by side in worker processes, as one step (each of them is also a ``fit`` step)."""


@runtime_checkable
class StepListener(Protocol):
    """What a progress display implements: ``step`` when one starts (its label, the steps now planned), ``done``
    at the end of the run."""

    def step(self, label: str, planned: int) -> None: ...

    def done(self) -> None: ...


@dataclass
class Step:
    """One step: its kind, the method and budget it served (if any), its label, its wall and CPU seconds."""

    kind: StepKind
    label: str
    method: str | None = None
    k: int | None = None
    seconds: float = 0.0
    cpu_seconds: float = 0.0


class StepLog:
    """Times the run's steps (see the module docstring). ``listener`` may also be a plain ``callable(label)``."""

    def __init__(self, listener: StepListener | Callable[[str], None] | None = None, planned: int = 0) -> None:
        self.steps: list[Step] = []
        self.planned = planned
        self._listener = listener
        self._started = 0.0
        self._cpu_started = 0.0

    def start(self, kind: StepKind, label: str, *, method: str | None = None, k: int | None = None) -> None:
        """End the current step (if any) and start a new one."""
        self._end_current()
        self.steps.append(Step(kind, label, method, k))
        self.planned = max(self.planned, len(self.steps))
        self._started, self._cpu_started = time.perf_counter(), time.process_time()
        if isinstance(self._listener, StepListener):
            self._listener.step(label, self.planned)
        elif self._listener is not None:
            self._listener(label)

    def record(self, kind: StepKind, label: str, seconds: float, cpu_seconds: float, *, method: str | None = None,
               k: int | None = None) -> None:
        """Add a step done elsewhere (a fit in a worker process) with its own seconds, and tell the listener; the
        step in progress here goes on."""
        self.steps.append(Step(kind, label, method, k, seconds, cpu_seconds))
        if self.steps[-2:-1] and not self.steps[-2].seconds:  # keep the running step last, so that it ends right
            self.steps[-2], self.steps[-1] = self.steps[-1], self.steps[-2]
        self.planned = max(self.planned, len(self.steps))
        if isinstance(self._listener, StepListener):
            self._listener.step(label, self.planned)
        elif self._listener is not None:
            self._listener(label)

    def replan(self, change: int) -> None:
        """Plan ``change`` more steps (fewer, when negative) than planned so far."""
        self.planned = max(len(self.steps), self.planned + change)

    def finish(self) -> list[dict[str, Any]]:
        """End the last step, tell the listener the run is done, and return every step as a JSON-ready dict."""
        self._end_current()
        if isinstance(self._listener, StepListener):
            self._listener.done()
        return [asdict(step) for step in self.steps]

    def fit_seconds(self) -> dict[str, float]:
        """Seconds of the fit steps, per method (a method refitted per budget: the sum of its fits)."""
        seconds: dict[str, float] = {}
        for step in self.steps:
            if step.kind == "fit" and step.method is not None:
                seconds[step.method] = seconds.get(step.method, 0.0) + step.seconds
        return seconds

    def _end_current(self) -> None:
        if self.steps and not self.steps[-1].seconds:
            self.steps[-1].seconds = time.perf_counter() - self._started
            self.steps[-1].cpu_seconds = time.process_time() - self._cpu_started


def fits_by_method(steps: Iterable[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Each method's fit seconds, one entry per fit in run order, from the steps as ``StepLog.finish`` returns them
    (``BenchResult.steps``, results.json): a refit that starts from the first fit and a composition on a shared
    projection count their own seconds only (the summary's time per fit, the results tables' fit column)."""
    fits: dict[str, list[float]] = {}
    for step in steps:
        if step["kind"] == "fit" and step.get("method") is not None:
            fits.setdefault(step["method"], []).append(step["seconds"])
    return fits
