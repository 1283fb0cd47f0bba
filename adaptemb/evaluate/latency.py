"""The latency protocol of the CSR paper, in miniature: fixed batches of queries, warm-up, then timed rounds.

One round searches one batch of ``batch_size`` queries (512 by default, tiled from the available
queries when there are fewer). After ``warmup`` untimed rounds, ``rounds`` timed rounds give the
median and the spread (10th/90th percentiles and the interquartile range) of the batch time. CUDA
work is synchronised before each clock reading. Also: wall time of any call, and synthetic dense and
sparse codes for latency studies on made-up data (``benchmarks/``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from adaptemb.codes import Codes, DenseCodes, SparseCodes

DEFAULT_BATCH = 512


@dataclass(frozen=True)
class LatencyStats:
    """Seconds per batch of ``batch_size`` queries over ``rounds`` timed rounds (after ``warmup``)."""

    median_s: float
    p10_s: float
    p90_s: float
    iqr_s: float
    mean_s: float
    min_s: float
    rounds: int
    warmup: int
    batch_size: int

    @property
    def per_query_ms(self) -> float:
        """Median milliseconds per query."""
        return 1000.0 * self.median_s / self.batch_size

    def as_dict(self) -> dict[str, float | int]:
        return {**asdict(self), "per_query_ms": self.per_query_ms}


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def time_rounds(fn: Callable[[], Any], *, warmup: int = 1, rounds: int = 5) -> list[float]:
    """Run ``fn`` ``warmup`` times untimed, then ``rounds`` times timed; seconds per round."""
    if rounds < 1 or warmup < 0:
        raise ValueError(f"need rounds >= 1 and warmup >= 0; got rounds={rounds}, warmup={warmup}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(rounds):
        _sync()
        start = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - start)
    return times


def summarize(times: Iterable[float], *, batch_size: int, warmup: int) -> LatencyStats:
    """Median and spread of round times."""
    t = np.asarray(list(times), dtype=np.float64)
    p10, q1, med, q3, p90 = np.percentile(t, [10, 25, 50, 75, 90])
    return LatencyStats(
        median_s=float(med), p10_s=float(p10), p90_s=float(p90), iqr_s=float(q3 - q1),
        mean_s=float(t.mean()), min_s=float(t.min()), rounds=len(t), warmup=warmup, batch_size=batch_size,
    )


def query_batch(queries: Codes, batch_size: int = DEFAULT_BATCH) -> Codes:
    """Exactly ``batch_size`` queries: the first ones, tiled when there are fewer."""
    rows = np.arange(batch_size) % len(queries)
    return queries[rows]


def time_search(
    search: Callable[[Codes, int], Any],
    queries: Codes,
    *,
    batch_size: int = DEFAULT_BATCH,
    warmup: int = 1,
    rounds: int = 5,
    top_k: int = 10,
) -> LatencyStats:
    """Latency of ``search(query_codes, top_k)`` (e.g. ``index.search``) on one batch of queries."""
    batch = query_batch(queries, batch_size)
    times = time_rounds(lambda: search(batch, top_k), warmup=warmup, rounds=rounds)
    return summarize(times, batch_size=batch_size, warmup=warmup)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()``'s result and its wall time in seconds (CUDA synchronised)."""
    _sync()
    start = time.perf_counter()
    result = fn()
    _sync()
    return result, time.perf_counter() - start


# -- synthetic codes and the scale sweep --------------------------------------------------------


def synthetic_dense(n: int, dim: int, *, seed: int = 0) -> DenseCodes:
    """Unit-norm Gaussian float32 vectors (n, dim)."""
    x = np.random.default_rng(seed).standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return DenseCodes(x)


def synthetic_sparse(n: int, dim: int, active: int, *, seed: int = 0) -> SparseCodes:
    """Fixed-k sparse codes: ``active`` distinct dims of ``dim`` per row, positive values (like ReLU-TopK).

    Distinct sorted indices come from sorted draws in ``[0, dim - active]`` plus ``0..active-1``.
    """
    if not 1 <= active <= dim:
        raise ValueError(f"need 1 <= active <= dim; got active={active}, dim={dim}")
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.integers(0, dim - active + 1, size=(n, active)), axis=1) + np.arange(active)
    values = rng.random((n, active), dtype=np.float32)
    return SparseCodes(idx, values, dim)
