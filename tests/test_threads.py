"""adaptemb sizes torch's thread pool per fit: free physical cores, or a fixed count the user sets."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

import adaptemb
from adaptemb import threads


@pytest.fixture(autouse=True)
def automatic(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(threads.ENV_VAR, raising=False)
    adaptemb.set_threads(None)
    yield
    adaptemb.set_threads(None)


def _fake_cpu_times(monkeypatch: pytest.MonkeyPatch, samples: list[tuple[float, float, float]]) -> None:
    readings = iter(samples)
    monkeypatch.setattr(threads, "_cpu_times", lambda: next(readings))
    monkeypatch.setattr(threads.time, "sleep", lambda _s: None)


def test_busy_cores_subtract_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the sample, 2 cores x 100 jiffies passed: 130 busy, of which 30 were ours -> 1.0 core busy elsewhere."""
    _fake_cpu_times(monkeypatch, [(1000.0, 5000.0, 50.0), (1130.0, 5200.0, 80.0)])
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    assert threads.busy_cores() == pytest.approx(1.0)


def test_automatic_choice_leaves_busy_cores_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "physical_cores", lambda: 2)
    monkeypatch.setattr(threads, "busy_cores", lambda: 0.1)
    assert threads.choose_threads() == 2
    monkeypatch.setattr(threads, "busy_cores", lambda: 0.9)
    assert threads.choose_threads() == 1
    monkeypatch.setattr(threads, "busy_cores", lambda: 5.0)
    assert threads.choose_threads() == 1  # never fewer than one


def test_a_fixed_count_wins_and_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "busy_cores", lambda: 1.0)
    adaptemb.set_threads(3)
    assert threads.choose_threads() == 3
    adaptemb.set_threads(None)
    monkeypatch.setenv(threads.ENV_VAR, "2")
    assert threads.choose_threads() == 2
    monkeypatch.setenv(threads.ENV_VAR, "many")
    with pytest.raises(ValueError, match="ADAPTEMB_NUM_THREADS must be a positive integer; got 'many'"):
        threads.choose_threads()
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="positive integer or None"):
            adaptemb.set_threads(bad)  # type: ignore[arg-type]


def test_physical_cores_count_hyperthreads_once() -> None:
    assert 1 <= threads.physical_cores() <= (torch.get_num_threads() + 64)


@pytest.mark.slow
def test_fits_run_with_the_chosen_count_and_restore_the_pool() -> None:
    before = torch.get_num_threads()
    adaptemb.set_threads(1)
    x = np.random.default_rng(0).standard_normal((200, 16)).astype(np.float32)
    compressor = adaptemb.fit(x, "csr", hidden=32, k=4, epochs=1, progress=False)
    assert compressor.fit_report["threads"] == 1
    assert torch.get_num_threads() == before


def test_small_batches_run_in_one_torch_thread_and_the_pool_is_restored() -> None:
    """A batch of up to SMALL_BATCH_ELEMENTS floats gets one thread, a larger one the current count; an asymmetric
    compressor's encode_queries runs in that count and leaves torch's pool as it found it."""
    with threads.compute_threads(2):
        assert threads.small_batch_threads(threads.SMALL_BATCH_ELEMENTS) == 1
        assert threads.small_batch_threads(threads.SMALL_BATCH_ELEMENTS + 1) == 2
        rows = np.random.default_rng(0).standard_normal((300, 16)).astype(np.float32)
        compressor = adaptemb.fit(rows, "svd+binary")
        seen = []
        encode = compressor._encode_queries
        compressor._encode_queries = lambda x, k: seen.append(torch.get_num_threads()) or encode(x, k)
        compressor.encode_queries(rows[:8])
        assert seen == [1] and torch.get_num_threads() == 2
