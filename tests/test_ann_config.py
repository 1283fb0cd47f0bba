"""The automatic cell count of ``AnnConfig``: sqrt(n) cells up to 262,144 rows, then cells of about 512 rows as long
as the k-means sample trains them, never cells under 32 rows."""

from __future__ import annotations

import math

import pytest

from adaptemb.ann.config import CELL_ROWS, TRAINING_ROWS, AnnConfig, auto_cells


@pytest.mark.parametrize(("rows", "cells"), [(8_000, 64), (198_000, 512), (250_000, 512), (990_000, 2048),
                                             (1_000_000, 2048), (4_000_000, 2048), (16_000_000, 4096)])
def test_auto_cells_by_row_count_with_the_default_sample(rows: int, cells: int) -> None:
    assert AnnConfig().resolved(rows, 256).cells == cells


def test_cells_hold_about_cell_rows_once_sqrt_n_cells_would_hold_more() -> None:
    for rows in (1_000_000, 2_000_000, 4_000_000):
        cells = auto_cells(rows)  # the whole set is the sample: nothing caps the count
        assert CELL_ROWS / 1.5 <= rows / cells <= CELL_ROWS * 1.5
        assert cells > 2 ** round(math.log2(math.sqrt(rows)))  # more than the sqrt(n) rule's


def test_a_small_sample_caps_the_cells_at_what_it_can_train() -> None:
    assert auto_cells(2_000_000, sample=50_000) == 1024  # sqrt(n): 1,414 -> 1,024; 50k / 39 -> 1,024
    assert auto_cells(990_000, sample=60_000) == 1024  # 60k / 39 = 1,538 trains 1,024 cells, not 2,048
    assert auto_cells(990_000, sample=60_000) * TRAINING_ROWS <= 60_000
    assert auto_cells(2_000_000, sample=20_000) == 1024  # never below the sqrt(n) rule


def test_tiny_sets_keep_32_rows_a_cell() -> None:
    assert auto_cells(100) == 3 and auto_cells(31) == 1 and auto_cells(1) == 1
    assert AnnConfig(cells=10).resolved(5, 8).cells == 5
