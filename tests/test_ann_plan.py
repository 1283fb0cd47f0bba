"""``ProbePlan``: a batch's probes turned around into one task per probed cell, with that cell's queries."""

from __future__ import annotations

import numpy as np

from adaptemb.ann.plan import ProbePlan


def test_each_probed_cell_is_one_task_listing_its_queries_ascending() -> None:
    probes = np.array([[2, 0], [0, -1], [3, 2]], np.int32)  # query 1 probes one cell; cell 3 is empty
    sizes = np.array([5, 7, 4, 0])
    plan = ProbePlan.of(probes, sizes)
    assert plan.cells.tolist() == [0, 2]
    assert plan.qptr.tolist() == [0, 2, 4]
    assert plan.queries.tolist() == [0, 1, 0, 2]
    assert plan.pairs == 4
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    assert plan.scanned(offsets) == 2 * 5 + 2 * 4
    assert plan.max_rows(offsets) == 5


def test_plan_matches_a_sort_of_every_query_cell_pair() -> None:
    rng = np.random.default_rng(0)
    for cells in (7, 300, 70_000):  # the last above 2**16 cell numbers
        rows = [rng.choice(cells + 1, 6, replace=False) - 1 for _ in range(50)]  # as routed: no cell twice
        probes = np.stack(rows).astype(np.int32)
        sizes = rng.integers(0, 3, size=cells)
        plan = ProbePlan.of(probes, sizes)
        pairs = sorted({(int(c), q) for q, row in enumerate(probes) for c in row if c >= 0 and sizes[c] > 0})
        assert plan.cells.tolist() == sorted({c for c, _ in pairs})
        listed = [(int(c), int(q)) for t, c in enumerate(plan.cells)
                  for q in plan.queries[plan.qptr[t] : plan.qptr[t + 1]]]
        assert listed == pairs
        assert plan.cells.dtype == plan.qptr.dtype == plan.queries.dtype == np.int64


def test_a_batch_with_no_probed_rows_has_no_tasks() -> None:
    plan = ProbePlan.of(np.full((3, 2), -1, np.int32), np.array([4, 4]))
    assert len(plan.cells) == 0 and plan.qptr.tolist() == [0] and len(plan.queries) == 0
    assert plan.shares(np.array([0, 4, 8]), 2).tolist() == [0, 0, 0]
