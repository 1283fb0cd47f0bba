"""The automatic cell count of ``AnnConfig``: sqrt(n) rounded to a power of two, never cells under 32 rows."""

from __future__ import annotations

import pytest

from adaptemb.ann.config import AnnConfig, auto_cells


@pytest.mark.parametrize(("rows", "cells"), [(8_000, 64), (198_000, 512), (250_000, 512), (990_000, 1024),
                                             (16_000_000, 4096)])
def test_auto_cells_are_sqrt_n_rounded_to_a_power_of_two(rows: int, cells: int) -> None:
    assert AnnConfig().resolved(rows, 256).cells == cells == auto_cells(rows)


def test_tiny_sets_keep_32_rows_a_cell_and_a_chosen_count_is_capped_by_the_rows() -> None:
    assert auto_cells(100) == 3 and auto_cells(31) == 1 and auto_cells(1) == 1
    assert AnnConfig(cells=10).resolved(5, 8).cells == 5
