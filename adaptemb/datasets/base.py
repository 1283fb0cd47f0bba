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
    used for 1-NN classification when present.
    """

    name: str
    corpus: np.ndarray
    queries: np.ndarray
    qrels: sp.csr_matrix
    labels: np.ndarray | None = None
    query_labels: np.ndarray | None = None
    description: str = ""
    metadata: dict[str, str] = field(default_factory=dict)

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
        for name, rows in (("labels", len(self.corpus)), ("query_labels", len(self.queries))):
            labels = getattr(self, name)
            if labels is not None and (labels.shape != (rows,) or labels.dtype.kind not in "iu"):
                raise ValueError(f"dataset {self.name!r}: {name} must be an integer array of shape ({rows},)")

    @property
    def dim(self) -> int:
        return int(self.corpus.shape[1])

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
