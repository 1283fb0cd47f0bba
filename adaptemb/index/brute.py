"""Brute force through any score function: the fallback for code kinds no registered backend serves."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from adaptemb import ranking
from adaptemb.codes import Codes
from adaptemb.index.base import SearchResult, rows_per_block


class ScoreIndex:
    """Brute-force search through any score function, e.g. ``Compressor.score``, block by block.

    The generic path for code kinds (or custom scoring) that no specialised backend covers.
    """

    backend = "score-function"
    brute_force = True

    def __init__(self, docs: Codes, score: Callable[[Codes, Codes], np.ndarray], *, query_batch: int = 512) -> None:
        self.docs, self.score, self.query_batch = docs, score, query_batch

    def __len__(self) -> int:
        return len(self.docs)

    def search(self, queries: Codes, top_k: int = 10) -> SearchResult:
        """The ``top_k`` best documents for each query under ``score``."""
        top_k = min(top_k, len(self.docs))
        block = rows_per_block(4 * self.query_batch, cap=len(self.docs))
        out_scores, out_ids = [], []
        for qs in range(0, len(queries), self.query_batch):
            q = queries[qs : qs + self.query_batch]
            s, i = ranking.blockwise_top_k(
                lambda start, stop, q=q: np.asarray(self.score(q, self.docs[start:stop]), dtype=np.float32),
                top_k, n=len(self.docs), block_rows=block)
            out_scores.append(s), out_ids.append(i)
        return np.concatenate(out_scores), np.concatenate(out_ids)
