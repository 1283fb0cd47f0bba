"""Peak resident memory of a block of work, sampled from ``/proc/self/statm`` by a background thread.

Counts what numpy, torch, faiss and numba allocate alike (Python's ``tracemalloc`` sees only Python's own
allocator). Linux only; elsewhere the peak is reported as None.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType

_STATM = Path("/proc/self/statm")


def resident_bytes() -> int | None:
    """This process's resident set size in bytes, or None where /proc is missing."""
    try:
        return int(_STATM.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class PeakMemory:
    """``with PeakMemory() as peak: ...`` then ``peak.extra_bytes``: the highest RSS seen during the block
    (sampled every ``interval`` seconds, and at its start and end) minus the RSS at its start."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.start_bytes: int | None = None
        self.peak_bytes: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakMemory:  # noqa: PYI034 (typing.Self is 3.11+; 3.10 is supported)
        self.start_bytes = self.peak_bytes = resident_bytes()
        if self.start_bytes is not None:
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._observe()

    @property
    def extra_bytes(self) -> int | None:
        """Peak minus start, in bytes (None where RSS cannot be read)."""
        if self.start_bytes is None or self.peak_bytes is None:
            return None
        return max(0, self.peak_bytes - self.start_bytes)

    def _observe(self) -> None:
        now = resident_bytes()
        if now is not None and (self.peak_bytes is None or now > self.peak_bytes):
            self.peak_bytes = now

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._observe()
