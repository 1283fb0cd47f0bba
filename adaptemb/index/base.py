"""The Index base class, device resolution and the top-k helpers every backend shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from adaptemb.codes import Codes
from adaptemb.devices import resolve_device
from adaptemb.ranking import TopK

SearchResult = TopK
"""(scores, ids), each (n_queries, top_k), best first; scores are the code kind's similarity."""

SCORE_BUFFER_BYTES = 256 * 2**20
"""Upper bound on the float32 score buffer one query block may hold (memory-bounded search)."""


def rows_per_block(row_bytes: int, cap: int) -> int:
    """How many rows of ``row_bytes`` fit in ``SCORE_BUFFER_BYTES`` (at least 1, at most ``cap``)."""
    return int(max(1, min(cap, SCORE_BUFFER_BYTES // max(row_bytes, 1))))


class Index(ABC):
    """Exact search of query codes against document codes, batched over queries.

    A backend declares ``name`` (how saved indexes refer to it) and ``pairs``: the (query kind,
    document kind) pairs it serves. Backends are registered with ``registry.add_index(Backend)`` from
    a plugin's ``register_index_backends`` hook; ``Compressor.index`` looks them up by kind pair.
    Subclasses implement ``_search_batch`` for one batch of at most ``query_batch`` queries; options
    they take must be JSON values or numpy arrays (``options()`` / ``arrays()``, what ``save`` writes).
    """

    name: ClassVar[str]
    pairs: ClassVar[tuple[tuple[str, str], ...]]
    ann_scorer: ClassVar[type | None] = None
    """The ``adaptemb.CellScorer`` subclass the approximate index (``Compressor.index(codes, ann=...)``) scans these
    kinds with; None: a built-in one, else the generic scorer through the compressor's ``score``."""

    def __init__(self, docs: Codes, *, device: str = "cpu", query_batch: int = 512, query_kind: str | None = None) -> None:
        if not any(docs.kind == doc_kind for _, doc_kind in self.pairs):
            served = ", ".join(sorted({d for _, d in self.pairs}))
            raise TypeError(f"{type(self).__name__} indexes {served} codes; got {docs.kind}")
        if len(docs) == 0:
            raise ValueError("cannot index zero documents")
        if query_batch < 1:
            raise ValueError(f"query_batch must be >= 1; got {query_batch}")
        self.device = str(resolve_device(device))
        self.dim = docs.dim
        self.doc_kind = docs.kind
        self.query_batch = query_batch
        self.docs = docs
        self._n = len(docs)
        if query_kind is not None and query_kind not in self.query_kinds:
            raise ValueError(f"{type(self).__name__} serves {' or '.join(self.query_kinds)} queries for {docs.kind} documents; "
                             f"got query_kind={query_kind!r}")
        self.query_kind = query_kind
        """The query kind the index was built for (a backend may prepare for it), or None."""

    def __len__(self) -> int:
        return self._n

    @property
    def backend(self) -> str:
        """A short name of the engine that answers searches, e.g. ``"faiss-cpu"``."""
        return "numpy"

    @property
    def query_kinds(self) -> tuple[str, ...]:
        """The query code kinds this index accepts for its documents."""
        return tuple(q for q, d in self.pairs if d == self.doc_kind)

    def options(self) -> dict[str, Any]:
        """JSON-ready construction options (besides the documents) that ``save`` records."""
        return {}

    def arrays(self) -> dict[str, np.ndarray]:
        """Array options (for example per-document weights) that ``save`` records."""
        return {}

    def search(self, queries: Codes, top_k: int = 10) -> SearchResult:
        """The ``top_k`` best documents for each query (``top_k`` is capped at the index size)."""
        if queries.kind not in self.query_kinds:
            raise TypeError(
                f"{type(self).__name__} takes {' or '.join(self.query_kinds)} query codes for {self.doc_kind} "
                f"documents; got {queries.kind}"
            )
        if queries.dim != self.dim:
            raise ValueError(f"query code dim {queries.dim} != document code dim {self.dim}")
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise ValueError(f"top_k must be an integer >= 1; got {top_k!r}")
        top_k = min(int(top_k), self._n)
        if len(queries) == 0:
            return np.zeros((0, top_k), np.float32), np.zeros((0, top_k), np.int64)
        parts = [self._search_batch(queries[s : s + self.query_batch], top_k) for s in range(0, len(queries), self.query_batch)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    @abstractmethod
    def _search_batch(self, queries: Codes, top_k: int) -> SearchResult:
        """Search one batch of queries; ``top_k`` is already capped at ``len(self)``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self._n}, dim={self.dim}, device={self.device!r}, backend={self.backend!r})"
