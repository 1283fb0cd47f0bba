"""``rabitq``: faiss RaBitQ, 1 to 4 bits per dimension (faiss ``IndexRaBitQ``, factory ``RaBitQ{bits}``).

Each row is stored as the signs of its offset from the fit rows' centroid (1 bit per dimension) plus two
float factors, and with ``bits`` > 1 ``bits - 1`` extra bits per dimension and five factors in all. faiss
writes the factors as float32; ``factor_dtype="float16"`` holds them as float16, half the bytes, and widens
them back to faiss' float32 layout a block of rows at a time whenever faiss reads them (search, scores,
decode), so faiss still computes every score. At d = 768: 100 B (1 bit), 202 B (2), 298 B (3), 394 B (4) per
vector with float16 factors; 104, 212, 308, 404 B with float32. A factor beyond float16's range (|f| > 65504,
rows far from unit norm) is refused at encode, naming ``factor_dtype="float32"``. Queries stay float, quantised
to ``query_bits``
when scored (faiss' ``qb`` knob: 4 by default, as in faiss; 0 keeps them float), and are scored by
RaBitQ's inner-product estimator. The only trained state is the centroid (and the optional random
rotation, ``RR{d},RaBitQ``), so one fit serves every bit width.

Multi-bit search is faiss' two-stage scan: a 1-bit lower bound filters which rows get the full estimate.
faiss' bound is probabilistic: asked for the top 10 of 32,663 768-d rows at 4 bits, it missed a top-10 row
for 2.7 % of queries. The backend keeps a deeper heap (``filter_factor`` x ``top_k`` candidates, 2 x by
default: no miss on those queries at 2, 3 or 4 bits) and returns the best ``top_k``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import faiss
import numpy as np
import torch
from pydantic import Field, ValidationInfo, model_validator

from adaptemb import Budgets, Codes, CompressorConfig, SearchResult, adds_compressors, adds_index_backends

from .faiss_codes import (
    METRIC,
    FaissCodes,
    FaissCodesIndex,
    FaissCompressor,
    faiss_training,
    scalar,
    table,
    with_rotation,
)

MAX_BITS = 4
FactorDtype = Literal["float16", "float32"]
DEFAULT_FACTOR_DTYPE: FactorDtype = "float16"
_FAISS_ROTATION_SEED = 12345  # faiss' RandomRotationMatrix seed in "RR{d},..." factory strings
_SCORE_QUERIES = 64  # queries per full scan in score()


@dataclass(frozen=True)
class FactorLayout:
    """Where faiss' RaBitQ code keeps its float32 factors, and the same code with them held as float16.

    faiss' code: the sign bits, then two factors (1 bit) or three (with the error bound, > 1 bit); with > 1 bit
    the extra bits follow, then two more factors. The held code keeps that order with each factor as float16.
    """

    faiss_size: int
    factor_runs: tuple[tuple[int, int], ...]  # (byte offset in faiss' code, number of float32 factors)

    @classmethod
    def of(cls, dim: int, bits: int, faiss_size: int) -> FactorLayout:
        signs = (dim + 7) // 8
        runs = ((signs, 2),) if bits == 1 else ((signs, 3), (signs + 12 + (dim * (bits - 1) + 7) // 8, 2))
        layout = cls(faiss_size, runs)
        if runs[-1][0] + 4 * runs[-1][1] != faiss_size:
            raise ValueError(f"faiss {faiss.__version__}'s RaBitQ code at d={dim}, {bits} bits has {faiss_size} B, not "
                             f"the layout float16 factors assume ({runs[-1][0] + 4 * runs[-1][1]} B): use float32")
        return layout

    @property
    def held_size(self) -> int:
        return self.faiss_size - 2 * sum(count for _, count in self.factor_runs)

    def narrow(self, codes: np.ndarray) -> np.ndarray:
        """faiss' (n, faiss_size) codes with their factors as float16: (n, held_size) uint8."""
        held = np.empty((len(codes), self.held_size), np.uint8)
        source = target = 0
        for offset, count in self.factor_runs:
            held[:, target : target + offset - source] = codes[:, source:offset]
            target += offset - source
            factors = np.ascontiguousarray(codes[:, offset : offset + 4 * count]).view(np.float32)
            with np.errstate(over="ignore"):  # an overflow is refused just below, with its remedy
                halves = factors.astype(np.float16)
            overflow = np.isinf(halves) & np.isfinite(factors)
            if overflow.any():
                raise ValueError(f"rabitq factor_dtype='float16': a per-vector factor ({factors[overflow][0]:.4g}) "
                                 "is beyond float16's range (|f| <= 65504), e.g. rows far from unit norm; "
                                 "encode them with factor_dtype='float32'")
            held[:, target : target + 2 * count] = halves.view(np.uint8)
            source, target = offset + 4 * count, target + 2 * count
        held[:, target:] = codes[:, source:]
        return held

    def widen(self, held: np.ndarray) -> np.ndarray:
        """Held (n, held_size) codes back in faiss' layout, their float16 factors as float32: (n, faiss_size)."""
        codes = np.empty((len(held), self.faiss_size), np.uint8)
        source = target = 0
        for offset, count in self.factor_runs:
            codes[:, source:offset] = held[:, target : target + offset - source]
            target += offset - source
            halves = np.ascontiguousarray(held[:, target : target + 2 * count]).view(np.float16)
            codes[:, offset : offset + 4 * count] = halves.astype(np.float32).view(np.uint8)
            source, target = offset + 4 * count, target + 2 * count
        codes[:, source:] = held[:, target:]
        return codes


def factor_bits(tables: dict[str, np.ndarray]) -> int:
    """Bits per held factor: 16 where the table ``rabitq_factor_bits`` says so, else faiss' 32 (codes from
    before the option have no such table)."""
    if "rabitq_factor_bits" not in tables:
        return 32
    bits = scalar(tables, "rabitq_factor_bits")
    if bits not in (16, 32):
        raise ValueError(f"rabitq_factor_bits must be 16 or 32; got {bits}")
    return bits


class RaBitQCodes(FaissCodes):
    """faiss RaBitQ codes; tables ``rabitq_center`` (d,) float32, ``rabitq_bits`` (1,) uint8 and optionally
    ``rotation`` (d, d) float32 (y = R x before the quantiser) and ``rabitq_factor_bits`` (1,) uint8: 16 where
    the rows hold their factors as float16 (absent: float32, faiss' own code)."""

    kind = "rabitq"
    table_names = ("rabitq_center", "rabitq_bits")
    optional_tables = ("rotation", "rabitq_factor_bits")

    @classmethod
    def build_faiss(cls, tables: dict[str, np.ndarray], dim: int) -> faiss.Index:
        bits = scalar(tables, "rabitq_bits")
        if not 1 <= bits <= MAX_BITS:
            raise ValueError(f"rabitq_bits must be 1..{MAX_BITS}; got {bits}")
        factor_bits(tables)
        center = table(tables, "rabitq_center", (dim,))
        index = faiss.IndexRaBitQ(dim, METRIC, bits)
        faiss.copy_array_to_vector(center, index.center)
        index.is_trained = True
        return with_rotation(index, tables.get("rotation"), dim)

    @property
    def bits(self) -> int:
        return scalar(self.tables, "rabitq_bits")

    @property
    def factor_dtype(self) -> FactorDtype:
        return "float16" if factor_bits(self.tables) == 16 else "float32"

    @classmethod
    def layout(cls, tables: dict[str, np.ndarray], dim: int, faiss_index: faiss.Index) -> FactorLayout | None:
        """Where the float16 factors sit (None: the rows are faiss' own codes, float32 factors)."""
        if factor_bits(tables) == 32:
            return None
        return FactorLayout.of(dim, scalar(tables, "rabitq_bits"), int(faiss_index.sa_code_size()))

    def held_code_size(self) -> int:
        layout = self.layout(self.tables, self.dim, self._faiss)
        return super().held_code_size() if layout is None else layout.held_size

    @classmethod
    def from_faiss(cls, codes: np.ndarray, tables: dict[str, np.ndarray], dim: int,
                   faiss_index: faiss.Index) -> RaBitQCodes:
        layout = cls.layout(tables, dim, faiss_index)
        held = codes if layout is None else layout.narrow(codes)
        return cls(held, tables, dim, _faiss=faiss_index)

    def faiss_codes(self, rows: slice = slice(None)) -> np.ndarray:
        layout = self.layout(self.tables, self.dim, self._faiss)
        return super().faiss_codes(rows) if layout is None else layout.widen(self.codes[rows])

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
        """faiss' own estimates of every (query, row) pair: a search for all the rows of a block, scattered back
        (with every row asked for, faiss' multi-bit filter never drops one)."""
        out = np.empty((len(queries), len(self)), dtype=np.float32)
        if len(self) == 0:
            return out
        params = self.search_parameters(**search)
        for rows in self.row_blocks():
            index, block = self.searchable(rows), out[:, rows]
            for start in range(0, len(queries), _SCORE_QUERIES):
                scores, ids = index.search(queries[start : start + _SCORE_QUERIES], rows.stop - rows.start, params=params)
                np.put_along_axis(block[start : start + len(scores)], ids, scores, axis=1)
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
    factor_dtype: FactorDtype = Field(
        DEFAULT_FACTOR_DTYPE, description="How the per-vector factors are held: float16 (2 B each: 4 B per vector "
        "at 1 bit, 10 B at 2..4 bits) or float32 (faiss' own code: 8 B / 20 B); faiss scores both in float32.")

    @model_validator(mode="before")
    @classmethod
    def _saved_before_factor_dtype(cls, data: Any, info: ValidationInfo) -> Any:
        """A saved config (JSON: a compressor file, a pickled composition) without ``factor_dtype`` was written
        before the option existed, when the factors were float32: it keeps them so."""
        if info.mode == "json" and isinstance(data, dict) and "factor_dtype" not in data:
            return {**data, "factor_dtype": "float32"}
        return data


class RaBitQCompressor(FaissCompressor):
    """faiss RaBitQ (1..4 bits per dimension): sign codes with per-row factors, unbiased IP estimates."""

    name = "rabitq"
    role, bench_partner = "quantizer", "always"
    Config = RaBitQConfig
    budget_help = (f"bits per dimension, 1..{MAX_BITS} (d / 8 + 4 bytes per vector at 1 bit with float16 factors, "
                   "+ 8 with float32); one fit serves all")
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
        with faiss_training():
            index.train(rows)
        self._center = torch.from_numpy(faiss.vector_to_array(index.center).astype(np.float32))
        self._rotation = None if rotation is None else torch.from_numpy(rotation)
        self._reset_encoders()

    def tables(self, k: int) -> dict[str, np.ndarray]:
        tables = {"rabitq_center": self._center.numpy(), "rabitq_bits": np.array([k], dtype=np.uint8)}
        if self._rotation is not None:
            tables["rotation"] = self._rotation.numpy()
        if self.config.factor_dtype == "float16":
            tables["rabitq_factor_bits"] = np.array([16], dtype=np.uint8)
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
