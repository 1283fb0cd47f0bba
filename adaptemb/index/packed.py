"""Search over packed sparse documents (``packed_sparse``) without expanding their values to float32.

Projected queries (a dense vector over the code dimensions plus an offset, the asymmetric case) are scored by
the compiled kernel of ``adaptemb.index.postings`` (an int8 first pass with a proven error bound, then float32
for the few documents that may enter a top-k) in a variant that reads each stored entry as its quantised
level: the documents are held row by row as indices (uint16 up to 65,535 dimensions) and value levels (uint8 up
to 8 bits, uint16 for float16 values), and the kernel looks each value up in the per-feature table
``table[index, level]`` (the codes' codebook, float32, or every float16 value). An empty slot points at an extra
all-zero row of the query weights and of the table. Scores are ``<values, dequantised doc> + offset`` exactly as
``ProjectedQueries.similarity`` gives them (up to float rounding); the offset, the same for every document of a
query, is added after the top-k.

Packed queries (symmetric scoring) go through ``BlockedPostings`` (float32 values) and the sparse kernel.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from adaptemb.codes import Codes, PackedSparseCodes, ProjectedQueries
from adaptemb.index.base import Index, SearchResult
from adaptemb.index.postings import (
    QUERY_BLOCK,
    BlockedPostings,
    QueryBlocks,
    compile_with_slp,
    projected_kernel_source,
    rounded_up,
    run_projected,
    search_sparse,
)

NORM_ROWS = 65536
"""Rows whose L1 norms are computed at a time (bounds the (rows, k) temporaries)."""


@dataclass(frozen=True)
class LevelRows:
    """Packed documents row by row, each entry a (feature, level) pair; row ``i`` is ``indptr[i]:indptr[i+1]``."""

    indptr: np.ndarray  # (n + 1,) int64
    indices: np.ndarray  # (nnz,) uint16 / uint32; ``dim`` marks an empty slot
    levels: np.ndarray  # (nnz,) uint8, or uint16 for float16 values
    table: np.ndarray  # (dim + 1, levels) float32: table[j, level] is the value; row ``dim`` is zero
    scale: np.ndarray  # (n,) float32 ones (the shared kernel weighs every document)
    norms: np.ndarray  # (n,) float32, each row's sum of |values| rounded up (the first pass's error bound)
    n: int
    dim: int

    @classmethod
    def from_codes(cls, codes: PackedSparseCodes) -> LevelRows:
        indices, levels = codes.slots()
        n, k = indices.shape
        if codes.value_bits == 16:
            values = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
            table = np.zeros((codes.dim + 1, 2**16), np.float32)
            table[:, :] = np.where(np.isfinite(values), values, 0)  # one row per feature: same lookup as a codebook
        else:
            table = np.zeros((codes.dim + 1, 2**codes.value_bits), np.float32)
            table[: codes.dim] = codes.codebook.astype(np.float32)
        index_type = np.uint16 if codes.dim < 2**16 else np.uint32
        level_type = np.uint8 if codes.value_bits <= 8 else np.uint16
        norms = np.empty(n, np.float64)
        for rows in (slice(start, start + NORM_ROWS) for start in range(0, n, NORM_ROWS)):  # bounded temporaries
            entries = indices[rows] * table.shape[1] + levels[rows]  # the values the kernel reads from the table
            norms[rows] = np.abs(table.ravel()[entries]).sum(axis=1, dtype=np.float64)
        return cls(np.arange(0, n * k + 1, k, dtype=np.int64), indices.astype(index_type).ravel(),
                   levels.astype(level_type).ravel(), table, np.ones(n, np.float32), rounded_up(norms), n, codes.dim)

    @property
    def slots(self) -> int:
        """Entries per row (empty slots included)."""
        return len(self.indices) // max(self.n, 1)

    @property
    def nbytes(self) -> int:
        return int(self.indptr.nbytes + self.indices.nbytes + self.levels.nbytes + self.table.nbytes + self.scale.nbytes
                   + self.norms.nbytes)


def search_levels(docs: LevelRows, values: np.ndarray, offset: np.ndarray, top_k: int, *,
                  threads: int | None = None) -> SearchResult:
    """Exact top-``top_k`` of ``<values[q], doc> + offset[q]`` over level rows, ``QUERY_BLOCK`` queries at a time."""
    blocks = QueryBlocks.of(values, np.zeros(len(values), np.float32), docs.dim + 1, docs.slots)  # row dim: empty slot
    kernel = _level_kernel(docs.indices.dtype, docs.levels.dtype)
    found = run_projected(kernel, blocks, docs.n, (docs.indptr, docs.indices, docs.levels, docs.scale, docs.norms,
                                                   docs.table), top_k, threads)
    return found[0] + offset[:, None].astype(np.float32), found[1]


class PackedSparseIndex(Index):
    """Exact search of ``packed_sparse`` documents: projected queries over their quantised levels (numba), packed
    queries through float32 posting lists (see the module docstring). ``threads`` caps the workers."""

    name = "packed-sparse"
    pairs = (("projected", "packed_sparse"), ("packed_sparse", "packed_sparse"))

    def __init__(self, docs: Codes, *, device: str = "cpu", query_batch: int = 512, threads: int | None = None,
                 query_kind: str | None = None) -> None:
        super().__init__(docs, device="cpu", query_batch=query_batch, query_kind=query_kind)
        assert isinstance(docs, PackedSparseCodes)
        self.threads = threads
        self._rows: LevelRows | None = None
        self._postings: BlockedPostings | None = None
        if query_kind is not None:
            self._layout_for(query_kind)

    def _layout_for(self, query_kind: str) -> LevelRows | BlockedPostings:
        """The layout that serves ``query_kind`` queries, built on first need."""
        assert isinstance(self.docs, PackedSparseCodes)
        if query_kind == "projected":
            if self._rows is None:
                self._rows = LevelRows.from_codes(self.docs)
            return self._rows
        if self._postings is None:
            self._postings = BlockedPostings.from_csr(self.docs.to_csr())
        return self._postings

    @property
    def backend(self) -> str:
        return "numba-postings" if self.query_kind == "packed_sparse" else "numba-levels"

    @property
    def nbytes(self) -> int:
        """Bytes of the search structures built so far."""
        return sum(layout.nbytes for layout in (self._rows, self._postings) if layout is not None)

    def options(self) -> dict[str, Any]:
        return {"threads": self.threads}

    def _search_batch(self, queries: Codes, top_k: int) -> SearchResult:
        if isinstance(queries, ProjectedQueries):
            rows = self._layout_for("projected")
            assert isinstance(rows, LevelRows)
            values = np.ascontiguousarray(queries.values, dtype=np.float32)
            return search_levels(rows, values, queries.offset, top_k, threads=self.threads)
        assert isinstance(queries, PackedSparseCodes)
        postings = self._layout_for("packed_sparse")
        assert isinstance(postings, BlockedPostings)
        return search_sparse(postings, queries.to_csr(), top_k, threads=self.threads)


_LEVEL_KERNELS: dict[tuple[str, str], Any] = {}


def level_kernel_source() -> tuple[str, str]:
    """(name, source) of the projected kernel reading each entry's value as ``d_table[index, level]``; the name
    carries a checksum of the source, so numba's disk cache (keyed by this file) never serves an older template."""
    value = "d_table[np.uint64(d_indices[e]), np.uint64(d_values[e])]"
    source = projected_kernel_source(QUERY_BLOCK, name="level_kernel", value=value, table=True)
    name = f"level_kernel_{zlib.crc32(source.encode()):08x}"
    return name, source.replace("def level_kernel(", f"def {name}(")


def _level_kernel(index_type: np.dtype, level_type: np.dtype):
    """The level kernel compiled for these index and level widths (on first use; then cached on disk by numba)."""
    key = (np.dtype(index_type).name, np.dtype(level_type).name)
    if key not in _LEVEL_KERNELS:
        sample = (np.zeros(1, index_type), np.zeros(1, level_type), np.ones(1, np.float32), np.ones(1, np.float32),
                  np.zeros((2, 2), np.float32))
        _LEVEL_KERNELS[key] = compile_with_slp(*reversed(level_kernel_source()), __file__, [sample])
    return _LEVEL_KERNELS[key]
