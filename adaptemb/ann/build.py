"""Building an approximate index from a compressor and its document codes (``Compressor.index(codes, ann=...)``).

1. The routing space: ``basis``, the top principal directions of sample queries made from sample documents
   (``stand_in_queries``), rounded to float16 as stored.
2. The cells: spherical k-means (faiss, two levels) over the mapped rows of a seeded sample of documents
   (``AnnConfig.sample``: auto, 256 a cell).
3. Every document to its nearest centroid's cell; each cell's mean mapped row becomes its routing centroid (rounded
   to float16 as stored), and every document goes to the cell whose centroid is nearest in direction, as added
   rows will (``Router.assign``); the codes copied in cell order with their ids.
4. The calibration: ``calibration_queries`` rows the cells were not trained on, made into queries; their exact
   top-k (the index searched at every cell), each row's own document left out; the probes each recall needs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from adaptemb.ann.cells import Router, routing_basis, train_centroids
from adaptemb.ann.checks import check_own_codes
from adaptemb.ann.config import AnnConfig, as_config
from adaptemb.ann.index import AnnIndex
from adaptemb.ann.rerank import RerankStore
from adaptemb.ann.scorers import CellScorer, scorer_for
from adaptemb.ann.store import CellStore, Segment
from adaptemb.ann.threads import ann_threads
from adaptemb.codes import Codes

BASIS_QUERIES = 4096
"""Sample queries the routing basis is computed from."""
BASIS_BLOCK = 512
"""Sample queries made (and summed into the basis' Gram matrix) at a time."""


def build_ann(compressor: Any, docs: Codes, ann: AnnConfig | str | dict, *, query_kind: str, budget: int | None,
              backend: Any = None) -> AnnIndex:
    """An ``AnnIndex`` over ``docs`` (codes of ``compressor``) whose queries are ``query_kind`` codes at ``budget``;
    ``backend``: the exact index backend registered for the kinds (it may name the scorer)."""
    config = as_config(ann)
    if len(docs) == 0:
        raise ValueError("cannot index zero documents")
    check_own_codes(compressor, docs, budget, "the documents")
    with ann_threads(config.threads):
        return _build(compressor, docs, config, query_kind, budget, backend)


def _build(compressor: Any, docs: Codes, config: AnnConfig, query_kind: str, budget: int | None,
           backend: Any) -> AnnIndex:
    scorer = scorer_for(query_kind, docs.kind, compressor.score, backend)
    rng = np.random.default_rng(config.seed)
    n = len(docs)
    train, pick = sample_rows(n, config, rng)
    sample = docs[train]
    router = trained_router(compressor, sample, sample[pick], scorer, config, query_kind, budget, n)
    router = router.with_means(*router.cell_sums(docs, router.assign(docs, scorer.doc_vectors), scorer.doc_vectors))
    main = Segment.of(docs, router.assign(docs, scorer.doc_vectors), router.cells, np.arange(n))
    rerank = None if config.rerank is None else RerankStore(config.rerank, compressor, n)
    index = AnnIndex(compressor, CellStore(main), router, scorer, config=config, query_kind=query_kind, budget=budget,
                     rerank=rerank)
    held_out = held_out_rows(n, train, config.calibration_queries, rng)
    calibrate_on_rows(index, docs[held_out], held_out)
    return index


def sample_rows(n: int, config: AnnConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(the sorted rows the cells are trained on, the positions among them of the routing basis' rows)."""
    train = distinct_rows(n, config.sample_size(n), rng)
    return train, distinct_rows(len(train), min(BASIS_QUERIES, len(train)), rng)


def distinct_rows(n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` distinct rows of ``range(n)``, uniformly at random, sorted, in memory that grows with ``size`` rather
    than ``n`` (numpy's ``choice`` without replacement permutes all ``n`` rows when ``size`` is over n / 50): draws
    with replacement, duplicates dropped and drawn again, where ``n`` is over ``4 * size``."""
    if n <= 4 * size:
        return np.sort(rng.choice(n, size=size, replace=False))
    rows = np.unique(rng.integers(0, n, size))
    while len(rows) < size:
        rows = np.unique(np.concatenate([rows, rng.integers(0, n, size - len(rows))]))
    return rows


def trained_router(compressor: Any, sample: Codes, basis_docs: Codes, scorer: CellScorer, config: AnnConfig,
                   query_kind: str, budget: int | None, n: int) -> Router:
    """The routing basis (from queries made of ``basis_docs``) and k-means centroids of the ``sample`` rows, for an
    index of ``n`` rows (steps 1 and 2 of the module docstring)."""
    blocks = basis_rows(compressor, basis_docs, scorer, query_kind, budget)
    first = next(blocks)
    settings = config.resolved(n, first.shape[1])
    basis = routing_basis(itertools.chain([first], blocks), len(basis_docs), settings.routing_dims, config.seed)
    width = first.shape[1] if basis is None else basis.shape[1]
    router = Router(None if basis is None else basis.astype(np.float16).astype(np.float32), np.zeros((1, width), np.float32))
    centroids = train_centroids(lambda ids: router.map_codes(sample[ids], scorer.doc_vectors), len(sample),
                                settings.cells, seed=config.seed, iterations=config.iterations)
    return Router(router.basis, centroids.astype(np.float16).astype(np.float32))


def basis_rows(compressor: Any, docs: Codes, scorer: CellScorer, query_kind: str,
               budget: int | None) -> Iterator[np.ndarray]:
    """The query-space rows the routing basis is computed from, ``BASIS_BLOCK`` documents at a time: the queries made
    of ``docs`` (``stand_in_queries``), else the documents' own vectors."""
    for start in range(0, len(docs), BASIS_BLOCK):
        part = docs[start : start + BASIS_BLOCK]
        made = stand_in_queries(compressor, part, scorer, query_kind, budget)
        yield scorer.query_vectors(made) if made is not None else _dense(scorer.doc_vectors(part))


def calibrate_on_rows(index: AnnIndex, held_docs: Codes, held_out: np.ndarray,
                      cells_of: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
    """Calibrate ``index`` on queries made of its rows ``held_out`` (codes ``held_docs``; their own documents left
    out of their top-k); no calibration when there are none or no queries can be made of them. ``cells_of``: as
    ``AnnIndex.calibrate`` takes it."""
    n = len(index)
    queries = None if not len(held_out) else stand_in_queries(index.compressor, held_docs, index.scorer,
                                                                index.query_kind, index.budget)
    if queries is not None:
        index.calibration = index.calibrate(queries, min(index.config.top_k, n - 1) if n > 1 else 1,
                                            source=f"{len(held_out):,} held-out rows", exclude=held_out,
                                            cells_of=cells_of)


def stand_in_queries(compressor: Any, docs: Codes, scorer: CellScorer, query_kind: str,
                     budget: int | None) -> Codes | None:
    """Query codes made from document codes: the compressor's own (``Compressor.stand_in_queries``), else decoded and
    encoded as queries where the compressor decodes, else the scorer's stand-ins, else the documents themselves when
    queries are of their kind; None when none can be made."""
    own = getattr(compressor, "stand_in_queries", None)
    made = own(docs) if callable(own) else None
    if made is not None and made.kind == query_kind:
        return made
    if getattr(compressor, "decodes", False):
        return compressor.encode_queries(compressor.decode(docs), k=budget)
    made = scorer.stand_in_queries(docs)
    if made is not None and made.kind == query_kind:
        return made
    return docs if docs.kind == query_kind else None


def held_out_rows(n: int, train: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """Up to ``count`` rows outside ``train`` (rows of ``train`` when every row trained the cells), sorted."""
    if count == 0 or n < 2:
        return np.zeros(0, np.int64)
    if len(train) == n:
        return distinct_rows(n, min(count, n), rng)
    rest = distinct_rows(n - len(train), min(count, n - len(train)), rng)  # ranks among the rows outside train
    return rest + np.searchsorted(train - np.arange(len(train)), rest, side="right")


def _dense(rows: Any) -> np.ndarray:
    return np.asarray(rows.toarray() if hasattr(rows, "toarray") else rows, dtype=np.float32)
