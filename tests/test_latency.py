"""The latency protocol's bookkeeping (no timed assertions: speed lives in benchmarks/)."""

from __future__ import annotations

import numpy as np
import pytest

from adaptemb.codes import DenseCodes
from adaptemb.evaluate.latency import (
    query_batch,
    summarize,
    synthetic_dense,
    synthetic_sparse,
    time_rounds,
    time_search,
)
from adaptemb.index import DenseIndex


def test_time_rounds_runs_warmup_then_timed_rounds() -> None:
    calls: list[int] = []
    times = time_rounds(lambda: calls.append(1), warmup=2, rounds=3)
    assert len(calls) == 5 and len(times) == 3 and all(t >= 0 for t in times)
    with pytest.raises(ValueError, match="rounds >= 1"):
        time_rounds(lambda: None, rounds=0)


def test_summarize_by_hand() -> None:
    # times 1..5: median 3; numpy linear percentiles: p10 = 1.4, p90 = 4.6, q1 = 2, q3 = 4 -> IQR 2
    stats = summarize([5.0, 1.0, 3.0, 2.0, 4.0], batch_size=512, warmup=1)
    assert (stats.median_s, stats.p10_s, stats.p90_s, stats.iqr_s) == pytest.approx((3.0, 1.4, 4.6, 2.0))
    assert stats.mean_s == 3.0 and stats.min_s == 1.0 and stats.rounds == 5
    assert stats.per_query_ms == pytest.approx(3000.0 / 512)
    assert stats.as_dict()["per_query_ms"] == pytest.approx(stats.per_query_ms)


def test_query_batch_tiles_to_the_batch_size() -> None:
    queries = DenseCodes(np.arange(6, dtype=np.float32).reshape(3, 2))
    batch = query_batch(queries, 7)
    assert len(batch) == 7
    np.testing.assert_array_equal(batch.values[:, 0], [0, 2, 4, 0, 2, 4, 0])


def test_time_search_times_one_batch_per_round() -> None:
    seen: list[int] = []
    stats = time_search(lambda q, k: seen.append(len(q)), synthetic_dense(5, 4), batch_size=16, warmup=1, rounds=2)
    assert seen == [16, 16, 16] and stats.rounds == 2 and stats.batch_size == 16


def test_synthetic_codes() -> None:
    dense = synthetic_dense(50, 8, seed=1)
    np.testing.assert_allclose(np.linalg.norm(dense.values, axis=1), 1.0, rtol=1e-5)
    sparse = synthetic_sparse(200, 64, 16, seed=1)
    assert sparse.is_fixed_k and sparse.indices.shape == (200, 16)
    assert all(len(np.unique(row)) == 16 for row in sparse.indices)  # distinct active dims
    assert sparse.indices.max() < 64 and (sparse.values >= 0).all()
    np.testing.assert_array_equal(synthetic_sparse(20, 64, 16, seed=3).indices, synthetic_sparse(20, 64, 16, seed=3).indices)


def test_time_search_over_an_index() -> None:
    docs = synthetic_dense(100, 8)
    stats = time_search(DenseIndex(docs).search, synthetic_dense(10, 8, seed=2), batch_size=32, warmup=0, rounds=2)
    assert stats.rounds == 2 and stats.median_s > 0
