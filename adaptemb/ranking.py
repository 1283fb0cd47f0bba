"""Top-k selection, one function per job, shared by the index backends, evaluation and datasets.

* ``top_k``: the best columns of a numpy score block;
* ``merge_top_k``: the best of candidate lists (per-block top-k lists, a shortlist rescored);
* ``blockwise_top_k``: ``top_k`` of documents scored block by block (bounded memory), merged once;
* ``threshold_top_k``: ``top_k`` of wide rows by skipping chunks that cannot reach the k-th score (sparse scores);
* ``torch_top_k``: top-k on a torch device, of one score matrix or of document blocks merged on the device;
* ``exact_top_k``: the corpus rows with the largest inner product per query (ground truth of a dense corpus);
* ``reciprocal_ranks``: each query's reciprocal rank of its best-scored relevant row, from a score block;
* ``neighbour_recall_at_k``: the overlap of each query's top-k with its exact top-k.

Every numpy helper breaks ties by the lower column (document) id, so results are deterministic; ``torch.topk``
leaves the order of ties to the device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

TopK = tuple[np.ndarray, np.ndarray]
"""(scores, ids), each (n, k), best first; ids int64."""


def top_k(scores: np.ndarray, k: int) -> TopK:
    """The ``k`` best columns of each row of ``scores`` (n, m), best first; ``1 <= k <= m``."""
    n, m = scores.shape
    if not 1 <= k <= m:
        raise ValueError(f"k must be between 1 and {m}; got {k}")
    if k < m:
        candidates = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        # argpartition may cut a tie at the k-th score arbitrarily: those rows take a stable full sort
        kth = np.take_along_axis(scores, candidates, axis=1).min(axis=1, keepdims=True)
        tied = np.flatnonzero((scores >= kth).sum(axis=1) != k)
        if len(tied):
            candidates = candidates.copy()
            candidates[tied] = np.argsort(-scores[tied], axis=1, kind="stable")[:, :k]
    else:
        candidates = np.broadcast_to(np.arange(m), (n, m))
    cand_scores = np.take_along_axis(scores, candidates, axis=1)
    order = np.lexsort((candidates, -cand_scores), axis=1)
    ids = np.take_along_axis(candidates, order, axis=1)
    return np.take_along_axis(scores, ids, axis=1), ids.astype(np.int64)


def merge_top_k(scores: Sequence[np.ndarray], ids: Sequence[np.ndarray], k: int) -> TopK:
    """The ``k`` best of each row's candidates, given as blocks of (n, c_i) scores and their ids (per-block top-k
    lists, a rescored shortlist): score descending, then id ascending."""
    all_scores, all_ids = np.concatenate(scores, axis=1), np.concatenate(ids, axis=1)
    order = np.lexsort((all_ids, -all_scores), axis=1)[:, :k]
    return np.take_along_axis(all_scores, order, axis=1), np.take_along_axis(all_ids, order, axis=1).astype(np.int64)


def blockwise_top_k(block_scores: Callable[[int, int], np.ndarray], k: int, *, n: int, block_rows: int) -> TopK:
    """``top_k`` over ``n`` documents scored in blocks of ``block_rows`` (``block_scores(start, stop)`` gives the
    (queries, stop - start) scores), each block's top-k merged once at the end (``merge_top_k``)."""
    scores, ids = [], []
    for start in range(0, n, block_rows):
        part = block_scores(start, min(start + block_rows, n))
        best, cols = top_k(part, min(k, part.shape[1]))
        scores.append(best), ids.append(cols + start)
    return merge_top_k(scores, ids, k)


def threshold_top_k(scores: np.ndarray, k: int, chunk: int = 1024) -> TopK:
    """``top_k`` of a wide (b, n) score matrix, much faster than a full partition (e.g. sparse codes' scores).

    Each row is cut into chunks of ``chunk`` columns. The k-th largest chunk maximum is a lower bound on
    the row's k-th best score, so only chunks whose maximum reaches it can hold top-k entries; only
    those few chunks are scanned and their candidates sorted exactly (ties: the lower column id).
    """
    b, n = scores.shape
    if n // chunk < 4 * k:
        return top_k(scores, k)
    whole = n // chunk * chunk
    blocks = scores[:, :whole].reshape(b, -1, chunk)
    maxima = blocks.max(axis=2)
    if whole < n:  # the ragged tail is one more (shorter) chunk
        maxima = np.concatenate([maxima, scores[:, whole:].max(axis=1, keepdims=True)], axis=1)
    bound = np.partition(maxima, maxima.shape[1] - k, axis=1)[:, maxima.shape[1] - k]
    rows, chunks = np.nonzero(maxima >= bound[:, None])
    if len(rows) * chunk > n * b // 8:  # flat rows (e.g. many zeros): the filter does not pay off
        return top_k(scores, k)
    full = chunks < blocks.shape[1]
    picked = blocks[rows[full], chunks[full]]  # (m, chunk)
    hit_r, hit_c = np.nonzero(picked >= bound[rows[full]][:, None])
    cand_rows = [rows[full][hit_r]]
    cand_cols = [chunks[full][hit_r] * chunk + hit_c]
    for r in rows[~full]:
        tail = np.flatnonzero(scores[r, whole:] >= bound[r]) + whole
        cand_rows.append(np.full(len(tail), r)), cand_cols.append(tail)
    cand_r, cand_c = np.concatenate(cand_rows), np.concatenate(cand_cols)
    cand = scores[cand_r, cand_c]
    order = np.lexsort((cand_c, -cand, cand_r))
    counts = np.bincount(cand_r, minlength=b)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pick = order[starts[:, None] + np.arange(k)]
    return cand[pick], cand_c[pick].astype(np.int64)


def torch_top_k(scores: torch.Tensor | Callable[[int, int], torch.Tensor], k: int, *, n: int = 0,
                block_rows: int = 0) -> TopK:
    """Top-``k`` on a torch device, returned as numpy (scores float32, ids int64).

    ``scores`` is a (queries, documents) tensor, or a function giving the scores of documents ``start:stop``
    for the ``n`` documents scored in blocks of ``block_rows`` (at least ``k``), merged on the device.
    """
    if isinstance(scores, torch.Tensor):
        values, ids = torch.topk(scores, k, dim=1)
        return values.float().cpu().numpy(), ids.cpu().numpy().astype(np.int64)
    block_rows = max(block_rows, k)
    best_values: torch.Tensor | None = None
    best_ids: torch.Tensor | None = None
    for start in range(0, n, block_rows):
        block = scores(start, min(start + block_rows, n))
        values, ids = torch.topk(block, min(k, block.shape[1]), dim=1)
        ids = ids + start
        if best_values is not None:
            values, pos = torch.topk(torch.cat([best_values, values], dim=1), k, dim=1)
            ids = torch.gather(torch.cat([best_ids, ids], dim=1), 1, pos)
        best_values, best_ids = values, ids
    assert best_values is not None and best_ids is not None, "no documents"
    return best_values.float().cpu().numpy(), best_ids.cpu().numpy().astype(np.int64)


def exact_top_k(queries: np.ndarray, corpus: np.ndarray, k: int, chunk: int = 16384) -> np.ndarray:
    """(q, k) corpus rows with the largest inner product per query, best first (ties: lower row first)."""
    k = min(k, len(corpus))
    best: TopK = (np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64))
    for start in range(0, len(corpus), chunk):
        block = queries @ corpus[start : start + chunk].T
        scores, rows = top_k(block, min(k, block.shape[1]))
        best = merge_top_k([best[0], scores], [best[1], rows + start], k)
    return best[1]


def reciprocal_ranks(scores: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
    """Per query (a row of ``scores`` (q, n)): 1 / (1 + the number of rows scored above its best-scored relevant
    row), 0 where ``relevant`` (q, n) bool marks none; a tie with the relevant row counts in its favour."""
    best = scores.masked_fill(~relevant, float("-inf")).max(dim=1, keepdim=True).values
    rank = 1 + (scores > best).sum(dim=1)
    return torch.where(relevant.any(dim=1), 1.0 / rank.to(torch.float64), torch.zeros((), dtype=torch.float64))


def neighbour_recall_at_k(ranked_ids: np.ndarray, exact_ids: np.ndarray, k: int = 10) -> np.ndarray:
    """Per-query overlap ``|top-k ∩ exact top-k| / k`` with the full-precision neighbours."""
    ids, exact = np.asarray(ranked_ids), np.asarray(exact_ids)
    if ids.shape[0] != exact.shape[0] or min(ids.shape[1], exact.shape[1]) < k:
        raise ValueError(f"need (q, >={k}) ids on both sides; got {ids.shape} and {exact.shape}")
    found = np.sort(ids[:, :k], axis=1)  # each distinct id counted once, as a set intersection counts it
    first = np.ones(found.shape, dtype=bool)
    first[:, 1:] = found[:, 1:] != found[:, :-1]
    hits = (found[:, :, None] == exact[:, None, :k]).any(axis=2) & first
    return hits.sum(axis=1) / k
