"""How ``adaptemb bench`` shows its steps: one live line on a terminal (a rich progress bar with the step, the
steps done of those planned, the time so far and an ETA), one printed line per step elsewhere (a log, a pipe)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class StepBar:
    """A ``StepListener`` (``adaptemb.evaluate.steps``) drawing the run's steps on ``console``."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._live = console.is_terminal
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(bar_width=20), MofNCompleteColumn(),
                             TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console,
                             transient=True) if self._live else None
        self._task = None

    def step(self, label: str, planned: int) -> None:
        """A step starts: on a terminal the bar moves on by the step before it; elsewhere a line is printed."""
        if self._bar is None:
            self._console.print(f"[dim]- {label}[/dim]")
            return
        if self._task is None:
            self._bar.start()
            self._task = self._bar.add_task(label, total=planned)
        else:
            self._bar.update(self._task, advance=1, total=planned, description=label)

    def done(self) -> None:
        """The run is over: the bar disappears (the summary follows)."""
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=self._bar.tasks[0].total)
            self._bar.stop()
