"""``AnnIndex``: approximate search over one compressor's codes, answering the calls an exact index answers.

``search(queries, k)`` routes each query to its ``nprobe`` nearest cells, scans them with the kind's scorer (every
probed cell once per batch of queries), and returns (scores, ids) as ``CompressedIndex.search`` does: the scores
are the exact index's for the documents found. ``recall=`` picks ``nprobe`` from the calibration, ``filter=``
restricts the answer to some ids, ``add`` / ``remove`` / ``compact`` change the rows, ``tune`` recalibrates on
the caller's queries, and ``save`` writes one safetensors file that ``adaptemb.load_index`` opens memory-mapped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from adaptemb.ann.calibration import Calibration, check_recall, recall_curves, routing_ranks
from adaptemb.ann.cells import Router
from adaptemb.ann.config import AnnConfig
from adaptemb.ann.files import save_ann
from adaptemb.ann.plan import ProbePlan
from adaptemb.ann.rerank import RerankStore
from adaptemb.ann.scorers import CellScorer
from adaptemb.ann.store import CellStore, Segment, as_ids, keep_mask
from adaptemb.ann.threads import ann_threads
from adaptemb.codes import Codes
from adaptemb.errors import InvalidConfigError
from adaptemb.index.postings import worker_count
from adaptemb.inputs import InputKind, InputSpec
from adaptemb.ranking import TopK

EXACT_CHUNK_ROWS = 65536
"""Rows of one pseudo-cell when a small filter is searched exactly."""
EXACT_WINDOW_BYTES = 4 << 20
"""Bytes of codes (consecutive cells, at least one) a calibration's exact scan reads before it releases them."""


class AnnIndex:
    """Approximate search over one compressor's codes (see the module docstring)."""

    def __init__(self, compressor: Any, store: CellStore, router: Router, scorer: CellScorer, *, config: AnnConfig,
                 query_kind: str, budget: int | None, calibration: Calibration | None = None,
                 rerank: RerankStore | None = None) -> None:
        self.compressor, self.store, self.router, self.scorer = compressor, store, router, scorer
        self.config, self.query_kind, self.budget = config, query_kind, budget
        self.calibration = calibration
        self.rerank = rerank

    # -- what it is ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.store)

    @property
    def cells(self) -> int:
        return self.router.cells

    @property
    def doc_kind(self) -> str:
        return self.store.main.codes.kind

    @property
    def backend(self) -> str:
        """The engine that answers searches, e.g. ``"ann:numba-packed-cells"``."""
        return f"ann:{self.scorer.name}" + ("+rerank" if self.rerank is not None else "")

    @property
    def nbytes(self) -> int:
        """Bytes of the index: codes, ids, cell offsets, tombstones, centroids and routing basis, calibration."""
        calibration = 0 if self.calibration is None else 2 * self.calibration.recall.nbytes
        return self.store.nbytes + self.router.nbytes + calibration

    @property
    def bytes_per_vector(self) -> float:
        """``nbytes`` per live document: the codes plus the index's own overhead."""
        return self.nbytes / max(len(self), 1)

    def __repr__(self) -> str:
        return (f"AnnIndex(method={self.compressor.name!r}, n={len(self)}, cells={self.cells}, "
                f"backend={self.backend!r}, bytes_per_vector={self.bytes_per_vector:.1f})")

    # -- searching -----------------------------------------------------------------------------

    def encode_queries(self, queries: Any, *, input_kind: InputKind = "float", input_scale: Any = None,
                       input_offset: Any = None, input_dim: int | None = None) -> Codes:
        """Raw query embeddings as this index's query codes (as ``CompressedIndex.encode_queries``)."""
        inputs = {"input_kind": input_kind, "input_scale": input_scale, "input_offset": input_offset, "input_dim": input_dim}
        if InputSpec.of(**inputs).is_float:
            return self.compressor.encode_queries(queries, k=self.budget)
        return self.compressor.encode_queries(queries, k=self.budget, **inputs)

    def search(self, queries: Any, top_k: int = 10, *, nprobe: int | None = None, recall: float | None = None,
               filter: Any = None, input_kind: InputKind = "float", input_scale: Any = None,
               input_offset: Any = None, input_dim: int | None = None) -> TopK:
        """The ``top_k`` best documents of each query found in its probed cells: (scores, ids), each
        (n_queries, top_k), best first, as the exact index returns them.

        ``queries``: raw embeddings or query codes. ``nprobe``: cells to probe; ``recall``: the calibrated recall to
        reach instead (in (0, 1]); neither: ``AnnConfig.nprobe``, else the calibrated count for ``AnnConfig.recall``.
        ``filter``: the ids the answer may hold (an allow-list; small ones are searched exactly).
        """
        top_k = _checked_top_k(top_k, len(self))
        probes = self._probes(nprobe, recall)
        spec = InputSpec.of(input_kind=input_kind, input_scale=input_scale, input_offset=input_offset,
                            input_dim=input_dim)
        codes = self._query_codes(queries, spec, input_kind, input_scale, input_offset, input_dim)
        raw = None if self.rerank is None else self._raw_queries(queries, spec)
        width = top_k if self.rerank is None else max(top_k, self.config.shortlist)
        rows = None if filter is None else self._filter_rows(filter)
        with ann_threads(worker_count(self.config.threads)):
            scores, ids = self._search_codes(codes, min(width, len(self)), probes, rows)
        if raw is not None:
            scores, ids = self.rerank.rescore(raw, ids, top_k)
        return scores[:, :top_k], ids[:, :top_k]

    def _probes(self, nprobe: int | None, recall: float | None) -> int:
        if nprobe is not None and recall is not None:
            raise InvalidConfigError("give nprobe or recall, not both")
        if nprobe is not None:
            if isinstance(nprobe, bool) or not isinstance(nprobe, (int, np.integer)) or nprobe < 1:
                raise InvalidConfigError(f"nprobe must be an integer >= 1; got {nprobe!r}")
            return min(int(nprobe), self.cells)
        if recall is None and self.config.nprobe is not None:
            return min(self.config.nprobe, self.cells)
        target = check_recall(self.config.recall if recall is None else recall)
        if self.calibration is None:
            raise InvalidConfigError("this index has no calibration (built with calibration_queries=0, or its compressor "
                                     "cannot make queries from codes): call tune(queries) first, or pass nprobe=")
        return self.calibration.nprobe_for(target)

    def _query_codes(self, queries: Any, spec: InputSpec, *inputs: Any) -> Codes:
        if isinstance(queries, Codes):
            if not spec.is_float:
                raise InvalidConfigError("input_kind describes raw query embeddings; these are query codes already")
            if queries.kind != self.query_kind or queries.dim != self.store.main.codes.dim:
                raise InvalidConfigError(f"this index takes {self.query_kind} query codes of dim "
                                         f"{self.store.main.codes.dim}; got {queries.kind} codes of dim {queries.dim}")
            return queries
        kind, scale, offset, dim = inputs
        return self.encode_queries(queries, input_kind=kind, input_scale=scale, input_offset=offset, input_dim=dim)

    def _raw_queries(self, queries: Any, spec: InputSpec) -> np.ndarray:
        if isinstance(queries, Codes):
            raise InvalidConfigError("this index reranks with the raw queries: pass query embeddings, not query codes")
        given = spec.read(queries, name="queries", dim=self.compressor.dim)
        raw = given.to_float() if given is not None else queries
        return np.asarray(raw.detach().cpu().numpy() if hasattr(raw, "detach") else raw, dtype=np.float32)

    def _search_codes(self, codes: Codes, k: int, probes: int, rows: list[np.ndarray] | None) -> TopK:
        """Top-``k`` of query codes at ``probes`` cells; ``rows``: the allowed rows per segment (a filter)."""
        allowed = len(self) if rows is None else sum(len(r) for r in rows)
        if rows is not None and allowed <= len(self) * math.sqrt(probes / self.cells):
            return self._exact_rows(codes, k, rows)
        probes = min(self.cells, math.ceil(probes * len(self) / max(allowed, 1)))
        parts = [self._search_batch(codes[s : s + self.config.query_batch], k, probes, rows)
                 for s in range(0, len(codes), self.config.query_batch)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def _search_batch(self, codes: Codes, k: int, probes: int, rows: list[np.ndarray] | None) -> TopK:
        vectors = self.scorer.query_vectors(codes)
        scores, ids = self._scan(codes, self.router.route(vectors, probes), k, rows)
        short = np.flatnonzero((ids < 0).any(axis=1))
        while len(short) and probes < self.cells:  # a query saw fewer than k rows: probe more cells
            probes = min(self.cells, 2 * probes)
            scores[short], ids[short] = self._scan(codes[short], self.router.route(vectors[short], probes), k, rows)
            short = short[(ids[short] < 0).any(axis=1)]
        return scores, ids

    def _scan(self, codes: Codes, probes: np.ndarray, k: int, rows: list[np.ndarray] | None) -> TopK:
        found = []
        for number, segment in enumerate(self.store.segments):
            keep = keep_mask(segment, None if rows is None else rows[number])
            plan = ProbePlan.of(probes, np.diff(segment.offsets))
            found.append(self.scorer.search(segment.codes, segment.ids, segment.offsets, codes, plan, k, keep=keep,
                                            threads=self.config.threads))
        return merge_found(found, k)

    def _exact_rows(self, codes: Codes, k: int, rows: list[np.ndarray]) -> TopK:
        """Top-``k`` over exactly the given rows of each segment: the rows gathered into pseudo-cells, all probed."""
        found = []
        for number, segment in enumerate(self.store.segments):
            chosen = np.sort(rows[number])
            if not len(chosen):
                continue
            offsets = np.append(np.arange(0, len(chosen), EXACT_CHUNK_ROWS), len(chosen)).astype(np.int64)
            probes = np.broadcast_to(np.arange(len(offsets) - 1, dtype=np.int32), (len(codes), len(offsets) - 1))
            plan = ProbePlan.of(np.ascontiguousarray(probes), np.diff(offsets))
            found.append(self.scorer.search(segment.codes[chosen], segment.ids[chosen], offsets, codes, plan, k,
                                            keep=None, threads=self.config.threads))
        return merge_found(found, k)

    def _filter_rows(self, filter: Any) -> list[np.ndarray]:
        segment, row = self.store.locate(as_ids(filter, "filter"), "filter")
        return [np.unique(row[segment == number]) for number in range(len(self.store.segments))]

    # -- calibration ---------------------------------------------------------------------------

    def tune(self, queries: Any, top_k: int | None = None, *, input_kind: InputKind = "float", input_scale: Any = None,
             input_offset: Any = None, input_dim: int | None = None) -> Calibration:
        """Recalibrate ``recall=`` on the caller's own ``queries`` (raw embeddings or query codes): one exact search
        of them gives the probes every recall level needs. Returns (and keeps) the new calibration."""
        spec = InputSpec.of(input_kind=input_kind, input_scale=input_scale, input_offset=input_offset,
                            input_dim=input_dim)
        codes = self._query_codes(queries, spec, input_kind, input_scale, input_offset, input_dim)
        if len(codes) == 0:
            raise InvalidConfigError("tune() needs at least one query")
        k = _checked_top_k(self.config.top_k if top_k is None else top_k, len(self))
        with ann_threads(worker_count(self.config.threads)):
            self.calibration = self.calibrate(codes, k, source=f"tune() on {len(codes):,} queries")
        return self.calibration

    def calibrate(self, codes: Codes, k: int, *, source: str, exclude: np.ndarray | None = None,
                  cells_of: Callable[[np.ndarray], np.ndarray] | None = None) -> Calibration:
        """The calibration of query ``codes`` at recall@``k``; ``exclude`` (one caller id per query, or -1) drops a
        query's own document from its exact top-k. ``cells_of``: the cell of each caller id of an (queries, k)
        array, -1 kept (default: looked up in the store, which builds an id lookup of every row)."""
        cells_of = self._cells_of if cells_of is None else cells_of
        extra = 0 if exclude is None else 1
        ranks = []
        for start in range(0, len(codes), self.config.query_batch):
            batch = codes[start : start + self.config.query_batch]
            _, ids = self._exact_search(batch, min(k + extra, len(self)))
            if exclude is not None:
                ids = _drop_own(ids, exclude[start : start + len(batch)], k)
            order = self.router.route(self.scorer.query_vectors(batch), self.cells)
            ranks.append(routing_ranks(order, cells_of(ids)))
        mean, lower = recall_curves(np.concatenate(ranks), self.cells)
        return Calibration(mean, lower, k, len(codes), source)

    def _exact_search(self, codes: Codes, k: int) -> TopK:
        """Top-``k`` of query codes over every row, a window of cells at a time (``EXACT_WINDOW_BYTES`` of codes), the
        window's memory-mapped pages released after its scan: an index opened from its file, or built from shards,
        holds one window of its rows in memory during a calibration, not all of them."""
        sizes = sum(np.diff(segment.offsets) for segment in self.store.segments)
        row_bytes = max(1, self.store.main.codes.row_nbytes // max(len(self.store.main), 1))
        window = np.cumsum(sizes * row_bytes) // EXACT_WINDOW_BYTES
        found = []
        for number in np.unique(window):
            cells = np.flatnonzero(window == number).astype(np.int32)
            found.append(self._scan(codes, np.ascontiguousarray(np.broadcast_to(cells, (len(codes), len(cells)))), k, None))
            self.store.release_pages()
        return merge_found(found, k)

    def _cells_of(self, ids: np.ndarray) -> np.ndarray:
        """The cell of each caller id in ``ids`` (queries, k); -1 stays -1."""
        flat = ids.ravel()
        cells = np.full(len(flat), -1, np.int64)
        known = flat >= 0
        segment, row = self.store.locate(flat[known], "results")
        found = np.empty(len(row), np.int64)
        for number, part in enumerate(self.store.segments):
            mine = segment == number
            found[mine] = np.searchsorted(part.offsets, row[mine], side="right") - 1
        cells[known] = found
        return cells.reshape(ids.shape)

    # -- changing the rows ---------------------------------------------------------------------

    def add(self, codes: Codes, ids: Any = None) -> np.ndarray:
        """Add documents (codes of this compressor, the kind and layout of the indexed ones) to the cells of their
        nearest centroids; ``ids`` default to the next unused ones. Returns the ids."""
        self._check_codes(codes, "add()")
        ids = self.store.next_ids(len(codes)) if ids is None else as_ids(ids, "ids")
        if len(ids) != len(codes):
            raise InvalidConfigError(f"add() got {len(codes)} rows and {len(ids)} ids")
        cells = self.router.assign(codes, self.scorer.doc_vectors)
        self.store.add(codes, cells, ids)
        return ids

    def remove(self, ids: Any) -> None:
        """Remove documents by id (tombstones: their rows are skipped until ``compact()``)."""
        self.store.remove(as_ids(ids, "remove()"))

    def compact(self) -> None:
        """Rewrite the rows as one segment in cell order, without the removed ones."""
        self.store.compact()

    def rebuilt(self, codes: Codes, ids: Any = None) -> AnnIndex:
        """A new index over ``codes`` (ids default 0..n-1) with this index's cells, scorer and settings (no
        calibration: ``tune`` it, or build anew to calibrate on its rows)."""
        self._check_codes(codes, "rebuilt()")
        ids = np.arange(len(codes)) if ids is None else as_ids(ids, "ids")
        if len(ids) != len(codes) or len(np.unique(ids)) != len(ids):
            raise InvalidConfigError("rebuilt() needs one unique id per row")
        main = Segment.of(codes, self.router.assign(codes, self.scorer.doc_vectors), self.cells, ids)
        return AnnIndex(self.compressor, CellStore(main), self.router, self.scorer, config=self.config,
                        query_kind=self.query_kind, budget=self.budget, rerank=self.rerank)

    def _check_codes(self, codes: Codes, what: str) -> None:
        indexed = self.store.main.codes
        if not isinstance(codes, Codes) or codes.kind != indexed.kind or codes.dim != indexed.dim:
            got = f"{codes.kind} codes of dim {codes.dim}" if isinstance(codes, Codes) else type(codes).__name__
            raise InvalidConfigError(f"{what} takes {indexed.kind} codes of dim {indexed.dim} from this index's "
                                     f"compressor; got {got}")
        try:
            type(indexed).concat([indexed[:0], codes[:0]])
        except ValueError as err:
            raise InvalidConfigError(f"{what}: these codes do not match the indexed ones ({err})") from None

    def save(self, path: str | Path) -> Path:
        """Write the index to one safetensors file, atomically (``adaptemb.load_index`` opens it memory-mapped);
        removed rows are left out."""
        return save_ann(self, path)


def merge_found(found: list[TopK], k: int) -> TopK:
    """Each query's ``k`` best of several (scores, ids) lists, score descending then id ascending; (-inf, -1) last."""
    if len(found) == 1:
        return found[0]
    scores = np.concatenate([f[0] for f in found], axis=1)
    ids = np.concatenate([f[1] for f in found], axis=1)
    order = np.lexsort((np.where(ids < 0, np.iinfo(np.int64).max, ids), -scores), axis=1)[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)


def _drop_own(ids: np.ndarray, own: np.ndarray, k: int) -> np.ndarray:
    """Each row of ``ids`` (queries, k + 1) without the query's own id (else without its last), first ``k``."""
    keep = ids != own[:, None]
    keep[keep.sum(axis=1) > k, -1] = False
    return ids[keep].reshape(len(ids), k)


def _checked_top_k(top_k: Any, n: int) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise InvalidConfigError(f"top_k must be an integer >= 1; got {top_k!r}")
    return min(int(top_k), n)
