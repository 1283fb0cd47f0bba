"""Top-k selection over score matrices, shared by search and evaluation."""

from __future__ import annotations

import numpy as np


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best columns of each row of ``scores`` (n, m), best first.

    Returns (scores, ids), each (n, k). Ties are broken by the lower column id, so results are
    deterministic. ``k`` must satisfy ``1 <= k <= m``.
    """
    n, m = scores.shape
    if not 1 <= k <= m:
        raise ValueError(f"k must be between 1 and {m}; got {k}")
    if k < m:
        candidates = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        # argpartition may cut a tie at the k-th score arbitrarily: widen to all columns tied with it
        kth = np.take_along_axis(scores, candidates, axis=1).min(axis=1, keepdims=True)
        if int((scores >= kth).sum()) != n * k:
            return _top_k_full_sort(scores, k)
    else:
        candidates = np.broadcast_to(np.arange(m), (n, m))
    cand_scores = np.take_along_axis(scores, candidates, axis=1)
    order = np.lexsort((candidates, -cand_scores), axis=1)
    ids = np.take_along_axis(candidates, order, axis=1)
    return np.take_along_axis(scores, ids, axis=1), ids.astype(np.int64)


def _top_k_full_sort(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, ids, axis=1), ids.astype(np.int64)
