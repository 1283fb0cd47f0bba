"""How many threads adaptemb's own compute uses: torch's intra-op pool while fitting, numba's while searching.

torch sizes its pool to the machine's cores and never looks again. On a machine shared with other work
that is the wrong size: threads that spin against another process's threads lose more than they add (a
CSR fit ran 2.3x faster with one thread than with two while a second CPU-bound process held one of two
cores). adaptemb therefore sizes the pool per fit: the physical cores it may run on, minus the cores other
processes kept busy over a short sample (``BUSY_SAMPLE_S``), at least one.

Set a fixed count with ``adaptemb.set_threads(n)`` or the ``ADAPTEMB_NUM_THREADS`` environment variable
(``set_threads(None)`` returns to the automatic choice). A fixed count also caps the search kernels.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

ENV_VAR = "ADAPTEMB_NUM_THREADS"
BUSY_SAMPLE_S = 0.1
"""Seconds of /proc/stat sampling behind each automatic choice (once per fit)."""

_fixed: int | None = None


def set_threads(count: int | None) -> None:
    """Use ``count`` threads for adaptemb's compute from now on; ``None`` returns to the automatic choice."""
    global _fixed
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ValueError(f"threads must be a positive integer or None (automatic); got {count!r}")
    _fixed = count


def fixed_threads() -> int | None:
    """The count set by ``set_threads`` or ``ADAPTEMB_NUM_THREADS``, or None when the choice is automatic."""
    if _fixed is not None:
        return _fixed
    value = os.environ.get(ENV_VAR, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{ENV_VAR} must be a positive integer; got {value!r}")
    return int(value)


def choose_threads() -> int:
    """The thread count for a fit: the fixed count if one is set, else free physical cores (at least one)."""
    fixed = fixed_threads()
    if fixed is not None:
        return fixed
    return max(1, physical_cores() - round(busy_cores()))


def physical_cores() -> int:
    """Physical cores this process may run on (hyper-threads of one core count once)."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in allowed:
        siblings = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        try:
            cores.add(siblings.read_text().strip())
        except OSError:
            cores.add(str(cpu))
    return max(1, len(cores))


def busy_cores(sample_s: float = BUSY_SAMPLE_S) -> float:
    """Cores kept busy by other processes over ``sample_s`` seconds (Linux /proc; 0.0 where unreadable)."""
    first = _cpu_times()
    if first is None:
        return 0.0
    time.sleep(sample_s)
    second = _cpu_times()
    if second is None:
        return 0.0
    busy = (second[0] - first[0]) - (second[2] - first[2])  # all busy time minus this process's own
    total = second[1] - first[1]
    return 0.0 if total <= 0 else max(0.0, busy / total * (os.cpu_count() or 1))


def _cpu_times() -> tuple[float, float, float] | None:
    """(busy, total) jiffies of all CPUs and this process's own (user + system) jiffies, or None off Linux."""
    try:
        fields = [float(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        own = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest time is inside user)
    return total - idle, total, float(own[11]) + float(own[12])  # utime, stime (fields 14 and 15)


_NESTING = threading.local()


@contextmanager
def compute_threads(count: int | None = None) -> Iterator[int]:
    """Run a block with torch's intra-op pool at ``count`` threads (default: ``choose_threads()``; inside another
    such block, e.g. a composition fitting its parts, the outer block's count), restored after."""
    depth = getattr(_NESTING, "depth", 0)
    chosen = count if count is not None else torch.get_num_threads() if depth else choose_threads()
    previous = torch.get_num_threads()
    torch.set_num_threads(chosen)
    _NESTING.depth = depth + 1
    try:
        yield chosen
    finally:
        _NESTING.depth = depth
        torch.set_num_threads(previous)


SMALL_BATCH_ELEMENTS = 2**20
"""Elements (rows x columns) up to which a batch's torch work runs in one thread (``small_batch_threads``)."""


def small_batch_threads(elements: int) -> int:
    """torch threads for work on a batch of ``elements`` floats: one for a small batch, else the current count.

    A small batch's ops (an elementwise op, a norm, a top-k over a few thousand rows) take well under a millisecond
    in one thread; on a shared machine, two threads whose second core is busy wait for it at every op (measured on
    2 cores beside other work: ``abs().amax()`` of 2,000 x 256 floats took 0.5 ms in one thread, 14 ms in two;
    csr's query encoding of 2,000 queries 16-42 ms against 126-132 ms)."""
    return 1 if elements <= SMALL_BATCH_ELEMENTS else torch.get_num_threads()

