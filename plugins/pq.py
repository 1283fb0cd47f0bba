"""``pq`` and ``opq``: faiss product quantisation (optionally behind faiss' learned OPQ rotation).

The embedding is cut into ``k`` = M sub-vectors of d / M dims, each stored as the id of its nearest
centroid among 2^nbits (faiss ``IndexPQ``; ``opq`` first rotates with faiss' ``OPQMatrix``: the factory
strings ``PQ{M}`` and ``OPQ{M},PQ{M}``). At nbits = 8 the budget k is the bytes per vector. Queries stay
float and are scored against the codes by faiss' asymmetric distance (a lookup table per query, inner
product). One fit serves one M (faiss trains the codebooks for it): ``adaptemb bench`` refits per budget.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import faiss
import numpy as np
import torch
from pydantic import Field

from adaptemb import Budgets, CompressorConfig, InvalidConfigError, adds_compressors, adds_index_backends

from .faiss_codes import (
    METRIC,
    FaissCodes,
    FaissCodesIndex,
    FaissCompressor,
    divisors,
    faiss_training,
    rotation_of,
    table,
    with_rotation,
)

_FAISS_SEED = 1234  # faiss' own default k-means seed: seed=0 reproduces faiss run directly
# opq's training: the rotation on every row with 10 k-means iterations in its first alternation (faiss: 40; the later
# alternations start from the previous codebooks), the final codebooks at the 4 iterations faiss' OPQ loop gave them
# (started from its last codebooks). benchmarks/opq_fit_speed.py measured it against faiss' 40 (default data and the
# 768-d stand-in: NDCG@10 within 0.002 at every budget, fits 28 % faster) and a sampled rotation (half the fit on the
# default data, but 0.002-0.007 lower NDCG@10 at 768-d), which opq_rows_per_centroid keeps as an option.
OPQ_ROWS_PER_CENTROID: int | None = None
OPQ_FIRST_PQ_ITERATIONS = 10
OPQ_TRAIN_ITERATIONS = 4
OPQ_BUDGET_START_ITERATIONS = 3


class PQCodes(FaissCodes):
    """faiss PQ codes: ``ceil(M * nbits / 8)`` bytes per row; tables ``pq_centroids`` (M, 2^nbits, d / M)
    float32 and, for OPQ, ``rotation`` (d, d) float32 (y = R x before the PQ)."""

    kind = "pq"
    table_names = ("pq_centroids",)
    optional_tables = ("rotation",)

    @classmethod
    def build_faiss(cls, tables: dict[str, np.ndarray], dim: int) -> faiss.Index:
        centroids = table(tables, "pq_centroids")
        if centroids.ndim != 3 or centroids.shape[0] * centroids.shape[2] != dim:
            raise ValueError(f"pq_centroids must be (M, 2^nbits, d / M) with M * (d / M) = d = {dim}; got {centroids.shape}")
        m, ksub, _ = centroids.shape
        nbits = ksub.bit_length() - 1
        if ksub != 2**nbits or not 1 <= nbits <= 16:
            raise ValueError(f"pq_centroids must hold 2^nbits centroids per sub-quantiser; got {ksub}")
        index = faiss.IndexPQ(dim, m, nbits, METRIC)
        faiss.copy_array_to_vector(centroids.ravel(), index.pq.centroids)
        index.is_trained = True
        return with_rotation(index, tables.get("rotation"), dim)

    def query_scores(self, queries: np.ndarray, **search: Any) -> np.ndarray:
        # faiss' PQ inner-product search sums <q_m, centroid> over sub-quantisers: <q, sa_decode(code)>
        return self.decoded_scores(queries)


class PQConfig(CompressorConfig):
    k: int | None = Field(
        None, ge=1, description="Sub-quantisers M (bytes per vector at nbits 8); must divide d. "
        "None: the largest divisor of d that is <= d / 12 (32 at d = 384, 64 at d = 768).")
    nbits: int = Field(8, ge=1, le=12, description="Bits per sub-quantiser code (2^nbits centroids each).")
    train_iterations: int = Field(25, ge=1, description="k-means iterations per sub-quantiser (faiss' default 25).")


class OPQConfig(PQConfig):
    opq_iterations: int = Field(
        10, ge=1, description="OPQ rotation/codebook alternations (faiss' default is 50; 10 measured as good here).")
    opq_rows_per_centroid: int | None = Field(
        OPQ_ROWS_PER_CENTROID, ge=1, description="The rotation trains on a seeded sample of at most this many rows per "
        "codebook centroid, or per dimension where d exceeds the 2^nbits centroids (16: 6,144 rows at d = 384, 12,288 at "
        "d = 768; faster fits, a little lower quality at 768-d); None: every row (faiss' own cap, "
        "OPQMatrix.max_train_points, is 65,536). The codebooks train on every row.")
    opq_first_pq_iterations: int = Field(
        OPQ_FIRST_PQ_ITERATIONS, ge=1, description="k-means iterations of the codebooks in the rotation's first "
        "alternation, from scratch (faiss' OPQMatrix.niter_pq_0; faiss' default 40); the later alternations run faiss' "
        "niter_pq (4), started from the previous codebooks.")
    train_iterations: int = Field(
        OPQ_TRAIN_ITERATIONS, ge=1, description="k-means iterations per sub-quantiser of the final codebooks on every "
        "rotated row, started from the rotation loop's last codebooks (the PQ faiss' OPQ shares: 4, its niter_pq).")
    budget_start_iterations: int | None = Field(
        OPQ_BUDGET_START_ITERATIONS, ge=1, description="Alternations of a fit for another budget that starts from this "
        "fit's rotation (``budget_start``: how ``adaptemb bench`` refits opq per budget) instead of opq_iterations "
        "from a random one; None: fits for other budgets start from a random rotation.")


class PQCompressor(FaissCompressor):
    """faiss product quantisation: M sub-quantisers of 2^nbits centroids; float queries, asymmetric scoring."""

    name = "pq"
    role = "quantizer"  # opq inherits it
    Config = PQConfig
    budget_help = "sub-quantisers M (= bytes per vector at nbits 8), a divisor of d; fixed per fit (config k)"
    codes_class = PQCodes
    test_params: ClassVar[dict[str, Any]] = {"nbits": 4, "k": 8}
    config: PQConfig
    rotate: ClassVar[bool] = False
    _start_rotation: np.ndarray | None = None
    """(opq) The rotation its training starts from (``OPQCompressor.budget_start``); None: faiss' random one."""

    def factory_string(self, dim: int | None = None) -> str:
        """The faiss factory string this configuration trains, e.g. ``"PQ32"`` or ``"OPQ32,PQ32x4"``."""
        d = dim if dim is not None else self.dim
        assert d is not None
        m = self.sub_quantizers(d)
        pq = f"PQ{m}" if self.config.nbits == 8 else f"PQ{m}x{self.config.nbits}"
        return f"OPQ{m},{pq}" if self.rotate else pq

    def sub_quantizers(self, dim: int) -> int:
        """M for embeddings of ``dim`` dims: the config's ``k``, checked to divide ``dim``."""
        valid = divisors(dim)
        if self.config.k is None:
            return max(m for m in valid if m <= max(1, dim // 12))
        if self.config.k not in valid:
            raise InvalidConfigError(
                f"k={self.config.k} sub-quantisers must divide d={dim}; valid k: {', '.join(map(str, valid))}",
                parameter="k", value=self.config.k, valid=", ".join(map(str, valid)))
        return self.config.k

    def _fit(self, x: torch.Tensor, **supervision: object) -> None:
        d = x.shape[1]
        m = self.sub_quantizers(d)
        ksub = 2**self.config.nbits
        if len(x) < ksub:
            raise InvalidConfigError(
                f"{self.name} with nbits={self.config.nbits} trains {ksub} centroids per sub-quantiser "
                f"and needs at least {ksub} rows; got {len(x)} (lower nbits or pass more rows)",
                parameter="nbits", value=self.config.nbits, valid=f"nbits <= {max(1, len(x).bit_length() - 1)}")
        if self.rotate and len(x) < d:  # faiss' OPQMatrix.train sizes a d x d buffer by n x d: fewer rows overrun it
            raise ValueError(f"{self.name} trains a {d} x {d} rotation and needs at least d = {d} rows; got {len(x)}")
        index = faiss.index_factory(d, self.factory_string(d), METRIC)
        pq_index = faiss.downcast_index(index.index if self.rotate else index)
        # polysemous training only relabels the centroids (for Hamming filtering, which adaptemb does not use):
        # the asymmetric scores are the same without it, and the fit is many times faster
        pq_index.do_polysemous_training = False
        pq = pq_index.pq
        pq.cp.seed = _FAISS_SEED + self.config.seed
        pq.cp.niter = self.config.train_iterations
        pq.cp.min_points_per_centroid = 1  # faiss only warns below 39 rows per centroid; the rows are what they are
        rows = np.ascontiguousarray(x.numpy())
        report: dict[str, Any] = {"train_rows": len(rows), "threads": max(1, torch.get_num_threads())}
        with faiss_training():
            start = time.perf_counter()
            if self.rotate:
                sample = self._train_rotation(faiss.downcast_VectorTransform(index.chain.at(0)), pq, rows)
                report.update(rotation_train_rows=sample, rotation_s=time.perf_counter() - start,
                              rotation_start="given" if self._start_rotation is not None else "random")
            start = time.perf_counter()
            index.train(rows)  # (after a trained rotation: the codebooks alone, on every rotated row)
            report["codebooks_s"] = time.perf_counter() - start
        self.fit_report = report
        rotation, inner = rotation_of(index)
        pq = faiss.downcast_index(inner).pq
        centroids = faiss.vector_to_array(pq.centroids).reshape(m, ksub, d // m)
        self._centroids = torch.from_numpy(centroids.astype(np.float32))
        self._rotation = None if rotation is None else torch.from_numpy(rotation)
        self._reset_encoders()

    def _train_rotation(self, opq: Any, pq: Any, rows: np.ndarray) -> int:
        """faiss' OPQ training of the rotation on a seeded sample of ``rows`` (``opq_rows_per_centroid``), alternating
        it with ``pq``'s codebooks (faiss' default is its own 8-bit PQ; this one has our nbits and seed); ``pq`` is
        left for the final codebooks' training. Returns the rows the rotation trained on."""
        config = self.config
        assert isinstance(config, OPQConfig)
        opq.niter = config.opq_iterations
        opq.niter_pq_0 = config.opq_first_pq_iterations
        if self._start_rotation is not None:  # faiss' OPQMatrix.train continues from a rotation it is given
            faiss.copy_array_to_vector(np.ascontiguousarray(self._start_rotation).ravel(), opq.A)
            opq.niter = config.budget_start_iterations or config.opq_iterations
        per_centroid = config.opq_rows_per_centroid
        # rows per centroid, or per dimension where d exceeds the centroids (the d x d rotation needs them)
        limit = len(rows) if per_centroid is None else per_centroid * max(2**config.nbits, rows.shape[1])
        if len(rows) > limit:  # our seeded sample (faiss' own, max_train_points, has a fixed seed)
            rows = rows[np.sort(np.random.default_rng(config.seed).choice(len(rows), limit, replace=False))]
        opq.max_train_points = len(rows)
        opq.pq = pq
        opq.train(np.ascontiguousarray(rows))
        # faiss' OPQ loop leaves its own k-means settings on the shared PQ (niter_pq iterations, 1000 points per
        # centroid): the final codebooks train with this config's iterations and faiss' default sampling instead
        pq.cp.niter = config.train_iterations
        pq.cp.max_points_per_centroid = faiss.ClusteringParameters().max_points_per_centroid
        return len(rows)

    def tables(self, k: int) -> dict[str, np.ndarray]:
        tables = {"pq_centroids": self._centroids.numpy()}
        if self._rotation is not None:
            tables["rotation"] = self._rotation.numpy()
        return tables

    def _budgets(self) -> Budgets:
        m = self._centroids.shape[0]
        return Budgets(low=m, high=m, default=m, bounds_active=False, per_fit=True)

    def _state(self) -> dict[str, torch.Tensor]:
        state = {"pq_centroids": self._centroids}
        if self._rotation is not None:
            state["rotation"] = self._rotation
        return state

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self._centroids = tensors["pq_centroids"].float()
        self._rotation = tensors.get("rotation")
        if self.rotate != (self._rotation is not None):
            raise ValueError(f"{self.name} stores {'a' if self.rotate else 'no'} 'rotation' tensor")
        if self._centroids.ndim != 3 or self._centroids.shape[1] != 2**self.config.nbits:
            raise ValueError(f"pq_centroids must be (M, 2^nbits={2**self.config.nbits}, d / M); "
                             f"got {tuple(self._centroids.shape)}")
        self._reset_encoders()

    def budget_for_bytes(self, nbytes: float, sample: Any = None) -> int | None:
        """The largest M dividing d whose codes take at most ``nbytes`` per vector (``ceil(M * nbits / 8)``)."""
        self._require_fitted()
        assert self.dim is not None
        fits = [m for m in divisors(self.dim) if -(-m * self.config.nbits // 8) <= nbytes]
        return max(fits) if fits else None


class OPQCompressor(PQCompressor):
    """faiss OPQ: a learned rotation (faiss ``OPQMatrix``) before product quantisation (``OPQ{M},PQ{M}``)."""

    name = "opq"
    Config = OPQConfig
    budget_help = "sub-quantisers M (= bytes per vector at nbits 8), a divisor of d; fixed per fit (config k)"
    test_params: ClassVar[dict[str, Any]] = {"nbits": 4, "k": 8, "opq_iterations": 4}
    config: OPQConfig
    rotate: ClassVar[bool] = True

    def budget_start(self, k: int) -> OPQCompressor | None:
        """opq for ``k`` sub-quantisers whose rotation training starts from this fit's rotation and runs
        ``budget_start_iterations`` alternations (the codebooks train anew): ``adaptemb bench``'s refits per budget.
        None when ``budget_start_iterations`` is None."""
        self._require_fitted()
        assert self._rotation is not None
        if self.config.budget_start_iterations is None:
            return None
        start = OPQCompressor(**{**self.config.model_dump(), "k": k})
        start._start_rotation = self._rotation.numpy()
        return start


class PQIndex(FaissCodesIndex):
    """faiss' asymmetric PQ search (``IndexPQ``, behind its OPQ rotation when there is one)."""

    name = "faiss-pq"
    pairs = (("dense", "pq"),)


register_compressors = adds_compressors(PQCompressor, OPQCompressor)


register_index_backends = adds_index_backends(PQIndex)
