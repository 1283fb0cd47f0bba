"""``rabitq``: faiss RaBitQ, 1 to 4 bits per dimension (faiss ``IndexRaBitQ``, factory ``RaBitQ{bits}``).

Each row is stored as the signs of its offset from the fit rows' centroid (1 bit per dimension) plus two
float factors, and with ``bits`` > 1 ``bits - 1`` extra bits per dimension and their factors: at d = 768,
104 B (1 bit), 212 B (2), 308 B (3), 404 B (4) per vector. Queries stay float, quantised to ``query_bits``
when scored (faiss' ``qb`` knob: 4 by default, as in faiss; 0 keeps them float), and are scored by
RaBitQ's inner-product estimator. The only trained state is the centroid (and the optional random
rotation, ``RR{d},RaBitQ``), so one fit serves every bit width.

Multi-bit search is faiss' two-stage scan: a 1-bit lower bound filters which rows get the full estimate.
faiss' bound is probabilistic: asked for the top 10 of 32,663 768-d rows at 4 bits, it missed a top-10 row
for 2.7 % of queries. The backend keeps a deeper heap (``filter_factor`` x ``top_k`` candidates, 2 x by
default: no miss on those queries at 2, 3 or 4 bits) and returns the best ``top_k``.
"""

from __future__ import annotations

from typing import Any

import faiss
import numpy as np
import torch
from pydantic import Field

from adaptemb import Budgets, Codes, CompressorConfig, SearchResult, adds_compressors, adds_index_backends

from .faiss_codes import (
    METRIC,
    FaissCodes,
    FaissCodesIndex,
    FaissCompressor,
    faiss_threads,
    scalar,
    table,
    with_rotation,
)

MAX_BITS = 4
_FAISS_ROTATION_SEED = 12345  # faiss' RandomRotationMatrix seed in "RR{d},..." factory strings
_SCORE_QUERIES = 64  # queries per full scan in score()


class RaBitQCodes(FaissCodes):
    """faiss RaBitQ codes; tables ``rabitq_center`` (d,) float32, ``rabitq_bits`` (1,) uint8 and optionally
    ``rotation`` (d, d) float32 (y = R x before the quantiser)."""

    kind = "rabitq"
    table_names = ("rabitq_center", "rabitq_bits")
    optional_tables = ("rotation",)

    @classmethod
    def build_faiss(cls, tables: dict[str, np.ndarray], dim: int) -> faiss.Index:
        bits = scalar(tables, "rabitq_bits")
        if not 1 <= bits <= MAX_BITS:
            raise ValueError(f"rabitq_bits must be 1..{MAX_BITS}; got {bits}")
        center = table(tables, "rabitq_center", (dim,))
        index = faiss.IndexRaBitQ(dim, METRIC, bits)
        faiss.copy_array_to_vector(center, index.center)
        index.is_trained = True
        return with_rotation(index, tables.get("rotation"), dim)

    @property
    def bits(self) -> int:
        return scalar(self.tables, "rabitq_bits")

    def search_parameters(self, query_bits: int = 4, centered: bool = False, **_: Any) -> faiss.SearchParameters:
        params = faiss.RaBitQSearchParameters()
        params.qb, params.centered = int(query_bits), bool(centered)
        if "rotation" not in self.tables:
            return params
        wrapped = faiss.SearchParametersPreTransform()
        wrapped.index_params = params
        wrapped.referenced_objects = [params]
        return wrapped

    def query_scores(self, queries: np.ndarray, **search: Any) -> np.ndarray:
        """faiss' own estimates of every (query, row) pair: a search for all ``n`` rows, scattered back
        (with ``n`` results asked for, faiss' multi-bit filter never drops a row)."""
        out = np.empty((len(queries), len(self)), dtype=np.float32)
        if len(self) == 0:
            return out
        index, params = self.searchable(), self.search_parameters(**search)
        for start in range(0, len(queries), _SCORE_QUERIES):
            scores, ids = index.search(queries[start : start + _SCORE_QUERIES], len(self), params=params)
            np.put_along_axis(out[start : start + len(scores)], ids, scores, axis=1)
        return out


class RaBitQConfig(CompressorConfig):
    k: int = Field(1, ge=1, le=MAX_BITS, description="Default bits per dimension (1..4).")
    query_bits: int = Field(
        4, ge=0, le=8, description="Bits a query is quantised to when scored (faiss' qb, default 4); 0: float queries.")
    centered: bool = Field(False, description="With query_bits > 0: faiss' centred query quantisation.")
    rotation: bool = Field(False, description="Apply faiss' random rotation first (factory 'RR{d},RaBitQ').")
    filter_factor: int = Field(
        2, ge=1, le=100, description="Multi-bit search keeps filter_factor x top_k candidates through faiss' 1-bit "
        "filter and returns the best top_k (1: faiss' own search, which can drop a top-k row).")


class RaBitQCompressor(FaissCompressor):
    """faiss RaBitQ (1..4 bits per dimension): sign codes with per-row factors, unbiased IP estimates."""

    name = "rabitq"
    role, bench_partner = "quantizer", "always"
    Config = RaBitQConfig
    budget_help = f"bits per dimension, 1..{MAX_BITS} (d / 8 + 8 bytes per vector at 1 bit); one fit serves all"
    codes_class = RaBitQCodes
    config: RaBitQConfig

    def factory_string(self) -> str:
        """The faiss factory string of the default budget, e.g. ``"RaBitQ"`` or ``"RR768,RaBitQ2"``."""
        assert self.dim is not None
        bits = "" if self.config.k == 1 else str(self.config.k)
        return f"RR{self.dim},RaBitQ{bits}" if self.config.rotation else f"RaBitQ{bits}"

    def _fit(self, x: torch.Tensor, **supervision: object) -> None:
        d = x.shape[1]
        rows = np.ascontiguousarray(x.numpy())
        rotation = None
        if self.config.rotation:
            transform = faiss.RandomRotationMatrix(d, d)
            transform.init(_FAISS_ROTATION_SEED + self.config.seed)
            rotation = faiss.vector_to_array(transform.A).reshape(d, d).astype(np.float32)
            rows = transform.apply(rows)
        index = faiss.IndexRaBitQ(d, METRIC, self.config.k)
        with faiss_threads():
            index.train(rows)
        self._center = torch.from_numpy(faiss.vector_to_array(index.center).astype(np.float32))
        self._rotation = None if rotation is None else torch.from_numpy(rotation)
        self._reset_encoders()

    def tables(self, k: int) -> dict[str, np.ndarray]:
        tables = {"rabitq_center": self._center.numpy(), "rabitq_bits": np.array([k], dtype=np.uint8)}
        if self._rotation is not None:
            tables["rotation"] = self._rotation.numpy()
        return tables

    def search_options(self) -> dict[str, Any]:
        return {"query_bits": self.config.query_bits, "centered": self.config.centered,
                "filter_factor": self.config.filter_factor}

    def _budgets(self) -> Budgets:
        return Budgets(low=1, high=MAX_BITS, default=self.config.k, bounds_active=False)

    def _state(self) -> dict[str, torch.Tensor]:
        state = {"rabitq_center": self._center}
        if self._rotation is not None:
            state["rotation"] = self._rotation
        return state

    def _state_shapes(self, dim: int) -> dict[str, tuple[int | str, ...]]:
        return {"rabitq_center": (dim,), **({"rotation": (dim, dim)} if self.config.rotation else {})}

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self._center = tensors["rabitq_center"].float()
        self._rotation = tensors.get("rotation")
        if self.config.rotation and self._rotation is None:
            raise KeyError("rabitq with rotation=True needs its 'rotation' tensor")
        if self._center.ndim != 1:
            raise ValueError(f"rabitq_center must be 1-D; got {tuple(self._center.shape)}")
        self._reset_encoders()


class RaBitQIndex(FaissCodesIndex):
    """faiss' RaBitQ search (``IndexRaBitQ``); multi-bit codes keep ``filter_factor * top_k`` candidates
    through faiss' 1-bit filter and return the best ``top_k`` of them."""

    name = "faiss-rabitq"
    pairs = (("dense", "rabitq"),)

    def _search_batch(self, queries: Codes, top_k: int) -> SearchResult:
        assert isinstance(self.docs, RaBitQCodes)
        if self.docs.bits == 1:
            return super()._search_batch(queries, top_k)
        depth = min(len(self), top_k * int(self._search_options.get("filter_factor", 2)))
        scores, ids = super()._search_batch(queries, depth)
        return scores[:, :top_k], ids[:, :top_k]


register_compressors = adds_compressors(RaBitQCompressor)


register_index_backends = adds_index_backends(RaBitQIndex)
