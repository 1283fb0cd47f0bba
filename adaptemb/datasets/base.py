"""The Dataset type every evaluation runs on: corpus, queries, graded relevance, optional labels."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp


@dataclass
class Dataset:
    """Embeddings plus relevance, the input of ``adaptemb bench``.

    ``qrels[i, j] > 0`` is the relevance grade of corpus row ``j`` for query ``i`` (a (q, n)
    scipy CSR matrix). ``labels`` are corpus class labels and ``query_labels`` query class labels,
    used for 1-NN classification when present. ``query_ids`` / ``corpus_ids`` are the dataset's own ids
    of the rows (strings; None: row numbers are the ids), used in saved TREC runs. ``judged`` marks the
    queries the metrics average over, as trec_eval does: every query with a judgement, a query judged only
    non-relevant counting 0 (None: the queries with a relevant row). ``notes`` are what reading the dataset
    did that a report should say (queries left out, embeddings read from a cache, ...). ``dev_queries`` (m, d):
    unlabelled real queries apart from the evaluated ones, the sample ``adaptemb bench`` gives the fit to judge its
    choices (``fit(x, queries=...)``); never evaluated.
    """

    name: str
    corpus: np.ndarray
    queries: np.ndarray
    qrels: sp.csr_matrix
    labels: np.ndarray | None = None
    query_labels: np.ndarray | None = None
    description: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    query_ids: np.ndarray | None = None
    corpus_ids: np.ndarray | None = None
    judged: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)
    dev_queries: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in ("corpus", "queries"):
            array = getattr(self, name)
            if not isinstance(array, np.ndarray) or array.ndim != 2 or array.dtype.kind != "f" or array.size == 0:
                raise ValueError(f"dataset {self.name!r}: {name} must be a non-empty 2-D float array")
        if self.corpus.shape[1] != self.queries.shape[1]:
            raise ValueError(
                f"dataset {self.name!r}: corpus dim {self.corpus.shape[1]} != queries dim {self.queries.shape[1]}"
            )
        if not sp.issparse(self.qrels) or self.qrels.shape != (len(self.queries), len(self.corpus)):
            raise ValueError(
                f"dataset {self.name!r}: qrels must be a sparse ({len(self.queries)}, {len(self.corpus)}) matrix"
            )
        self.qrels = sp.csr_matrix(self.qrels)
        dev = self.dev_queries
        if dev is not None and (not isinstance(dev, np.ndarray) or dev.ndim != 2 or dev.dtype.kind != "f"
                                or dev.shape[1] != self.corpus.shape[1] or len(dev) == 0):
            raise ValueError(f"dataset {self.name!r}: dev_queries must be a non-empty 2-D float array of dimension "
                             f"{self.corpus.shape[1]}")
        for name, rows in (("labels", len(self.corpus)), ("query_labels", len(self.queries))):
            labels = getattr(self, name)
            if labels is not None and (labels.shape != (rows,) or labels.dtype.kind not in "iu"):
                raise ValueError(f"dataset {self.name!r}: {name} must be an integer array of shape ({rows},)")
        self.query_ids = _ids(self.query_ids, len(self.queries), f"dataset {self.name!r}: query_ids")
        self.corpus_ids = _ids(self.corpus_ids, len(self.corpus), f"dataset {self.name!r}: corpus_ids")
        if self.judged is not None:
            self.judged = np.asarray(self.judged)
            if self.judged.shape != (len(self.queries),) or self.judged.dtype != np.bool_:
                raise ValueError(f"dataset {self.name!r}: judged must be a bool array of shape ({len(self.queries)},)")
            if (self.has_relevant() & ~self.judged).any():
                raise ValueError(f"dataset {self.name!r}: judged leaves out a query that has a relevant row")

    @property
    def dim(self) -> int:
        return int(self.corpus.shape[1])

    def has_relevant(self) -> np.ndarray:
        """bool (q,): the queries with at least one relevant corpus row."""
        return np.asarray((self.qrels > 0).sum(axis=1)).ravel() > 0

    def evaluated(self) -> np.ndarray:
        """bool (q,): the queries the metrics average over (``judged``, else those with a relevant row)."""
        return self.has_relevant() if self.judged is None else self.judged

    def row_ids(self, which: str) -> list[str]:
        """The ids of the ``"queries"`` or ``"corpus"`` rows: the dataset's own, else row numbers."""
        ids = self.query_ids if which == "queries" else self.corpus_ids
        rows = len(self.queries) if which == "queries" else len(self.corpus)
        return [str(row) for row in range(rows)] if ids is None else ids.tolist()

    def holding_out_queries(self, count: int, seed: int = 0) -> Dataset:
        """This dataset with a seeded ``count`` of its queries moved to ``dev_queries`` (never evaluated: the fits'
        query sample) and the others evaluated as before, with their relevance, labels, ids and judgements."""
        if not 0 < count < len(self.queries):
            raise ValueError(f"dataset {self.name!r}: hold out between 1 and {len(self.queries) - 1} of its "
                             f"{len(self.queries)} queries; got {count}")
        order = np.random.default_rng((seed, len(self.queries), count)).permutation(len(self.queries))
        held, kept = np.sort(order[:count]), np.sort(order[count:])

        def rows(array: np.ndarray | None) -> np.ndarray | None:
            return None if array is None else array[kept]

        return Dataset(self.name, self.corpus, np.ascontiguousarray(self.queries[kept]), self.qrels[kept],
                       labels=self.labels, query_labels=rows(self.query_labels), description=self.description,
                       metadata=dict(self.metadata), query_ids=rows(self.query_ids), corpus_ids=self.corpus_ids,
                       judged=rows(self.judged), notes=list(self.notes),
                       dev_queries=np.ascontiguousarray(self.queries[held]))

    @classmethod
    def from_gold(cls, name: str, corpus: np.ndarray, queries: np.ndarray, gold: np.ndarray, **extra: object) -> Dataset:
        """A dataset where query ``i`` has exactly one relevant corpus row, ``gold[i]``."""
        gold = np.asarray(gold)
        if gold.shape != (len(queries),) or gold.dtype.kind not in "iu":
            raise ValueError(f"gold must be an integer array of shape ({len(queries)},)")
        if len(gold) and (gold.min() < 0 or gold.max() >= len(corpus)):
            raise ValueError(f"gold ids must lie in 0..{len(corpus) - 1}")
        qrels = sp.csr_matrix(
            (np.ones(len(gold), dtype=np.float32), (np.arange(len(gold)), gold)), shape=(len(queries), len(corpus))
        )
        return cls(name=name, corpus=corpus, queries=queries, qrels=qrels, **extra)  # type: ignore[arg-type]


def _ids(ids: np.ndarray | None, rows: int, what: str) -> np.ndarray | None:
    """Row ids as a (rows,) array of distinct strings."""
    if ids is None:
        return None
    ids = np.asarray(ids)
    if ids.shape != (rows,) or ids.dtype.kind not in "iuUS":
        raise ValueError(f"{what} must be integer or string ids of shape ({rows},); got {ids.shape}, {ids.dtype}")
    text = np.char.decode(ids, "utf-8") if ids.dtype.kind == "S" else ids.astype(str)
    if len(set(text.tolist())) != rows:
        raise ValueError(f"{what} holds duplicate ids; each row needs its own id")
    return text
