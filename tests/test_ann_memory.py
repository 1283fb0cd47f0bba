"""The pieces that keep an approximate index's build in bounded memory: the routing basis summed a block at a time,
samples drawn without a permutation of every row, and mapped pages released after a scan."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from adaptemb.ann.build import distinct_rows, held_out_rows
from adaptemb.ann.cells import routing_basis
from adaptemb.ann.store import release_mapped


def _blocks(rows: np.ndarray, size: int, seen: list[int]) -> Iterator[np.ndarray]:
    for start in range(0, len(rows), size):
        seen.append(min(size, len(rows) - start))
        yield rows[start : start + size]


def test_the_routing_basis_is_the_rows_top_directions_summed_a_block_at_a_time() -> None:
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((600, 40)) * np.linspace(5, 0.1, 40)  # strongest directions: the first axes
    rows = (rows @ np.linalg.qr(rng.standard_normal((40, 40)))[0]).astype(np.float32)  # turned
    seen: list[int] = []
    basis = routing_basis(_blocks(rows, 128, seen), len(rows), 8)
    assert seen == [128, 128, 128, 128, 88] and basis.shape == (40, 8) and basis.dtype == np.float32
    np.testing.assert_allclose(basis.T @ basis, np.eye(8), atol=1e-5)
    _, _, right = np.linalg.svd(rows.astype(np.float64), full_matrices=False)
    np.testing.assert_allclose(np.abs(right[:8] @ basis), np.eye(8), atol=1e-4)  # the same directions, in order
    largest = basis[np.argmax(np.abs(basis), axis=0), np.arange(8)]
    assert (largest > 0).all()


def test_the_routing_basis_of_more_dimensions_than_rows_and_of_narrow_queries() -> None:
    rng = np.random.default_rng(1)
    wide = (rng.standard_normal((50, 8)) @ rng.standard_normal((8, 120))).astype(np.float32)  # rank 8, 120-d
    basis = routing_basis(iter([wide[:20], wide[20:]]), len(wide), 8)
    assert basis.shape == (120, 8)
    np.testing.assert_allclose(np.linalg.norm(wide @ basis, axis=1), np.linalg.norm(wide, axis=1), rtol=1e-3)
    seen: list[int] = []
    assert routing_basis(_blocks(wide[:, :6], 10, seen), len(wide), 8) is None and seen == [10]  # one block read


def test_distinct_rows_are_a_uniform_sorted_sample_without_repeats() -> None:
    rng = np.random.default_rng(2)
    for n, size in ((10, 3), (1_000, 900), (1_000_000, 100_000), (1_000_000, 7)):
        rows = distinct_rows(n, size, rng)
        assert len(rows) == size and np.all(np.diff(rows) > 0) and rows[0] >= 0 and rows[-1] < n
    counts = np.bincount(np.concatenate([distinct_rows(40, 2, rng) for _ in range(20_000)]), minlength=40)
    assert counts.min() > 850 and counts.max() < 1150  # 1,000 expected per row


def test_held_out_rows_avoid_the_training_rows_uniformly() -> None:
    rng = np.random.default_rng(3)
    train = np.array([0, 2, 3, 7])
    counts = np.zeros(10, np.int64)
    for _ in range(6_000):
        held = held_out_rows(10, train, 2, rng)
        assert len(np.unique(held)) == 2 and np.all(np.diff(held) > 0)
        counts[held] += 1
    assert counts[train].sum() == 0 and counts.sum() == 12_000
    assert counts[[1, 4, 5, 6, 8, 9]].min() > 1_850  # 2,000 expected for each row outside train
    assert held_out_rows(10, train, 50, rng).tolist() == [1, 4, 5, 6, 8, 9]  # no more than there are
    np.testing.assert_array_equal(held_out_rows(5, np.arange(5), 3, rng) < 5, True)  # every row trained: any


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_released_pages_stop_counting_and_the_values_stay(tmp_path: Path) -> None:
    def resident_file_bytes() -> int:
        status = Path("/proc/self/status").read_text().splitlines()
        return int(next(line for line in status if line.startswith("RssFile")).split()[1]) * 1024

    path = tmp_path / "rows.bin"
    np.arange(4_000_000, dtype=np.int64).tofile(path)  # 32 MB
    view = np.asarray(np.memmap(path, dtype=np.int64, mode="r"))[1:]
    before = resident_file_bytes()
    total = int(view.sum())
    read = resident_file_bytes()
    release_mapped([view])
    assert read - before > 24 << 20 and resident_file_bytes() - before < 4 << 20
    assert int(view.sum()) == total == 4_000_000 * 3_999_999 // 2
    copy_on_write = np.memmap(path, dtype=np.int64, mode="c")
    copy_on_write[0] = 7
    release_mapped([copy_on_write, np.zeros(3)])  # a private change is kept; arrays in memory are left alone
    assert copy_on_write[0] == 7
