"""The automatic settings of ``AnnConfig``: sqrt(n) cells rounded to a power of two, never cells under 32 rows; a
k-means sample of 256 rows a cell."""

from __future__ import annotations

import numpy as np
import pytest

from adaptemb.ann.build import sample_rows
from adaptemb.ann.config import AnnConfig, auto_cells
from adaptemb.errors import InvalidConfigError


@pytest.mark.parametrize(("rows", "cells"), [(8_000, 64), (198_000, 512), (250_000, 512), (990_000, 1024),
                                             (16_000_000, 4096)])
def test_auto_cells_are_sqrt_n_rounded_to_a_power_of_two(rows: int, cells: int) -> None:
    assert AnnConfig().resolved(rows, 256).cells == cells == auto_cells(rows)


def test_tiny_sets_keep_32_rows_a_cell_and_a_chosen_count_is_capped_by_the_rows() -> None:
    assert auto_cells(100) == 3 and auto_cells(31) == 1 and auto_cells(1) == 1
    assert AnnConfig(cells=10).resolved(5, 8).cells == 5


@pytest.mark.parametrize(("rows", "sample"), [(8_000, 8_000), (250_000, 131_072), (990_000, 262_144),
                                              (16_000_000, 1_048_576)])
def test_the_auto_sample_gives_each_cell_256_rows_at_most_every_row(rows: int, sample: int) -> None:
    assert AnnConfig().resolved(rows, 256).sample == sample == AnnConfig().sample_size(rows)
    train, basis = sample_rows(rows, AnnConfig(), np.random.default_rng(0))
    assert len(train) == sample and len(np.unique(train)) == sample and train.max() < rows
    assert len(basis) == min(4096, sample)


def test_a_chosen_sample_is_kept_capped_by_the_rows_and_checked() -> None:
    assert AnnConfig(sample=5_000).resolved(990_000, 256).sample == 5_000
    assert AnnConfig(sample=5_000).resolved(300, 8).sample == 300
    for bad in (0, -3, True, "most"):
        with pytest.raises((ValueError, InvalidConfigError), match="sample"):
            AnnConfig(sample=bad)
