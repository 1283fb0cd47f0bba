"""Progress bars for long work: shown on a terminal, silent when output goes to a file or a CI log.

tqdm redraws a bar with carriage returns; captured output (a pipe, a log file) would get a line per redraw,
thousands for a long fit. ``progress_bar`` lets tqdm decide (``disable=None``: off when stderr is not a
terminal), and ``progress=False`` silences it everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tqdm.auto import tqdm


def progress_bar(iterable: Iterable[Any] | None = None, *, enabled: bool = True, **options: Any) -> tqdm:
    """A tqdm bar that shows only when ``enabled`` and stderr is a terminal (``options`` go to tqdm)."""
    return tqdm(iterable, disable=None if enabled else True, **options)
