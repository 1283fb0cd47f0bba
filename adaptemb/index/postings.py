"""Blocked posting lists and a compiled (numba) sparse·sparse top-k kernel for CPU search.

Layout. Documents are cut into blocks of ``BLOCK_ROWS`` rows; inside a block, one posting list per
dimension holds the block-local ids (uint16) and values (float32) of the documents with that dimension
active. A query with ``k`` active dimensions visits its ``k`` lists in every block, scatter-adds into a
block-sized score buffer (256 KiB, so it stays in the core's L2 cache), then scans the buffer once to
keep a running exact top-k and clear it. Queries are spread over numba's threads (``threads`` caps them).

Ties go to the lower document id, as everywhere in ``adaptemb.index``. Scores of documents that share
no dimension with the query are 0 and compete like any other score, so results are exact for values
of any sign.

numba is used (rather than scipy alone) because the scatter-add and the top-k must run in one pass over
cache-resident memory to beat dense BLAS search; ``scipy.sparse`` has no fused kernel for that.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

BLOCK_ROWS = 65536  # block-local ids fit uint16; a float32 score buffer of a block is 256 KiB


def numba_available() -> bool:
    """Whether the compiled kernel can be used (numba importable)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class BlockedPostings:
    """Posting lists per (document block, dimension): list ``b * dim + j`` is ``ids/values[indptr[i]:indptr[i+1]]``."""

    indptr: np.ndarray  # (n_blocks * dim + 1,) int64
    ids: np.ndarray  # (nnz,) uint16, block-local document ids, ascending within a list
    values: np.ndarray  # (nnz,) float32
    n: int
    dim: int

    @classmethod
    def from_csr(cls, docs: sp.csr_matrix) -> BlockedPostings:
        """Build from a (n, dim) CSR matrix of document codes, one scipy transpose per block."""
        n, dim = docs.shape
        indptrs, ids, values, total = [np.zeros(1, np.int64)], [], [], 0
        for start in range(0, n, BLOCK_ROWS):
            block = docs[start : start + BLOCK_ROWS].T.tocsr()  # (dim, rows): counting-sort transpose
            indptrs.append(block.indptr[1:].astype(np.int64) + total)
            ids.append(block.indices.astype(np.uint16))
            values.append(block.data.astype(np.float32))
            total += block.nnz
        return cls(np.concatenate(indptrs), np.concatenate(ids), np.concatenate(values), n, dim)

    @property
    def nbytes(self) -> int:
        return int(self.indptr.nbytes + self.ids.nbytes + self.values.nbytes)


def search_postings(
    postings: BlockedPostings, queries: sp.csr_matrix, top_k: int, *, threads: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``top_k`` (scores, ids), best first, of CSR ``queries`` (b, dim) by dot product."""
    if not 1 <= top_k <= postings.n:
        raise ValueError(f"top_k must be between 1 and {postings.n}; got {top_k}")
    kernel = _kernel()
    b = queries.shape[0]
    scores = np.empty((b, top_k), np.float32)
    ids = np.empty((b, top_k), np.int64)
    q_indptr = queries.indptr.astype(np.int64)
    q_indices = queries.indices.astype(np.int64)
    q_values = queries.data.astype(np.float32)
    parts = max(1, min(threads or os.cpu_count() or 1, b))
    kernel(q_indptr, q_indices, q_values, parts, postings.indptr, postings.ids, postings.values, postings.n,
           postings.dim, BLOCK_ROWS, top_k, scores, ids)
    return scores, ids


_KERNEL = None


def _kernel():
    """The compiled kernel: compiled on first use, then cached on disk by numba."""
    global _KERNEL
    if _KERNEL is None:
        import numba

        _KERNEL = numba.njit(parallel=True, cache=True)(_make_top_k_kernel(numba.prange))
    return _KERNEL


def _make_top_k_kernel(prange):
    def top_k_kernel(q_indptr, q_indices, q_values, parts, p_indptr, p_ids, p_values, n, dim, block_rows, k,
                     out_scores, out_ids):
        """Queries dealt round-robin to ``parts`` parallel workers, each with its own buffers.

        Per query and document block: scatter-add the query's lists into ``acc``, then scan ``acc`` (clearing
        it) into a running top-k kept in ``best_s``/``best_i``, whose weakest entry is ``worst``.
        The search for ``worst`` is written out in both branches on purpose: folding it into one place
        (a flag or a helper) measured 20-25 % slower on 1M rows (0.48-0.50 s vs 0.39 s per 512 queries).
        """
        nq = len(q_indptr) - 1
        n_blocks = (n + block_rows - 1) // block_rows
        for part in prange(parts):
            acc = np.zeros(block_rows, np.float32)
            best_s = np.empty(k, np.float32)
            best_i = np.empty(k, np.int64)
            for q in range(part, nq, parts):
                size, worst, threshold = 0, 0, -np.inf
                for block in range(n_blocks):
                    base = block * dim
                    for e in range(q_indptr[q], q_indptr[q + 1]):
                        j = q_indices[e]
                        w = q_values[e]
                        for p in range(p_indptr[base + j], p_indptr[base + j + 1]):
                            acc[p_ids[p]] += w * p_values[p]
                    rows = min(block_rows, n - block * block_rows)
                    offset = block * block_rows
                    for d in range(rows):
                        s = acc[d]
                        if size < k:
                            best_s[size] = s
                            best_i[size] = offset + d
                            size += 1
                            if size == k:
                                worst = 0
                                for u in range(1, k):
                                    if best_s[u] < best_s[worst] or (best_s[u] == best_s[worst] and best_i[u] > best_i[worst]):
                                        worst = u
                                threshold = best_s[worst]
                        elif s > threshold:  # ids ascend: an equal score never displaces a lower id
                            best_s[worst] = s
                            best_i[worst] = offset + d
                            worst = 0  # the next to displace: the lowest score, then the highest id
                            for u in range(1, k):
                                if best_s[u] < best_s[worst] or (best_s[u] == best_s[worst] and best_i[u] > best_i[worst]):
                                    worst = u
                            threshold = best_s[worst]
                        acc[d] = 0.0
                by_id = np.argsort(best_i)
                by_score = np.argsort(-best_s[by_id], kind="mergesort")  # stable: equal scores keep id order
                for u in range(k):
                    out_scores[q, u] = best_s[by_id[by_score[u]]]
                    out_ids[q, u] = best_i[by_id[by_score[u]]]

    return top_k_kernel
