"""``AnnConfig``: how an approximate index is built and searched by default; ``"auto"`` settings from the row count.

The automatic choices (``AnnConfig.resolved``):

* ``cells``: ``sqrt(n)`` rounded to a power of two (512 at 250k rows, 1,024 at 1M, 4,096 at 16M), at most
  ``n / 32`` (cells of at least 32 rows) and at least 1. Fewer, larger cells than the ``4 * sqrt(n)`` of float
  IVF indexes: a scan pays per probed cell (the rows' decoding and the queries' weights gathered once per cell,
  which for csr costs about as much as the scoring). Measured on the Debian corpus' static-256 rows (csr 16 B,
  svd+binary 32 B, 2,000 queries, 2 threads, the fewest probes reaching recall 0.95 against exact, searches
  alternated; ``benchmarks/results/ann_cells_static-256_990000.json``): at 990k rows 2,048 cells (n / 512) scanned
  a smaller share (csr 66 of 2,048 cells against 48 of 1,024) but searched at 0.90x the QPS of 1,024 for csr and
  1.06x for svd+binary (0.75x and 1.03x on a quiet machine with svd+binary's itq-tail rotation,
  ``ann_cells_paired_static-256_*_990000.json``): routing and the per-cell costs eat what the smaller share saves,
  so ``sqrt(n)`` stays.
  With it the QPS at 0.95 fell 1.2-1.9x from 250k to 990k rows in paired runs on a busy machine, the exact
  scan's 2.4-4.6x (``benchmarks/ann_paired_scaling.py``). At 250k, 1,024 cells took more CPU than 512 for both kinds (one thread,
  timed apart: csr 0.32 against 0.25 s, svd+binary 0.49 against 0.45 s for 2,000 queries);
* ``sample``: ``SAMPLE_PER_CELL`` (256) rows a cell, at most every row: what faiss' k-means reads at most (its
  ``max_points_per_centroid``). A fixed sample leaves each cell fewer rows as the rows grow (100,000 gave 98 a cell at
  1M rows and 24 at 16M, under faiss' own minimum of 39). Measured with four k-means seeds, the fewest probes reaching
  recall 0.95 against exact on 1,000 held-out queries (``benchmarks/ann_sample_size.py``, records
  ``ann_sample_*.json``), 256 a cell against a fixed 100,000, rows scanned a query: static-256 at 990k, svd+binary
  123,200 against 137,400 (120-128 probes against 127-148), csr 42,500 against 43,600; at 250k, svd+binary 54,500
  against 55,200, csr 22,100 against 21,000 (the one loss); MiniLM at 198k, svd+binary 31,800 against 32,500, csr
  13,900 against 13,800;
* ``routing_dims``: the query space's own width up to 256 (on 1M real rows csr's 1,024-d queries routed within
  0.005 recall of 240 dims with 96, 0.06 below with 48; svd+binary's 256 dims lost 0.04 at 128), less where the centroids (float16, one per cell) and
  the routing basis would cost more than ``ROUTING_BYTES`` per document (or ``ROUTING_FLOOR`` bytes in all,
  whichever is more); at least 16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from adaptemb.errors import InvalidConfigError

ROUTING_BYTES = 2.5
"""Bytes per document the automatic routing space may spend on centroids and basis (float16)..."""
ROUTING_FLOOR = 2**19
"""... or this many bytes in all, whichever is more (small indexes route in a useful space)."""
SAMPLE_PER_CELL = 256
"""Rows of the k-means sample per cell when ``AnnConfig.sample`` is ``"auto"``."""
MAX_ROUTING_DIMS = 256
MIN_ROUTING_DIMS = 16


class AnnConfig(BaseModel):
    """Settings of an approximate index (``Compressor.index(codes, ann=AnnConfig(...))``; ``ann="auto"`` is
    ``AnnConfig()``). A typo is an error naming the valid fields."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, frozen=True)

    cells: int | Literal["auto"] = "auto"
    """Coarse cells (k-means centroids); ``"auto"``: from the row count (module docstring)."""
    sample: int | Literal["auto"] = "auto"
    """Rows the cells are trained on (at most; a seeded random sample); ``"auto"``: ``SAMPLE_PER_CELL`` a cell."""
    routing_dims: int | Literal["auto"] = "auto"
    """Dimensions of the routing space the centroids live in; ``"auto"``: from the byte allowance."""
    iterations: int = Field(10, ge=1)
    """k-means iterations per level."""
    nprobe: int | None = Field(None, ge=1)
    """Cells a search probes when it gives neither ``nprobe`` nor ``recall``; None: the calibrated count for
    ``recall``."""
    recall: float = Field(0.95, gt=0, le=1)
    """The recall@``top_k`` a search without ``nprobe`` aims at (through the calibration)."""
    calibration_queries: int = Field(1000, ge=0)
    """Held-out rows of the indexed set used as calibration queries at build (0: no calibration)."""
    top_k: int = Field(10, ge=1)
    """The k the calibration measures recall@k at."""
    rerank: Any = None
    """A rerank store in the caller's id order: codes of the same compressor at a larger budget, float vectors
    (an array), or the path of a ``.npy`` file of float16/float32 vectors, opened memory-mapped."""
    shortlist: int = Field(100, ge=1)
    """Candidates per query the rerank rescores."""
    query_batch: int = Field(4096, ge=1)
    """Queries routed and scanned together (each probed cell is scanned once per batch)."""
    threads: int | None = Field(None, ge=1)
    """Workers of a scan (default: numba's pool, capped by ``adaptemb.set_threads``)."""
    seed: int = 0

    @field_validator("cells", "routing_dims", "sample", mode="before")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        if isinstance(value, int) and (isinstance(value, bool) or value < 1):
            raise ValueError(f"must be a positive integer or 'auto'; got {value!r}")
        return value

    @field_validator("rerank")
    @classmethod
    def _rerank_store(cls, value: Any) -> Any:
        from adaptemb.codes import Codes

        if value is None or isinstance(value, (Codes, np.ndarray)):
            return value
        if isinstance(value, (str, Path)):
            return Path(value)
        raise ValueError(f"rerank must be codes, a float array or the path of a .npy file; got {type(value).__name__}")

    def resolved(self, rows: int, query_dims: int) -> Settings:
        """The cell count and routing dimensions for ``rows`` documents and queries of ``query_dims`` dimensions."""
        cells = self.cell_count(rows)
        dims = auto_dims(rows, cells, query_dims) if self.routing_dims == "auto" else int(self.routing_dims)
        return Settings(cells=cells, routing_dims=min(dims, query_dims), sample=self.sample_size(rows))

    def cell_count(self, rows: int) -> int:
        """The cells of an index of ``rows`` documents."""
        return auto_cells(rows) if self.cells == "auto" else min(int(self.cells), rows)

    def sample_size(self, rows: int) -> int:
        """The rows of the k-means sample of an index of ``rows`` documents."""
        wanted = SAMPLE_PER_CELL * self.cell_count(rows) if self.sample == "auto" else int(self.sample)
        return min(wanted, rows)

    def saved(self) -> dict[str, Any]:
        """The JSON-ready settings a saved index records (a rerank store is recorded apart)."""
        return self.model_dump(exclude={"rerank"})


@dataclass(frozen=True)
class Settings:
    """The resolved numbers an index is built with."""

    cells: int
    routing_dims: int
    sample: int


def auto_cells(rows: int) -> int:
    """``sqrt(rows)`` rounded to a power of two, with at least 32 rows a cell."""
    wanted = 2 ** round(math.log2(max(math.sqrt(rows), 1)))
    return int(max(1, min(wanted, rows // 32)))


def auto_dims(rows: int, cells: int, query_dims: int) -> int:
    """The widest routing space up to ``MAX_ROUTING_DIMS`` whose float16 centroids and basis fit ``ROUTING_BYTES``
    per row (a multiple of 16, at least ``MIN_ROUTING_DIMS``)."""
    basis_rows = query_dims if query_dims > MAX_ROUTING_DIMS else 0
    affordable = max(ROUTING_BYTES * rows, ROUTING_FLOOR) / (2 * (cells + basis_rows))
    dims = min(MAX_ROUTING_DIMS, query_dims, int(affordable) // 16 * 16)
    return max(MIN_ROUTING_DIMS, dims)


def as_config(ann: AnnConfig | str | dict) -> AnnConfig:
    """``ann=`` as an ``AnnConfig``: ``"auto"``, a dict of its fields, or one; anything else is one clear error."""
    if isinstance(ann, AnnConfig):
        return ann
    if isinstance(ann, str) and ann == "auto":
        return AnnConfig()
    if isinstance(ann, dict):
        return AnnConfig(**ann)
    raise InvalidConfigError(f"ann must be 'auto', an AnnConfig or a dict of its fields; got {ann!r}")
