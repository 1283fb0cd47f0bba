"""The ``Codes`` contract every code kind implements, and the helpers the kinds share.

Storage accounting is exact and split in two:

* ``row_nbytes``: bytes that grow with the number of vectors (the per-row payload);
* ``shared_nbytes``: bytes stored once for all rows (for example int8 scales).

``nbytes`` is their sum and equals the bytes of the arrays ``to_arrays()`` returns, which is what
``adaptemb.save_codes`` writes. ``bytes_per_vector`` is ``row_nbytes / len(codes)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np
import scipy.sparse as sp

from adaptemb.errors import UnsupportedExportError

if TYPE_CHECKING:
    import torch

_C = TypeVar("_C", bound="Codes")
SCORE_BLOCK_ROWS = 16384
"""Documents scored at a time (decoded, unpacked or densified): the one bound on the memory of scoring."""


@dataclass(frozen=True)
class RowColumn:
    """One per-row array of codes as a table column: row ``i`` is ``values[i]`` (a scalar or a fixed-width row)
    or, with ``offsets`` (n + 1 of them), the variable-length run ``values[offsets[i]:offsets[i + 1]]``."""

    values: np.ndarray
    offsets: np.ndarray | None = None


class Codes(ABC):
    """Compressed vectors of one kind. Subclasses register themselves by ``kind``."""

    kind: ClassVar[str]
    shared_arrays: ClassVar[tuple[str, ...]] = ()
    """Names in ``to_arrays()`` stored once for all rows (int8's calibration); every other array is per row:
    (n, …) arrays, or 1-D arrays of length ``counts.sum()`` split by a per-row ``counts`` array."""
    _kinds: ClassVar[dict[str, type[Codes]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            Codes._kinds[cls.kind] = cls

    @classmethod
    def for_kind(cls, kind: str) -> type[Codes]:
        """The code class registered under ``kind``."""
        if kind not in cls._kinds:
            raise ValueError(f"unknown code kind {kind!r}; known kinds: {', '.join(sorted(cls._kinds))}")
        return cls._kinds[kind]

    @classmethod
    def known_kinds(cls) -> tuple[str, ...]:
        """Every registered code kind (the built-ins and those of the plugins imported so far), sorted."""
        return tuple(sorted(cls._kinds))

    dim: int
    """Dimension of the code space (d for dense prefixes, h for sparse codes)."""
    value_bits: int | None = None
    """Bits each active dimension's value is stored in, where the kind says (for tables: ``adaptemb bench`` shows
    ``k·bits``): 1 for binary sparse codes, a packed sparse code's value bits; None: not declared."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __getitem__(self: _C, rows: slice | np.ndarray | Sequence[int]) -> _C:
        """The codes of the selected rows."""

    @property
    @abstractmethod
    def row_nbytes(self) -> int:
        """Bytes of per-row payload, summed over all rows."""

    @property
    def shared_nbytes(self) -> int:
        """Bytes stored once for all rows (0 unless the kind has shared tables)."""
        return 0

    @property
    def nbytes(self) -> int:
        """Exact bytes of everything the codes hold: ``row_nbytes + shared_nbytes``."""
        return self.row_nbytes + self.shared_nbytes

    @property
    def bytes_per_vector(self) -> float:
        """Per-row payload bytes, the number to compare with ``4 * d`` for float32."""
        return self.row_nbytes / len(self)

    def active_counts(self) -> np.ndarray:
        """Number of stored (active) dimensions of each row, shape (n,): every dimension unless the kind is sparse."""
        return np.full(len(self), self.dim, dtype=np.int64)

    @abstractmethod
    def to_dense(self) -> np.ndarray:
        """A float32 (n, dim) array of the values the codes stand for, for inspection and tests."""

    @abstractmethod
    def similarity(self, other: Codes) -> np.ndarray:
        """Scores (len(self), len(other)) of the kind's own metric; larger means more similar."""

    @abstractmethod
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays that fully describe the codes (what is saved)."""

    @classmethod
    @abstractmethod
    def from_arrays(cls: type[_C], arrays: dict[str, np.ndarray], dim: int) -> _C:
        """Rebuild codes from ``to_arrays()`` output."""

    @classmethod
    @abstractmethod
    def concat(cls: type[_C], parts: Sequence[_C]) -> _C:
        """Stack codes of the same kind row-wise."""

    # -- the storage form of an exported (ONNX) encoder -----------------------------------------

    onnx_outputs: ClassVar[tuple[str, ...]] = ()
    """Output names of an exported encoder emitting this kind (its storage form); empty: the names of the
    compressor's ``encoder(k)`` outputs, passed through as they are."""

    @classmethod
    def onnx_graph(cls, outputs: dict[str, Any], dim: int) -> tuple[Any, ...]:
        """Inside the graph: the tensors of ``onnx_outputs`` from the ``encoder(k)`` outputs (by name) of a
        compressor whose codes have dimension ``dim``. By default the outputs, unchanged."""
        return tuple(outputs.values())

    def onnx_arrays(self, head_outputs: Sequence[str]) -> dict[str, np.ndarray]:
        """The arrays an exported encoder emits for these codes, by output name (what its parity check
        compares); ``head_outputs`` are the ``encoder(k)`` output names. By default those of ``to_arrays()``."""
        arrays = self.to_arrays()
        return {name: arrays[name] for name in self.onnx_outputs or head_outputs}

    def from_onnx_arrays(self: _C, arrays: dict[str, np.ndarray]) -> _C:  # noqa: PYI019 (typing.Self is 3.11+)
        """Codes like these (their kind, ``dim`` and ``shared_arrays``, e.g. int8's calibration) from what an exported
        encoder emits for codes of this kind (``onnx_arrays``, by output name): to search or compare an ONNX
        pipeline's codes as the torch pipeline's. By default ``from_arrays`` of those arrays and the shared ones."""
        shared = {name: array for name, array in self.to_arrays().items() if name in self.shared_arrays}
        return type(self).from_arrays({**arrays, **shared}, self.dim)

    def onnx_values(self) -> torch.nn.Module | None:
        """Inside a graph, a module from the ``encoder(k)`` outputs of codes like these (a dict by name) to the
        float32 (n, dim) values ``to_dense()`` gives (how a composition exports its projection); None (the default):
        the kind has no float values a graph can carry on with."""
        return None

    def parity_arrays(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Storage arrays of codes like these (``onnx_arrays``, or an exported encoder's outputs) as the parity check
        compares them (``adaptemb.onnx.parity.compare_codes``: ``indices`` as row sets, -1 an empty slot, with their
        ``values``; ``bits``; ``codes``). By default as they are; a kind whose storage is packed unpacks it."""
        return dict(arrays)

    parity_set_bits: ClassVar[bool] = False
    """In the parity check, whether the set ``bits`` are the active features (binary sparse codes); False: every bit
    is a sign, all of them compared alike."""

    def parity_vectors(self, name: str, array: np.ndarray) -> np.ndarray:
        """The integer storage array ``name`` of codes like these (or an encoder's output) as float64 rows (n, …), the
        vectors parity's code cosine compares. By default the integers themselves; int8 codes dequantise."""
        return array.reshape(len(array), -1).astype(np.float64)

    # -- the columns of a code table (streaming's parquet shards) -------------------------------

    def row_columns(self) -> dict[str, RowColumn]:
        """The per-row arrays of ``to_arrays()`` as table columns, the ``shared_arrays`` left out (what a streamed
        shard holds). By default the storage contract of ``shared_arrays``: (n, …) arrays are fixed-width
        columns, 1-D arrays of length ``counts.sum()`` variable-length ones split by ``counts``."""
        arrays = {name: array for name, array in self.to_arrays().items() if name not in self.shared_arrays}
        counts = arrays.get("counts")
        columns = {}
        for name, array in arrays.items():
            if counts is not None and name != "counts" and array.ndim == 1 and len(array) == int(counts.sum()):
                columns[name] = RowColumn(array, np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]))
            elif array.ndim in (1, 2) and len(array) == len(self):
                columns[name] = RowColumn(array)
            else:
                raise UnsupportedExportError(f"{self.kind} codes array {name!r} of shape {array.shape} is neither per row "
                                             f"nor shared: the {self.kind} kind must define row_columns")
        return columns

    @classmethod
    def from_row_columns(  # noqa: PYI019 (typing.Self is 3.11+; 3.10 is supported)
        cls: type[_C], columns: dict[str, RowColumn], shared: dict[str, np.ndarray], dim: int
    ) -> _C:
        """Rebuild codes from ``row_columns()`` output and the ``shared_arrays``."""
        return cls.from_arrays({**{name: column.values for name, column in columns.items()}, **shared}, dim)

    # -- the rows of a vector database (Qdrant, Milvus) -----------------------------------------

    vector_form: ClassVar[str] = ""
    """How a vector database holds these codes, one vector a row (``vector_rows``): ``"sparse"``, ``"dense"``,
    or ``""``: not at all (the default)."""
    compact_vector_dtype: ClassVar[str] = "float32"
    """The dtype of ``compact_vector_rows()`` for a dense form; a store that takes it (Qdrant) declares it."""
    vector_quantization: ClassVar[str | None] = None
    """A smaller copy of the dense ``vector_rows`` a store may keep in RAM, searching it and rescoring with the rows:
    ``"sign_bits"`` (the rows are ±1, a bit a dimension: ``sign_bits()``), ``"int8_scalar"`` (int8 levels), or None."""

    @property
    def sparse_vectors(self) -> bool:
        """Whether a store holds these codes as sparse vectors (``vector_rows`` is a CSR matrix)."""
        return self.vector_form == "sparse"

    def vector_rows(self) -> np.ndarray | sp.csr_matrix:
        """One vector a row whose dot products are ``similarity``: for ``vector_form = "dense"`` a float32
        (n, dim) array, for ``"sparse"`` a float32 scipy CSR matrix (n, dim). Kinds without a form raise."""
        raise UnsupportedExportError(f"{self.kind!r} codes have no vector-database form: the {self.kind} kind "
                                     "declares no vector_form / vector_rows")

    def compact_vector_rows(self) -> np.ndarray | sp.csr_matrix:
        """The smallest dense rows of ``compact_vector_dtype`` a store may hold instead of ``vector_rows()``; their
        dot products may only approximate ``similarity`` (int8: uint8 ``code + 128``). By default ``vector_rows()``."""
        return self.vector_rows()

    def sign_bits(self) -> np.ndarray:
        """The rows as packed sign bits, uint8 (n, ceil(dim / 8)), most significant bit first (``pack_signs``), for a
        kind whose ``vector_quantization`` is ``"sign_bits"``; other kinds raise."""
        raise UnsupportedExportError(f"{self.kind!r} codes are not sign bits (their vector_quantization is "
                                     f"{self.vector_quantization!r})")

    def store_query(self, store: str) -> tuple[np.ndarray | sp.csr_matrix, np.ndarray] | None:
        """(vectors, offsets) these codes search a vector database ``store`` with, for a kind that queries in a form
        of its own (``ProjectedQueries``); a query's offset is added to the store's dot products. None (the
        default): queries are searched as documents are stored, ``vector_rows`` and no offset."""
        return None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n={len(self)}, dim={self.dim}, "
            f"bytes_per_vector={self.bytes_per_vector:.1f})"
        )

    def _check_same_kind(self, other: Codes) -> None:
        if type(other) is not type(self):
            raise TypeError(
                f"cannot score {type(self).__name__} against {type(other).__name__}; "
                "encode queries and documents with the same compressor"
            )
        if other.dim != self.dim:
            raise ValueError(f"code dimensions differ: {self.dim} vs {other.dim}")


def blockwise_scores(docs: Codes, n_queries: int, score_block: Callable[[Codes], np.ndarray]) -> np.ndarray:
    """Scores (n_queries, len(docs)), float32, ``SCORE_BLOCK_ROWS`` documents at a time (bounded memory):
    ``score_block(block)`` gives the (n_queries, len(block)) scores of a slice ``block`` of ``docs``."""
    out = np.empty((n_queries, len(docs)), dtype=np.float32)
    for start in range(0, len(docs), SCORE_BLOCK_ROWS):
        block = docs[start : start + SCORE_BLOCK_ROWS]
        out[:, start : start + len(block)] = score_block(block)
    return out


def decoded_inner_products(queries: np.ndarray, docs: Codes) -> np.ndarray:
    """``queries @ docs.to_dense().T`` (float32 (n_queries, len(docs))), decoding a block of documents at a time."""
    return blockwise_scores(docs, len(queries), lambda block: queries @ block.to_dense().T)


def index_dtype(dim: int) -> np.dtype:
    """The smallest unsigned integer dtype that holds indices ``0 .. dim - 1``."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if dim - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.uint64)


def select_rows(rows: slice | np.ndarray | Sequence[int]) -> slice | np.ndarray:
    """``rows`` as an index of the first axis: a slice, or an array of row numbers (a single int is refused)."""
    if isinstance(rows, slice):
        return rows
    if isinstance(rows, (int, np.integer)):
        raise TypeError("index codes with a slice or an array of row numbers, e.g. codes[[i]]")
    return np.asarray(rows)
