"""Queries projected into a code space, scored asymmetrically against sparse or binary-sparse documents."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from adaptemb.codes.base import Codes, blockwise_scores, select_rows
from adaptemb.codes.binary_sparse import BinarySparseCodes
from adaptemb.codes.packed_sparse import PackedSparseCodes
from adaptemb.codes.sparse import SparseCodes


class ProjectedQueries(Codes):
    """Queries projected into a code space, for asymmetric search against sparse or binary-sparse documents.

    Row ``i`` holds a dense vector ``values[i]`` over the ``dim`` code dimensions and a scalar
    ``offset[i]``: its score against a document code ``z`` is ``<values[i], z> + offset[i]``. A
    compressor whose decoder is linear emits these (``values = W_dec q``, ``offset = <q, b>``), so the
    score equals ``<q, decode(z)>`` while the documents stay sparse. Indexes add the offset themselves;
    methods that normalise per document (``bsa``) also pass document weights to their index.

    A vector database holds no projected queries (``vector_form`` is empty: they are never documents), but searches
    with them: ``query_vector_rows`` gives each row as a sparse query vector, whose dot product with a document's
    ``vector_rows`` plus ``offset`` is ``similarity``. Queries of a method that also divides each document's score
    by a weight of its own (``bsa``'s cosine scoring) say so (``document_weights``): a database, which holds no such
    weights, would rank them otherwise, so a search there refuses them.
    """

    kind = "projected"

    def __init__(self, values: np.ndarray, offset: np.ndarray | None = None, *, document_weights: bool = False) -> None:
        if values.ndim != 2 or values.dtype != np.float32:
            raise ValueError(f"projected queries need a 2-D float32 array; got {values.dtype} {values.shape}")
        offset = np.zeros(len(values), np.float32) if offset is None else offset
        if offset.shape != (len(values),) or offset.dtype != np.float32:
            raise ValueError(f"offset must be float32 of shape ({len(values)},); got {offset.dtype} {offset.shape}")
        self.values = values
        self.offset = offset
        self.document_weights = bool(document_weights)
        """Whether the method's score also divides by a per-document weight (not in ``similarity``)."""
        self.dim = values.shape[1]

    def __len__(self) -> int:
        return self.values.shape[0]

    def __getitem__(self, rows: slice | np.ndarray | Sequence[int]) -> ProjectedQueries:
        sel = select_rows(rows)
        return ProjectedQueries(self.values[sel], self.offset[sel], document_weights=self.document_weights)

    @property
    def row_nbytes(self) -> int:
        return self.values.nbytes + self.offset.nbytes

    def to_dense(self) -> np.ndarray:
        return self.values

    def similarity(self, other: Codes) -> np.ndarray:
        """``<values, z> + offset`` against sparse, packed sparse or binary-sparse document codes of the same dim."""
        if not isinstance(other, (SparseCodes, PackedSparseCodes, BinarySparseCodes)):
            raise TypeError(f"projected queries score sparse or binary_sparse documents; got {type(other).__name__}")
        if other.dim != self.dim:
            raise ValueError(f"code dimensions differ: {self.dim} vs {other.dim}")
        return blockwise_scores(
            other, len(self), lambda block: np.asarray((block.to_csr() @ self.values.T).T) + self.offset[:, None])

    @property
    def shared_arrays(self) -> tuple[str, ...]:  # type: ignore[override]
        """``document_weights`` (one byte, present only when set): stored once, not per row."""
        return ("document_weights",) if self.document_weights else ()

    def to_arrays(self) -> dict[str, np.ndarray]:
        weights = {"document_weights": np.ones(1, np.uint8)} if self.document_weights else {}
        return {"values": self.values, "offset": self.offset, **weights}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], dim: int) -> ProjectedQueries:
        return cls(arrays["values"], arrays["offset"], document_weights="document_weights" in arrays)

    @classmethod
    def concat(cls, parts: Sequence[ProjectedQueries]) -> ProjectedQueries:
        weights = {p.document_weights for p in parts}
        if len(weights) > 1:
            raise ValueError("cannot concatenate projected queries with and without document weights")
        return cls(np.concatenate([p.values for p in parts]), np.concatenate([p.offset for p in parts]),
                   document_weights=weights.pop())

    def store_query(self, store: str) -> tuple[sp.csr_matrix, np.ndarray]:
        """``query_vector_rows`` and ``offset``; refused (``ValueError``) for queries with ``document_weights``, which
        a database holding no such weights would rank otherwise."""
        if self.document_weights:
            raise ValueError(f"{store} would not rank these projected queries as their method does: it divides each "
                             "document's score by a weight of its own (bsa's scoring='asymmetric', a cosine), which the "
                             "database does not hold. Search the codes with compressor.index(codes).search(queries), "
                             "or fit bsa with scoring='asymmetric_dot' to search them in a database")
        return self.query_vector_rows(), self.offset

    def query_vector_rows(self) -> sp.csr_matrix:
        """The ``values`` as a vector database's sparse query vectors (float32 CSR (n, dim), every non-zero kept):
        their dot product with a document's ``vector_rows``, plus ``offset``, is ``similarity``."""
        rows = sp.csr_matrix(self.values)
        rows.eliminate_zeros()
        return rows
