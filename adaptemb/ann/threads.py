"""Thread counts of the approximate layer: faiss' OpenMP pool (k-means, assignment, routing) and torch's follow
adaptemb's own choice (``adaptemb.threads``), so that a build on a shared machine does not spin more threads
than there are free cores (measured here: two OpenMP threads against a busy second core ran k-means 8x slower
than one)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import faiss

from adaptemb.threads import compute_threads


@contextmanager
def ann_threads(count: int | None = None) -> Iterator[int]:
    """Run a block with torch's pool and faiss' OpenMP pool at ``count`` threads (default: ``choose_threads()``)."""
    with compute_threads(count) as chosen:
        previous = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(chosen)
        try:
            yield chosen
        finally:
            faiss.omp_set_num_threads(previous)
