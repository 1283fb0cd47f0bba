"""What the faiss-backed methods (``pq``/``opq``, ``sq``, ``rabitq``) share: their code type, index backend
and compressor base.

The methods wrap faiss and never re-implement it: training, encoding, decoding and the asymmetric distance
a search ranks by are faiss' own. What adaptemb adds is the storage around them:

* ``FaissCodes``: the (n, code_size) uint8 rows faiss' ``sa_encode`` writes, plus the trained tables shared
  by every row (PQ codebooks, an OPQ or random rotation, SQ ranges, the RaBitQ centre). Storage is exact:
  ``row_nbytes`` is the bytes held (n * faiss' ``sa_code_size()``, or less where a family holds its rows in a
  narrower form, e.g. RaBitQ's float16 factors), the tables are ``shared_nbytes``. The faiss object is
  rebuilt from the tables whenever it is needed (it is never pickled).
* ``FaissCodesIndex``: the index backend. It adds the codes to a freshly rebuilt faiss index
  (``add_sa_codes``) and answers searches with faiss' ``search``: float queries against the codes, in
  faiss' inner-product metric (adaptemb's embeddings are unit-normalised, so this is cosine). Codes held in a
  narrower form are converted to faiss' layout a block of rows at a time, each block searched by faiss and
  the blocks' top-k merged, so the converted copy never exceeds one block.
* ``FaissCompressor``: fits a faiss index on the embeddings, keeps its trained tables as tensors (what
  ``save`` writes as safetensors), encodes with ``sa_encode`` and scores float queries asymmetrically,
  exactly as the backend ranks them (``score`` and ``index(...).search`` agree).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

import faiss
import numpy as np
import torch

from adaptemb import Budgets, Codes, Compressor, DenseCodes, Index, SearchResult, decoded_inner_products

METRIC = faiss.METRIC_INNER_PRODUCT
SEARCH_BLOCK_ROWS = 1 << 16
"""Rows converted to faiss' layout and searched at a time, for codes held in another form."""


class FaissCodes(Codes):
    """Rows of faiss codes (``codes``: uint8 (n, code_size)) and the trained ``tables`` shared by all rows.

    Subclasses set ``kind``, ``table_names`` (required tables) and ``optional_tables``, and implement
    ``build_faiss`` (an empty, trained faiss index from the tables) and ``query_scores``. A family that holds
    its rows in another form than faiss' also overrides ``held_code_size``, ``from_faiss`` (faiss' rows to the
    held form) and ``faiss_codes`` (held rows back to faiss' layout).
    """

    table_names: ClassVar[tuple[str, ...]] = ()
    optional_tables: ClassVar[tuple[str, ...]] = ()

    def __init__(self, codes: np.ndarray, tables: dict[str, np.ndarray], dim: int, *,
                 _faiss: faiss.Index | None = None) -> None:
        missing = [name for name in self.table_names if name not in tables]
        unknown = sorted(set(tables) - set(self.table_names) - set(self.optional_tables))
        if missing or unknown:
            raise ValueError(f"{self.kind} codes need the tables {', '.join(self.table_names)}"
                             f"{' (optional: ' + ', '.join(self.optional_tables) + ')' if self.optional_tables else ''}"
                             f"; missing {missing}, unexpected {unknown}")
        self.dim = int(dim)
        self.tables = {name: np.ascontiguousarray(array) for name, array in tables.items()}
        self._faiss = _faiss if _faiss is not None else self.build_faiss(self.tables, self.dim)
        code_size = self.held_code_size()
        if codes.dtype != np.uint8 or codes.ndim != 2 or codes.shape[1] != code_size:
            raise ValueError(f"{self.kind} codes need uint8 of shape (n, {code_size}); got {codes.dtype} {codes.shape}")
        self.codes = codes

    # -- what a family implements ---------------------------------------------------------------

    @classmethod
    @abstractmethod
    def build_faiss(cls, tables: dict[str, np.ndarray], dim: int) -> faiss.Index:
        """An empty, trained faiss index rebuilt from ``tables``; raise ``ValueError`` for bad tables."""

    @abstractmethod
    def query_scores(self, queries: np.ndarray, **search: Any) -> np.ndarray:
        """Scores (n_queries, n) of float ``queries`` against these codes: what faiss' search ranks by."""

    def search_parameters(self, **search: Any) -> faiss.SearchParameters | None:
        """faiss search parameters for the backend's options (none by default)."""
        return None

    # -- the held form and faiss' layout (the same by default) ------------------------------------------

    def held_code_size(self) -> int:
        """Bytes held per row: faiss' ``sa_code_size()`` unless the family holds its rows narrower."""
        return int(self._faiss.sa_code_size())

    @classmethod
    def from_faiss(cls, codes: np.ndarray, tables: dict[str, np.ndarray], dim: int, faiss_index: faiss.Index) -> FaissCodes:
        """Codes holding the rows faiss' ``sa_encode`` wrote (``codes``), in the form the tables say."""
        return cls(codes, tables, dim, _faiss=faiss_index)

    def faiss_codes(self, rows: slice = slice(None)) -> np.ndarray:
        """The rows ``rows`` in faiss' own layout (what ``sa_encode`` wrote), C-contiguous uint8."""
        return np.ascontiguousarray(self.codes[rows])

    @property
    def held_as_faiss(self) -> bool:
        """True when the held rows are faiss' own codes (no conversion before faiss reads them)."""
        return self.held_code_size() == int(self._faiss.sa_code_size())

    def row_blocks(self, block_rows: int | None = None) -> list[slice]:
        """The row ranges faiss searches one at a time: all rows at once when they are held in faiss' layout,
        else blocks of ``block_rows`` (default ``SEARCH_BLOCK_ROWS``), each converted only while it is searched."""
        block_rows = block_rows or SEARCH_BLOCK_ROWS
        if self.held_as_faiss or len(self) <= block_rows:
            return [slice(0, len(self))]
        return [slice(start, min(start + block_rows, len(self))) for start in range(0, len(self), block_rows)]

    # -- the Codes interface --------------------------------------------------------------------

    @property
    def shared_arrays(self) -> tuple[str, ...]:  # type: ignore[override]
        """The tables: stored once for all rows (every other array, ``codes``, is per row)."""
        return tuple(self.tables)

    def __len__(self) -> int:
        return self.codes.shape[0]

    def __getitem__(self, rows: slice | np.ndarray | Sequence[int]) -> FaissCodes:
        if isinstance(rows, (int, np.integer)):
            raise TypeError("index codes with a slice or an array of row numbers, e.g. codes[[i]]")
        selected = self.codes[rows if isinstance(rows, slice) else np.asarray(rows)]
        return type(self)(selected, self.tables, self.dim, _faiss=self._faiss)

    @property
    def code_size(self) -> int:
        """Bytes held per row (``held_code_size``)."""
        return int(self.codes.shape[1])

    @property
    def row_nbytes(self) -> int:
        return int(self.codes.nbytes)

    @property
    def shared_nbytes(self) -> int:
        return int(sum(table.nbytes for table in self.tables.values()))

    def to_dense(self) -> np.ndarray:
        """faiss' reconstruction (``sa_decode``) of every row, float32 (n, dim)."""
        if len(self) == 0:
            return np.zeros((0, self.dim), np.float32)
        return np.concatenate([np.asarray(self._faiss.sa_decode(self.faiss_codes(rows)), dtype=np.float32)
                               for rows in self.row_blocks()])

    def same_tables(self, other: FaissCodes) -> bool:
        return self.tables.keys() == other.tables.keys() and all(
            np.array_equal(self.tables[name], other.tables[name]) for name in self.tables)

    def _check_tables(self, other: FaissCodes) -> None:
        if not self.same_tables(other):
            raise ValueError(f"{self.kind} codes come from different fits; encode both with one compressor")

    def similarity(self, other: Codes) -> np.ndarray:
        """Symmetric scores: the inner product of both sides' reconstructions."""
        self._check_same_kind(other)
        assert isinstance(other, FaissCodes)
        self._check_tables(other)
        return decoded_inner_products(self.to_dense(), other)

    def decoded_scores(self, queries: np.ndarray) -> np.ndarray:
        """``<q, sa_decode(code)>`` blockwise: the asymmetric inner product of faiss' PQ and SQ searches."""
        return decoded_inner_products(queries, self)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"codes": self.codes, **self.tables}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], dim: int) -> FaissCodes:
        tables = {name: array for name, array in arrays.items() if name != "codes"}
        return cls(arrays["codes"], tables, dim)

    @classmethod
    def concat(cls, parts: Sequence[FaissCodes]) -> FaissCodes:
        first = parts[0]
        for part in parts[1:]:
            first._check_tables(part)
        return cls(np.concatenate([p.codes for p in parts]), first.tables, first.dim, _faiss=first._faiss)

    def searchable(self, rows: slice = slice(None)) -> faiss.Index:
        """A new faiss index holding these codes' ``rows`` (``add_sa_codes``), ready to ``search``."""
        index = self.build_faiss(self.tables, self.dim)
        codes = self.faiss_codes(rows)
        if len(codes):
            if isinstance(index, faiss.IndexPreTransform):  # the codes are the inner index's; it searches them
                inner = faiss.downcast_index(index.index)
                inner.add_sa_codes(codes)
                index.ntotal = inner.ntotal
            else:
                index.add_sa_codes(codes)
        return index


# -- rebuilding faiss objects from tables ---------------------------------------------------------


def table(tables: dict[str, np.ndarray], name: str, shape: tuple[int, ...] | None = None,
          dtype: type = np.float32) -> np.ndarray:
    """Table ``name`` checked for dtype and shape (a clear ``ValueError`` otherwise)."""
    array = tables[name]
    if array.dtype != dtype or (shape is not None and array.shape != shape):
        want = f"{np.dtype(dtype)} {shape if shape is not None else ''}".strip()
        raise ValueError(f"table {name!r} must be {want}; got {array.dtype} {array.shape}")
    return np.ascontiguousarray(array)


def scalar(tables: dict[str, np.ndarray], name: str) -> int:
    """A one-element integer table as an int."""
    array = tables[name]
    if array.shape != (1,) or array.dtype.kind not in "iu":
        raise ValueError(f"table {name!r} must be one integer; got {array.dtype} {array.shape}")
    return int(array[0])


def with_rotation(index: faiss.Index, rotation: np.ndarray | None, dim: int) -> faiss.Index:
    """``index`` behind the orthonormal ``rotation`` (y = R x), as faiss' ``IndexPreTransform``."""
    if rotation is None:
        return index
    if rotation.shape != (dim, dim) or rotation.dtype != np.float32:
        raise ValueError(f"a rotation must be float32 ({dim}, {dim}); got {rotation.dtype} {rotation.shape}")
    transform = faiss.LinearTransform(dim, dim, False)
    faiss.copy_array_to_vector(np.ascontiguousarray(rotation).ravel(), transform.A)
    transform.is_trained = True
    transform.set_is_orthonormal()
    if not transform.is_orthonormal:
        raise ValueError("the rotation table is not orthonormal")
    wrapped = faiss.IndexPreTransform(transform, index)
    wrapped.referenced_objects = [transform, index]  # keep the Python owners alive with the wrapper
    return wrapped


def rotation_of(index: faiss.Index) -> tuple[np.ndarray | None, faiss.Index]:
    """(the rotation matrix of an ``IndexPreTransform`` with one linear transform, or None; the inner index)."""
    if not isinstance(index, faiss.IndexPreTransform):
        return None, index
    if index.chain.size() != 1:
        raise ValueError("only one pre-transform (a rotation) is supported")
    transform = faiss.downcast_VectorTransform(index.chain.at(0))
    rotation = faiss.vector_to_array(transform.A).reshape(transform.d_out, transform.d_in).astype(np.float32)
    return rotation, faiss.downcast_index(index.index)


@contextmanager
def faiss_threads(count: int | None = None) -> Iterator[None]:
    """Run faiss (OpenMP) with ``count`` threads (default: torch's current pool size, which adaptemb sizes to
    the free cores while fitting), restored after: OpenMP threads spinning against busy cores are slow."""
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(max(1, count or torch.get_num_threads()))
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)



BLAS_FROM_ROWS = 20
"""faiss computes the distances of at least this many rows to the centroids by a BLAS product while training
(``distance_compute_blas_threshold``; its own default, 128,000 rows since faiss 1.10, sends every fit on fewer rows
to a per-pair loop): product quantisers with 12- and 6-dimensional sub-spaces (M = 32, 64 of 384 dims) then train
7-11x faster on 8,000 rows (benchmarks/main_job_time.py), the pq codes of the built-in data unchanged in NDCG@10."""


@contextmanager
def faiss_training(count: int | None = None) -> Iterator[None]:
    """``faiss_threads(count)`` with k-means distances by BLAS from ``BLAS_FROM_ROWS`` rows, restored after."""
    previous = faiss.cvar.distance_compute_blas_threshold
    faiss.cvar.distance_compute_blas_threshold = BLAS_FROM_ROWS
    try:
        with faiss_threads(count):
            yield
    finally:
        faiss.cvar.distance_compute_blas_threshold = previous

# -- the index backend ----------------------------------------------------------------------------


class FaissCodesIndex(Index):
    """Exact search of float queries against faiss codes with faiss' own asymmetric distance.

    The codes are added to a faiss index rebuilt from their tables (``add_sa_codes``); ``search`` is faiss'
    flat-codes search in the inner-product metric. Scores are faiss' distances (larger is more similar).
    faiss here runs on the CPU whatever ``device`` says. Subclasses set ``name`` and ``pairs``.
    """

    def __init__(self, docs: Codes, *, device: str = "cpu", query_batch: int = 512, query_kind: str | None = None,
                 **search: Any) -> None:
        super().__init__(docs, device="cpu", query_batch=query_batch, query_kind=query_kind)
        assert isinstance(docs, FaissCodes)
        self._search_options = dict(search)
        self._params = docs.search_parameters(**search)
        self._blocks = docs.row_blocks()
        # one block: faiss holds it for every search; several: each is converted and added while it is searched
        self._faiss = docs.searchable() if len(self._blocks) == 1 else None

    @property
    def backend(self) -> str:
        return "faiss-cpu"

    @property
    def nbytes(self) -> int:
        assert isinstance(self.docs, FaissCodes)
        return self.docs.nbytes

    def options(self) -> dict[str, Any]:
        return dict(self._search_options)

    def _search_batch(self, queries: Codes, top_k: int) -> SearchResult:
        assert isinstance(queries, DenseCodes) and isinstance(self.docs, FaissCodes)
        q = np.ascontiguousarray(queries.values, dtype=np.float32)
        if self._faiss is not None:
            scores, ids = self._faiss.search(q, top_k, params=self._params)
            return scores.astype(np.float32, copy=False), ids.astype(np.int64)
        all_scores, all_ids = [], []
        for rows in self._blocks:
            scores, ids = self.docs.searchable(rows).search(q, min(top_k, rows.stop - rows.start), params=self._params)
            all_scores.append(scores.astype(np.float32, copy=False)), all_ids.append(ids.astype(np.int64) + rows.start)
        return best_of_blocks(all_scores, all_ids, top_k)


def best_of_blocks(scores: Sequence[np.ndarray], ids: Sequence[np.ndarray], top_k: int) -> SearchResult:
    """The ``top_k`` best of each query's per-block results: score descending, then id ascending."""
    merged_scores, merged_ids = np.concatenate(scores, axis=1), np.concatenate(ids, axis=1)
    order = np.lexsort((merged_ids, -merged_scores), axis=1)[:, :top_k]
    return np.take_along_axis(merged_scores, order, axis=1), np.take_along_axis(merged_ids, order, axis=1)


# -- the compressor base --------------------------------------------------------------------------


class FaissCompressor(Compressor):
    """Base of the faiss-backed methods: float queries scored asymmetrically against faiss codes.

    Subclasses set ``codes_class`` (whose ``kind`` is the ``doc_kind``) and implement ``_fit``, ``_budgets``,
    ``_state``, ``_set_state`` and ``tables(k)`` (the codes' tables at budget ``k``).
    """

    codes_class: ClassVar[type[FaissCodes]]
    query_kind = "dense"  # type: ignore[assignment]  # float queries; the class attribute overrides the property
    symmetric = False  # queries stay float, scored by faiss' asymmetric distance
    decodes = True

    @property
    def doc_kind(self) -> str:  # type: ignore[override]  # the codes class's
        return self.codes_class.kind

    def __init__(self, config: Any = None, **params: Any) -> None:
        super().__init__(config, **params)
        self._encoders: dict[int, faiss.Index] = {}

    @abstractmethod
    def tables(self, k: int) -> dict[str, np.ndarray]:
        """The codes' tables at budget ``k``."""

    def faiss_index(self, k: int | None = None) -> faiss.Index:
        """The trained (empty) faiss index that encodes at budget ``k`` (default: the default budget)."""
        self._require_fitted()
        budget = self.budgets().resolve(k, self.name)
        if budget not in self._encoders:
            assert self.dim is not None
            self._encoders[budget] = self.codes_class.build_faiss(self.tables(budget), self.dim)
        return self._encoders[budget]

    def _reset_encoders(self) -> None:
        self._encoders = {}

    def restore(self, dim: int, tensors: dict[str, torch.Tensor]) -> None:
        self._reset_encoders()
        super().restore(dim, tensors)
        # rebuild once now, so that damaged tables fail at load time, not at the first encode
        self._encoders[self.budgets().default] = self.codes_class.build_faiss(self.tables(self.budgets().default), dim)

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        index = self.faiss_index(k)
        codes = index.sa_encode(np.ascontiguousarray(x.numpy(), dtype=np.float32))
        assert self.dim is not None
        return self.codes_class.from_faiss(codes, self.tables(k), self.dim, index)

    def _decode(self, codes: Codes) -> torch.Tensor:
        return torch.from_numpy(self._check_codes(codes).to_dense())

    def _encode_queries(self, x: torch.Tensor, k: int | None) -> Codes:
        """Queries stay float (asymmetric search): ``DenseCodes`` of the validated query embeddings."""
        return DenseCodes(np.ascontiguousarray(x.numpy()))

    def score(self, query_codes: Codes, doc_codes: Codes) -> np.ndarray:
        """faiss' asymmetric scores of float queries (``encode_queries``) against codes (``encode``)."""
        if not isinstance(query_codes, DenseCodes):
            raise TypeError(f"{self.name} scores float queries from encode_queries; got {type(query_codes).__name__}")
        docs = self._check_codes(doc_codes)
        if query_codes.dim != docs.dim:
            raise ValueError(f"query dim {query_codes.dim} != code dim {docs.dim}")
        return docs.query_scores(np.ascontiguousarray(query_codes.values, dtype=np.float32), **self.search_options())

    def search_options(self) -> dict[str, Any]:
        """Search-time options of this method (JSON values) passed to the index backend."""
        return {}

    def index_options(self, doc_codes: Codes) -> dict[str, Any]:
        return self.search_options()

    def query_budget(self, doc_codes: Codes) -> int | None:
        """The budget the documents were encoded at (read from their tables), else None."""
        docs = self._check_codes(doc_codes)
        for k in self.budgets().options():
            tables = self.tables(k)
            if tables.keys() == docs.tables.keys() and all(np.array_equal(docs.tables[n], tables[n]) for n in tables):
                return k
        return None

    def _check_codes(self, codes: Codes) -> FaissCodes:
        if not isinstance(codes, self.codes_class):
            raise TypeError(f"{self.name} needs {self.codes_class.__name__} from its encode(); got {type(codes).__name__}")
        return codes


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    return [m for m in range(1, n + 1) if n % m == 0]


def budgets_for(values: Sequence[int], default: int, **extra: Any) -> Budgets:
    """``Budgets`` over exactly ``values`` (sorted, distinct)."""
    ordered = tuple(sorted(set(values)))
    return Budgets(low=ordered[0], high=ordered[-1], default=default,
                   values=None if ordered == tuple(range(ordered[0], ordered[-1] + 1)) else ordered, **extra)
