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


def exact_top_k(queries: np.ndarray, corpus: np.ndarray, k: int, chunk: int = 16384) -> np.ndarray:
    """(q, k) corpus rows with the largest inner product per query, best first (ties: lower row first)."""
    k = min(k, len(corpus))
    best_scores = np.zeros((len(queries), 0), dtype=np.float32)
    best_rows = np.zeros((len(queries), 0), dtype=np.int64)
    for start in range(0, len(corpus), chunk):
        scores = queries @ corpus[start : start + chunk].T
        rows = np.broadcast_to(np.arange(start, start + scores.shape[1]), scores.shape)
        scores, rows = _best_k(scores, rows, k)
        best_scores, best_rows = _best_k(
            np.concatenate([best_scores, scores], axis=1), np.concatenate([best_rows, rows], axis=1), k
        )
    return best_rows


def _best_k(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best (score, row) pairs of each line, sorted; every tie at the cut is considered."""
    k = min(k, scores.shape[1])
    kth = np.partition(scores, scores.shape[1] - k, axis=1)[:, scores.shape[1] - k]
    line, col = np.nonzero(scores >= kth[:, None])
    score, row = scores[line, col], rows[line, col]
    order = np.lexsort((row, -score, line))
    line, score, row = line[order], score[order], row[order]
    rank = np.arange(len(line)) - np.searchsorted(line, line)
    keep = rank < k
    return score[keep].reshape(-1, k), row[keep].reshape(-1, k)
