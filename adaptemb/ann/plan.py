"""Which queries scan which cells: a batch's probes turned around, so that each probed cell is scanned once for all
the queries of the batch that probe it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ProbePlan:
    """Task ``t`` scans cell ``cells[t]`` for the queries ``queries[qptr[t]:qptr[t + 1]]`` (ascending)."""

    cells: np.ndarray  # (tasks,) int64
    qptr: np.ndarray  # (tasks + 1,) int64
    queries: np.ndarray  # (pairs,) int64

    @classmethod
    def of(cls, probes: np.ndarray, sizes: np.ndarray) -> ProbePlan:
        """The plan of ``probes`` (queries, nprobe) cell numbers (-1: none), skipping empty cells; tasks are ordered
        by decreasing work (rows x queries) so that workers dealt them in turn get even shares."""
        queries = np.repeat(np.arange(len(probes), dtype=np.int64), probes.shape[1])
        cells = probes.ravel().astype(np.int64)
        used = (cells >= 0) & (sizes[np.maximum(cells, 0)] > 0)
        cells, queries = cells[used], queries[used]
        order = np.lexsort((queries, cells))
        cells, queries = cells[order], queries[order]
        task_cells, first, counts = np.unique(cells, return_index=True, return_counts=True)
        by_work = np.argsort(-(sizes[task_cells] * counts), kind="stable")
        starts = first[by_work]
        lengths = counts[by_work]
        qptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        gather = np.repeat(starts - qptr[:-1], lengths) + np.arange(qptr[-1])
        return cls(task_cells[by_work].astype(np.int64), qptr, queries[gather].astype(np.int64))

    @property
    def pairs(self) -> int:
        return int(self.qptr[-1])

    def max_rows(self, offsets: np.ndarray) -> int:
        """The most rows one task scans."""
        return int(np.diff(offsets)[self.cells].max(initial=0))

    def scanned(self, offsets: np.ndarray) -> int:
        """(query, row) pairs the plan scores."""
        return int((np.diff(offsets)[self.cells] * np.diff(self.qptr)).sum())
