"""The scorer contract: what a code kind implements to get approximate search, and the built-in kinds' scorers.

An approximate index stores its documents cell by cell and asks a ``CellScorer`` for the best documents of each
query among the cells the query probes. ``CellScorer`` itself is the generic scorer: it scores some queries
against a contiguous run of documents with ``score_rows`` (by default the compressor's ``score``, the kind's own
similarity) and keeps each query's top-k. So every kind gets approximate search with nothing written for it; a
kind that wants more speed subclasses ``CellScorer``:

* override ``score_rows`` only (a faster block score), or
* override ``search`` (the whole batch over its ``ProbePlan``: each probed cell scanned once for all the queries
  that probe it, e.g. with a compiled kernel), as the built-in scanners of csr's packed codes and of sign codes do.

A third-party kind names its scorer on the index backend it registers (``ann_scorer = MyScorer`` on its
``adaptemb.Index`` subclass); ``scorer_for`` finds it there, then among the built-ins, else uses ``CellScorer``.
Routing uses ``query_vectors`` / ``doc_vectors``: the dense forms whose inner product is the score (up to a
per-query constant); ``stand_in_queries`` gives calibration queries made from documents when the compressor cannot
decode them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from adaptemb.ann.cells import dense_rows
from adaptemb.ann.plan import ProbePlan
from adaptemb.ann.scan_binary import scan_binary
from adaptemb.ann.scan_packed import scan_packed
from adaptemb.codes import Codes, DenseCodes
from adaptemb.ranking import TopK

ScoreFunction = Callable[[Codes, Codes], np.ndarray]
"""(query codes, document codes) -> (n_queries, n_docs) scores, e.g. ``Compressor.score``."""


class CellScorer:
    """Scores queries against an approximate index's cell-ordered documents (see the module docstring).

    ``pairs`` are the (query kind, document kind) pairs a subclass serves (empty: any, the generic scorer).
    """

    name: ClassVar[str] = "score-function"
    pairs: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __init__(self, score: ScoreFunction) -> None:
        self.score = score

    def score_rows(self, queries: Codes, docs: Codes) -> np.ndarray:
        """Scores (len(queries), len(docs)), float32, of query codes against a contiguous run of documents."""
        return np.asarray(self.score(queries, docs), dtype=np.float32)

    def search(self, docs: Codes, ids: np.ndarray, offsets: np.ndarray, queries: Codes, plan: ProbePlan, k: int, *,
               keep: np.ndarray | None, threads: int | None) -> TopK:
        """Top-``k`` (scores, caller ids) of each query over the rows (``keep``: the searchable ones) of the cells
        ``plan`` gives it; a query that sees fewer than ``k`` rows gets (-inf, -1) entries last."""
        chosen_q, chosen_s, chosen_p = [], [], []
        for task, cell in enumerate(plan.cells):
            start, stop = int(offsets[cell]), int(offsets[cell + 1])
            members = plan.queries[plan.qptr[task] : plan.qptr[task + 1]]
            scores = self.score_rows(queries[members], docs[start:stop])
            if keep is not None:
                scores[:, keep[start:stop] == 0] = -np.inf
            take = min(k, stop - start)
            best = np.argpartition(-scores, take - 1, axis=1)[:, :take]
            chosen_q.append(np.repeat(members, take))
            chosen_s.append(np.take_along_axis(scores, best, axis=1).ravel())
            chosen_p.append((best + start).ravel())
        return _per_query_top_k(chosen_q, chosen_s, chosen_p, ids, len(queries), k)

    def query_vectors(self, queries: Codes) -> np.ndarray:
        """The queries' dense form in the code space (float32 (n, qdim)), whose inner product with ``doc_vectors``
        is the score up to a per-query constant."""
        return np.asarray(queries.to_dense(), dtype=np.float32)

    def doc_vectors(self, docs: Codes) -> np.ndarray | sp.csr_matrix:
        """The documents' dense (or CSR) form in the code space."""
        return dense_rows(docs)

    def stand_in_queries(self, docs: Codes) -> Codes | None:
        """Query codes made from document codes (calibration and routing-space queries) for a compressor that cannot
        decode; None: none can be made (the documents themselves serve when queries are of the documents' kind)."""
        return None


def _per_query_top_k(queries: list[np.ndarray], scores: list[np.ndarray], positions: list[np.ndarray],
                     ids: np.ndarray, n: int, k: int) -> TopK:
    """Each query's ``k`` best of the candidates (query, score, stored position): score descending, then caller id."""
    out_s = np.full((n, k), -np.inf, np.float32)
    out_i = np.full((n, k), -1, np.int64)
    if not queries:
        return out_s, out_i
    q, s, p = np.concatenate(queries), np.concatenate(scores), np.concatenate(positions)
    found = np.isfinite(s) | (s == np.inf)
    q, s, caller = q[found], s[found], np.asarray(ids)[p[found]].astype(np.int64)
    order = np.lexsort((caller, -s, q))
    q, s, caller = q[order], s[order], caller[order]
    rank = np.arange(len(q)) - np.searchsorted(q, q)
    first = rank < k
    out_s[q[first], rank[first]] = s[first]
    out_i[q[first], rank[first]] = caller[first]
    return out_s, out_i


class PackedScorer(CellScorer):
    """csr's packed sparse codes with projected queries: the compiled scan of ``adaptemb.ann.scan_packed``."""

    name = "numba-packed-cells"
    pairs = (("projected", "packed_sparse"),)

    def search(self, docs: Codes, ids: np.ndarray, offsets: np.ndarray, queries: Codes, plan: ProbePlan, k: int, *,
               keep: np.ndarray | None, threads: int | None) -> TopK:
        if docs.value_bits == 16 or queries.document_weights:  # float16 values, per-document weights: the generic way
            return super().search(docs, ids, offsets, queries, plan, k, keep=keep, threads=threads)
        return scan_packed(docs, ids, offsets, queries, plan, k, keep=keep, parts=_parts(threads, plan))


class SignScorer(CellScorer):
    """Sign codes with dense float queries (and with sign queries, read as ±1 floats): ``adaptemb.ann.scan_binary``."""

    name = "numba-sign-cells"
    pairs = (("dense", "binary"), ("binary", "binary"))

    def search(self, docs: Codes, ids: np.ndarray, offsets: np.ndarray, queries: Codes, plan: ProbePlan, k: int, *,
               keep: np.ndarray | None, threads: int | None) -> TopK:
        dense = DenseCodes(self.query_vectors(queries))  # float queries as they are; sign queries as ±1 floats
        return scan_binary(docs, ids, offsets, dense, plan, k, keep=keep, parts=_parts(threads, plan))

    def stand_in_queries(self, docs: Codes) -> Codes | None:
        """The documents' ±1 vectors: dense queries in the space the sign bits were taken in."""
        return DenseCodes(np.asarray(docs.to_dense(), dtype=np.float32))


BUILTIN_SCORERS: dict[tuple[str, str], type[CellScorer]] = {
    pair: scorer for scorer in (PackedScorer, SignScorer) for pair in scorer.pairs}


def scorer_for(query_kind: str, doc_kind: str, score: ScoreFunction, backend: Any = None) -> CellScorer:
    """The scorer of (``query_kind``, ``doc_kind``): the ``ann_scorer`` the registered index ``backend`` names, else a
    built-in one, else the generic ``CellScorer`` over ``score``."""
    declared = getattr(backend, "ann_scorer", None)
    if declared is not None and not (isinstance(declared, type) and issubclass(declared, CellScorer)):
        raise TypeError(f"{getattr(backend, '__name__', backend)}.ann_scorer must be a CellScorer subclass; got {declared!r}")
    chosen = declared or BUILTIN_SCORERS.get((query_kind, doc_kind), CellScorer)
    return chosen(score)


def _parts(threads: int | None, plan: ProbePlan) -> int:
    """Workers for a scan: ``threads`` (default: numba's pool capped by ``adaptemb.set_threads``), at most the tasks."""
    from adaptemb.index.postings import worker_count

    return max(1, min(worker_count(threads), len(plan.cells)))
