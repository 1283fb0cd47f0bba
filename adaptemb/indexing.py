"""The index a compressor builds over its document codes: one backend plus the compressor that encodes queries.

``Indexing`` is what ``index``, ``search``, ``index_options`` and ``query_budget`` add to the public
``Compressor`` (a mixin: it binds a compressor, its document codes and the backend registered for its kinds).
``Compressor.index(doc_codes)`` returns a ``CompressedIndex``. It takes raw query embeddings (encoded
with the compressor's ``encode_queries`` at the budget the documents were encoded at) or query codes,
searches them with the backend registered for the compressor's (query kind, document kind), and saves
to one safetensors file holding the compressor, the document codes and the backend's options
(``adaptemb.load_index`` reads it back). With a ``Rerank`` stage it shortlists with the codes and
reranks the shortlist with float vectors (e.g. binary codes rescored with the float query).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
import torch

from adaptemb.budgets import Budgets
from adaptemb.codes import Codes
from adaptemb.errors import InvalidConfigError
from adaptemb.index.base import Index, SearchResult
from adaptemb.index.brute import ScoreIndex
from adaptemb.index.funnel import rerank
from adaptemb.inputs import InputOptions, InputSpec, takes_input_options
from adaptemb.registry import get_index_registry
from adaptemb.serialization import FORMAT_VERSION, INDEX_FORMAT, write_tensors

if TYPE_CHECKING:
    from typing_extensions import Unpack

BRUTE_FORCE = "score-function"
"""The backend name saved for a brute-force index (a method whose kinds no backend serves)."""


class QueryEncoder(Protocol):
    """What a ``CompressedIndex`` needs from its compressor (``adaptemb.Compressor`` provides it)."""

    name: str
    dim: int | None

    def encode_queries(self, x: Any, k: int | None = None, **inputs: Any) -> Codes: ...

    def score(self, query_codes: Codes, doc_codes: Codes) -> np.ndarray: ...

    def file_metadata(self) -> dict[str, str]: ...

    def state_tensors(self) -> dict[str, torch.Tensor]: ...


class IndexedCompressor(QueryEncoder, Protocol):
    """What ``Indexing`` uses of the compressor it is mixed into (``CompressorCore`` provides it)."""

    symmetric: ClassVar[bool]

    @property
    def query_kind(self) -> str | None: ...

    def budgets(self) -> Budgets: ...

    def _require_fitted(self) -> None: ...

    def index_options(self, doc_codes: Codes) -> dict[str, Any]: ...

    def query_budget(self, doc_codes: Codes) -> int | None: ...

    def index(self, doc_codes: Codes, *, device: str = "auto", k: int | None = None,
              **options: Any) -> CompressedIndex: ...


class Indexing:
    """Search over a compressor's codes: the ``index``, ``search``, ``index_options`` and ``query_budget`` of the
    public ``Compressor``. The backend is the one registered for the compressor's (``query_kind``, document
    kind); a method whose kinds no backend serves is searched by brute force through its ``score``."""

    def index(self: IndexedCompressor, doc_codes: Codes, *, device: str = "auto", k: int | None = None,
              ann: Any = None, **options: Any) -> Any:
        """A search index over ``doc_codes`` (from this compressor's ``encode``).

        The backend is the one registered for (``query_kind``, the documents' kind); ``options`` go to it
        (``backend``, ``query_batch``, ...) over the method's own ``index_options``. ``k`` is the budget
        raw queries are encoded at (default: the budget the documents were encoded at). A method whose
        kinds no backend serves is searched by brute force through ``score`` (``index.brute_force``).
        ``ann``: ``"auto"`` or an ``adaptemb.AnnConfig`` for an approximate index (``adaptemb.ann.AnnIndex``,
        answering the same ``search`` calls); None (the default): the exact index.
        """
        self._require_fitted()
        if not isinstance(doc_codes, Codes):
            raise TypeError(f"index() needs codes from encode(); got {type(doc_codes).__name__}")
        budget = k if k is not None else self.query_budget(doc_codes)
        if budget is not None:
            self.budgets().resolve(budget, self.name)
        query_kind = self.query_kind or (doc_codes.kind if self.symmetric else None)
        backend = None if query_kind is None else get_index_registry().for_kinds(query_kind, doc_codes.kind)
        if ann is not None:
            if query_kind is None:
                raise TypeError(f"{self.name} declares no query kind: its codes have no approximate index")
            from adaptemb.ann import build_ann  # the approximate layer sits above; this is its one hook

            return build_ann(self, doc_codes, ann, query_kind=query_kind, budget=budget, backend=backend)
        if backend is None:
            query_batch = options.get("query_batch", 512)
            return CompressedIndex(self, ScoreIndex(doc_codes, self.score, query_batch=query_batch), budget=budget)
        options = {"query_kind": query_kind, **self.index_options(doc_codes), **options}
        return CompressedIndex(self, backend(doc_codes, device=device, **options), budget=budget)

    def index_options(self, doc_codes: Codes) -> dict[str, Any]:
        """Backend options this method's scoring needs (e.g. per-document weights); none by default."""
        return {}

    def query_budget(self: IndexedCompressor, doc_codes: Codes) -> int | None:
        """The budget raw queries are encoded at for these documents: their common active count when it is
        a valid budget (a fixed-k sparse code, a dense prefix), else None (the method's default). Empty codes
        (all-zero rows of a method that encodes directions) say nothing about the budget and are not counted."""
        budgets = self.budgets()
        counts = doc_codes.active_counts()
        counts = counts[counts > 0]
        if budgets.fixed or not len(counts) or not (counts == counts[0]).all():
            return None
        return int(counts[0]) if budgets.low <= counts[0] <= budgets.high else None

    @takes_input_options
    def search(self: IndexedCompressor, queries: Any, doc_codes: Codes, top_k: int = 10, *, k: int | None = None,
               **inputs: Unpack[InputOptions]) -> SearchResult:
        """Exact search of ``queries`` (raw embeddings) in ``doc_codes``: (scores, ids), each (n_queries, top_k).

        Builds ``index(doc_codes, k=k)`` for this one call; build it once with ``index`` to search many times.
        ``input_kind`` and its options say how to read integer queries (as in ``fit``).
        """
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise ValueError(f"top_k must be an integer >= 1; got {top_k!r}")
        return self.index(doc_codes, k=k).search(queries, top_k, **inputs)


@dataclass(frozen=True)
class Rerank:
    """A second stage: rescore the first stage's ``shortlist`` candidates by ``<queries(x), docs[id]>``."""

    docs: np.ndarray | Codes
    """Rerank store: float vectors (n, d), or codes whose ``to_dense()`` lives in the queries' space."""
    queries: Callable[[Any], np.ndarray]
    """Raw query embeddings -> the float vectors the store is scored with."""
    shortlist: int = 100


class CompressedIndex:
    """A searchable index over one compressor's document codes (see the module docstring)."""

    def __init__(self, compressor: QueryEncoder, backend: Index | ScoreIndex, *, budget: int | None = None,
                 second_stage: Rerank | None = None) -> None:
        self.compressor = compressor
        self.inner = backend
        self.budget = budget
        self.second_stage = second_stage

    def __len__(self) -> int:
        return len(self.inner)

    @property
    def backend(self) -> str:
        """The engine that answers searches, e.g. ``"numba-postings"``; ``"score-function"`` for brute force."""
        name = self.inner.backend
        return f"{name}+rerank" if self.second_stage is not None else name

    @property
    def brute_force(self) -> bool:
        """True when no registered backend serves the compressor's kinds and every search scores every document."""
        return isinstance(self.inner, ScoreIndex)

    @property
    def device(self) -> str:
        return getattr(self.inner, "device", "cpu")

    @property
    def nbytes(self) -> int | None:
        """Bytes of the backend's own search structure, where it reports them."""
        return getattr(self.inner, "nbytes", None)

    @takes_input_options
    def encode_queries(self, queries: Any, **inputs: Unpack[InputOptions]) -> Codes:
        """Raw query embeddings as this index's query codes (``input_kind`` and its options as in ``Compressor.fit``)."""
        if InputSpec.of(**inputs).is_float:  # a compressor written before input kinds existed is still served
            return self.compressor.encode_queries(queries, k=self.budget)
        return self.compressor.encode_queries(queries, k=self.budget, **inputs)

    @takes_input_options
    def search(self, queries: Any, top_k: int = 10, **inputs: Unpack[InputOptions]) -> SearchResult:
        """The ``top_k`` best documents of each query: (scores, ids), each (n_queries, top_k), best first.

        ``queries`` are raw embeddings (numpy or torch, (n, d)) or query codes from ``encode_queries``. Integer
        query embeddings need ``input_kind`` (``"int8"`` with ``input_scale`` / ``input_offset``, or ``"ubinary"``
        with ``input_dim``), read as ``Compressor.fit`` reads them.
        """
        spec = InputSpec.of(**inputs)
        if isinstance(queries, Codes) and not spec.is_float:
            raise InvalidConfigError(f"input_kind={spec.kind!r} describes raw query embeddings; these are query codes "
                                     "already (leave input_kind at 'float')")
        codes = queries if isinstance(queries, Codes) else self.encode_queries(queries, **inputs)
        if self.second_stage is None:
            return self.inner.search(codes, top_k)
        if isinstance(queries, Codes):
            raise TypeError("this index reranks with float query vectors: pass query embeddings, not query codes")
        stage = self.second_stage
        _, candidates = self.inner.search(codes, max(stage.shortlist, top_k))
        given = spec.read(queries, name="queries", dim=self.compressor.dim)
        floats = queries if given is None else torch.from_numpy(given.to_float())  # the rerank side is float
        return rerank(stage.queries(floats), stage.docs, candidates, top_k)

    def save(self, path: str | Path) -> Path:
        """Write the index (compressor, document codes, backend options) to one safetensors file, atomically."""
        if self.second_stage is not None:
            raise NotImplementedError("an index with a rerank stage is rebuilt from its compressor; save the codes instead")
        docs = self.inner.docs
        inner = self.inner
        options = {"query_kind": inner.query_kind, "query_batch": inner.query_batch, **inner.options()} if isinstance(
            inner, Index) else {"query_batch": inner.query_batch}
        metadata = {
            **self.compressor.file_metadata(),
            "format": INDEX_FORMAT,
            "format_version": FORMAT_VERSION,
            "backend": inner.name if isinstance(inner, Index) else BRUTE_FORCE,
            "backend_options": json.dumps(options),
            "docs_kind": docs.kind,
            "docs_dim": str(docs.dim),
            "docs_n": str(len(docs)),
            "query_budget": json.dumps(self.budget),
        }
        tensors: dict[str, Any] = {f"compressor.{k}": t for k, t in self.compressor.state_tensors().items()}
        tensors.update({f"docs.{k}": a for k, a in docs.to_arrays().items()})
        if isinstance(inner, Index):
            tensors.update({f"index.{k}": a for k, a in inner.arrays().items()})
        return write_tensors(path, tensors, metadata)

    def __repr__(self) -> str:
        return f"CompressedIndex(method={self.compressor.name!r}, n={len(self)}, backend={self.backend!r}, device={self.device!r})"
