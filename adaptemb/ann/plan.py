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
        """The plan of ``probes`` (queries, nprobe) cell numbers (-1: none), skipping empty cells. Tasks follow the
        cell numbers: neighbouring cells (numbered together by the clustering) share many of their queries, whose
        weights then stay in the cache from one task to the next."""
        queries = np.repeat(np.arange(len(probes), dtype=np.int64), probes.shape[1])  # ascending
        cells = probes.ravel()
        used = (cells >= 0) & (sizes[np.maximum(cells, 0)] > 0)
        cells, queries = cells[used], queries[used]
        # a stable sort by cell keeps each cell's queries ascending (a radix sort on 16-bit cell numbers)
        order = np.argsort(cells.astype(np.uint16) if len(sizes) <= 2**16 else cells, kind="stable")
        counts = np.bincount(cells, minlength=len(sizes))
        task_cells = np.flatnonzero(counts)
        qptr = np.concatenate([[0], np.cumsum(counts[task_cells])]).astype(np.int64)
        return cls(task_cells.astype(np.int64), qptr, queries[order])

    def shares(self, offsets: np.ndarray, parts: int) -> np.ndarray:
        """Task bounds (parts + 1,) splitting the tasks into ``parts`` runs of consecutive tasks with about equal
        work (rows x queries), one run per worker."""
        work = np.cumsum(np.diff(offsets)[self.cells] * np.diff(self.qptr) + 1)
        if not len(work):
            return np.zeros(parts + 1, np.int64)
        cuts = np.searchsorted(work, work[-1] * np.arange(1, parts) / parts)
        return np.concatenate([[0], cuts, [len(work)]]).astype(np.int64)

    @property
    def pairs(self) -> int:
        return int(self.qptr[-1])

    def max_rows(self, offsets: np.ndarray) -> int:
        """The most rows one task scans."""
        return int(np.diff(offsets)[self.cells].max(initial=0))

    def scanned(self, offsets: np.ndarray) -> int:
        """(query, row) pairs the plan scores."""
        return int((np.diff(offsets)[self.cells] * np.diff(self.qptr)).sum())
