"""``tq``: faiss' TurboQuant-MSE scalar codes behind a PCA and a random rotation (factory ``PCAR{m},SQtqmse{b}``).

The budget ``k`` is bytes per vector. At ``b`` bits per dimension (config ``bits``, default 1) a budget of
B bytes keeps m = 8 B / b dimensions: faiss' PCA to m dims followed by its random m x m rotation
(``PCAR{m}``), then each rotated coordinate quantised to 2^b Lloyd-Max levels that depend only on m and b
(faiss' TurboQuant-MSE codebook, ``SQtqmse{b}``; no per-vector factors). Where m reaches the full dimension
d the PCA is dropped for faiss' random d x d rotation (``RR,SQtqmse{b}``, d b / 8 bytes). Queries stay
float, scored as faiss' ``IndexScalarQuantizer`` scores them, ``<A q + b, decoded code>``, but faster:
``score`` and the index let faiss decode a block of codes (``sa_decode``) and score it with one matrix product
(3-6x faster than faiss' search at 16-48 B on the default data, docs/results.md; the scores agree to
~4e-7, summed in another order).

One fit serves every budget: faiss' PCA is trained once at full rank, and each budget's ``PCAR{m}``
matrix is faiss' own ``prepare_Ab`` on it, identical to what ``index_factory(d, "PCAR{m},...")`` trains.
Why 1 bit by default (benchmarks/tq_parity.py, NDCG@10 of 1 bit on 8 B dims against 2 bits on 4 B dims): on the
default data 0.149 / 0.187 against 0.117 / 0.167 at 16 / 32 B (and 0.199 at 48 B, the full dimension, against
0.198 at 64 B); on the 768-d stand-in 0.145 / 0.189 / 0.199 against 0.115 / 0.156 / 0.190 at 16 / 32 / 64 B.
"""

from __future__ import annotations

from typing import Any, Literal

import faiss
import numpy as np
import torch
from pydantic import Field
from threadpoolctl import threadpool_limits

from adaptemb import (
    Budgets,
    Codes,
    CompressorConfig,
    DenseCodes,
    Index,
    InvalidConfigError,
    SearchResult,
    adds_compressors,
    adds_index_backends,
    blockwise_scores,
    ranking,
)
from adaptemb import codes as code_kinds

from .faiss_codes import METRIC, FaissCodes, FaissCompressor, faiss_threads, scalar, table

FAISS_NEEDED = "1.14.2"
"""The first faiss with TurboQuant-MSE scalar codes (``SQtqmse``), as issue 29 reports; tested with 1.15.1."""
QTYPE_NAMES = {1: "QT_1bit_tqmse", 2: "QT_2bit_tqmse", 3: "QT_3bit_tqmse", 4: "QT_4bit_tqmse", 8: "QT_8bit_tqmse"}
_FAISS_ROTATION_SEED = 12345  # faiss' RandomRotationMatrix seed in "RR,..." factory strings


def has_tqmse() -> bool:
    """True when the installed faiss has TurboQuant-MSE scalar codes (``SQtqmse{b}``)."""
    return all(hasattr(faiss.ScalarQuantizer, name) for name in QTYPE_NAMES.values())


def require_tqmse() -> None:
    """Raise ``ImportError`` naming the faiss version ``tq`` needs when the installed one lacks ``SQtqmse``."""
    if not has_tqmse():
        raise ImportError(f"tq needs faiss >= {FAISS_NEEDED}, whose scalar quantiser has TurboQuant-MSE codes "
                          f"(SQtqmse); the installed faiss {faiss.__version__} has none: pip install -U 'faiss-cpu>="
                          f"{FAISS_NEEDED}'")


def kept_dims(nbytes: int, bits: int, dim: int) -> int:
    """Dimensions a code of ``nbytes`` bytes holds at ``bits`` bits each, at most ``dim``."""
    return min(dim, 8 * nbytes // bits)


def full_code_bytes(dim: int, bits: int) -> int:
    """Bytes per vector of the full-dimension code (``RR,SQtqmse{bits}``): the largest budget."""
    return -(-dim * bits // 8)


def factory_string(dim: int, nbytes: int, bits: int) -> str:
    """The faiss factory string of a ``nbytes``-byte code: ``PCAR{m},SQtqmse{bits}``, or ``RR,SQtqmse{bits}``
    where m reaches ``dim``."""
    m = kept_dims(nbytes, bits, dim)
    return f"RR,SQtqmse{bits}" if m == dim else f"PCAR{m},SQtqmse{bits}"


def scalar_quantizer(dims: int, bits: int) -> faiss.IndexScalarQuantizer:
    """faiss' TurboQuant-MSE scalar quantiser over ``dims`` dims, untrained."""
    if bits not in QTYPE_NAMES:
        raise ValueError(f"tq_bits must be one of {sorted(QTYPE_NAMES)}; got {bits}")
    return faiss.IndexScalarQuantizer(dims, getattr(faiss.ScalarQuantizer, QTYPE_NAMES[bits]), METRIC)


class TQCodes(FaissCodes):
    """faiss TurboQuant-MSE codes of m transformed dims: ``ceil(m * bits / 8)`` bytes per row; tables
    ``tq_matrix`` (m, d) float32 (y = A x + b, orthonormal rows), ``tq_bias`` (m,) float32 (the PCA's; absent
    behind the full-dimension rotation), ``tq_levels`` float32 (faiss' codebook for m and bits: its
    ``sq.trained``) and ``tq_bits`` (1,) uint8."""

    kind = "tq"
    table_names = ("tq_matrix", "tq_levels", "tq_bits")
    optional_tables = ("tq_bias",)

    @classmethod
    def build_faiss(cls, tables: dict[str, np.ndarray], dim: int) -> faiss.Index:
        require_tqmse()
        matrix = table(tables, "tq_matrix")
        if matrix.ndim != 2 or matrix.shape[1] != dim or not 1 <= matrix.shape[0] <= dim:
            raise ValueError(f"table 'tq_matrix' must be (m, {dim}) with 1 <= m <= {dim}; got {matrix.shape}")
        m, bits = matrix.shape[0], scalar(tables, "tq_bits")
        quantizer = scalar_quantizer(m, bits)
        faiss.copy_array_to_vector(table(tables, "tq_levels", (2 ** (bits + 1) - 1,)), quantizer.sq.trained)
        quantizer.is_trained = True
        bias = tables.get("tq_bias")
        transform = faiss.LinearTransform(dim, m, bias is not None)
        faiss.copy_array_to_vector(matrix.ravel(), transform.A)
        if bias is not None:
            faiss.copy_array_to_vector(table(tables, "tq_bias", (m,)), transform.b)
        transform.is_trained = True
        transform.set_is_orthonormal()  # the decoder (sa_decode) needs it
        if not transform.is_orthonormal:
            raise ValueError("table 'tq_matrix' does not have orthonormal rows")
        wrapped = faiss.IndexPreTransform(transform, quantizer)
        wrapped.referenced_objects = [transform, quantizer]  # keep the Python owners alive with the wrapper
        return wrapped

    def transformed(self, queries: np.ndarray) -> np.ndarray:
        """``A q + b``: float queries in the m-dim space of the codes (faiss' pre-transform)."""
        return self._faiss.chain.at(0).apply(np.ascontiguousarray(queries, dtype=np.float32))

    def decoded_rotated(self) -> np.ndarray:
        """These rows decoded by faiss (the scalar quantiser's ``sa_decode``) in the m-dim rotated space."""
        return faiss.downcast_index(self._faiss.index).sa_decode(np.ascontiguousarray(self.codes))

    def transformed_scores(self, transformed: np.ndarray) -> np.ndarray:
        """``<A q + b, decoded code>`` of ``transformed`` queries: faiss' scores, one matrix product per block."""
        return blockwise_scores(self, len(transformed), lambda block: transformed @ block.decoded_rotated().T)

    def query_scores(self, queries: np.ndarray, **search: Any) -> np.ndarray:
        """faiss' scores: the transformed queries against the decoded m-dim codes, blockwise."""
        return self.transformed_scores(self.transformed(queries))


def trained_levels(dims: int, bits: int) -> np.ndarray:
    """faiss' TurboQuant-MSE table (``sq.trained``: 2^bits levels, 2^bits - 1 boundaries) for ``dims`` dims at
    ``bits``; it depends on nothing else, so it is trained on one zero row."""
    quantizer = scalar_quantizer(dims, bits)
    quantizer.train(np.zeros((1, dims), np.float32))
    return faiss.vector_to_array(quantizer.sq.trained).astype(np.float32)


class TQConfig(CompressorConfig):
    k: int | None = Field(
        None, ge=1, description="Default bytes per vector. None: d / 12 (32 at d = 384, 64 at d = 768), at most the "
        "full-dimension code (d * bits / 8).")
    bits: Literal[1, 2, 3, 4, 8] = Field(
        1, description="Bits per kept dimension (faiss' SQtqmse{bits}); a budget of B bytes keeps 8 B / bits dims.")


class TQCompressor(FaissCompressor):
    """faiss TurboQuant-MSE codes (``PCAR{m},SQtqmse{b}``): PCA + random rotation, b bits per kept dim."""

    name = "tq"
    Config = TQConfig
    budget_help = "bytes per vector B (8 B / bits dims kept, up to d * bits / 8: the full dimension); one fit serves all"
    codes_class = TQCodes
    config: TQConfig

    def __init__(self, config: Any = None, **params: Any) -> None:
        require_tqmse()
        super().__init__(config, **params)
        self._tables: dict[int, dict[str, np.ndarray]] = {}

    def factory_string(self, k: int | None = None) -> str:
        """The faiss factory string of budget ``k`` (default: the default budget), e.g. ``"PCAR256,SQtqmse1"``."""
        assert self.dim is not None
        return factory_string(self.dim, self.budgets().resolve(k, self.name), self.config.bits)

    def _fit(self, x: torch.Tensor, **supervision: object) -> None:
        d = x.shape[1]
        high = full_code_bytes(d, self.config.bits)
        if self.config.k is not None and self.config.k > high:
            raise InvalidConfigError(
                f"tq's k={self.config.k} bytes exceeds its full-dimension code at bits={self.config.bits} ({high} B "
                f"at d = {d})", parameter="k", value=self.config.k, valid=f"1..{high}")
        pca = faiss.PCAMatrix(d, d, 0, True)  # full rank: every budget's PCAR{m} is built from it (tables)
        # one thread: faiss' covariance (BLAS) changes in its last bits with the thread count, which flips
        # eigenvectors' signs and so the rotated codes; one thread makes the fit independent of the machine. Every
        # loaded BLAS and OpenMP pool is held at one (threadpoolctl): which OpenMP runtime faiss' BLAS binds to
        # depends on the order libraries were loaded (numba's kernels, imported with the package, load one first)
        with faiss_threads(1), threadpool_limits(1):
            pca.train(np.ascontiguousarray(x.numpy()))
            rotation = faiss.RandomRotationMatrix(d, d)  # its orthogonalisation too (LAPACK, the same pools)
            rotation.init(_FAISS_ROTATION_SEED + self.config.seed)
        self._pca = torch.from_numpy(faiss.vector_to_array(pca.PCAMat).reshape(d, d))
        self._mean = torch.from_numpy(faiss.vector_to_array(pca.mean))
        self._rotation = torch.from_numpy(faiss.vector_to_array(rotation.A).reshape(d, d))
        self._reset_encoders()

    def _reset_encoders(self) -> None:
        super()._reset_encoders()
        self._tables = {}

    def tables(self, k: int) -> dict[str, np.ndarray]:
        if k not in self._tables:
            d, bits = self._pca.shape[0], self.config.bits
            m = kept_dims(k, bits, d)
            tables = {"tq_matrix": self._rotation.numpy()} if m == d else self._pca_tables(m)
            self._tables[k] = {**tables, "tq_levels": trained_levels(m, bits), "tq_bits": np.array([bits], np.uint8)}
        return self._tables[k]

    def _pca_tables(self, m: int) -> dict[str, np.ndarray]:
        """faiss' ``PCAR{m}`` transform (PCA to m dims, then its random m x m rotation) from the full-rank PCA."""
        d = self._pca.shape[0]
        pca = faiss.PCAMatrix(d, m, 0, True)
        faiss.copy_array_to_vector(self._mean.numpy(), pca.mean)
        faiss.copy_array_to_vector(self._pca.numpy().ravel(), pca.PCAMat)
        with faiss_threads(1):  # its matrix product too: the same bits whatever the thread count
            pca.prepare_Ab()
        return {"tq_matrix": faiss.vector_to_array(pca.A).reshape(m, d), "tq_bias": faiss.vector_to_array(pca.b)}

    def _budgets(self) -> Budgets:
        d = self._pca.shape[0]
        high = full_code_bytes(d, self.config.bits)
        default = self.config.k if self.config.k is not None else max(1, min(high, d // 12))
        return Budgets(low=1, high=high, default=default, bounds_active=False)

    def budget_for_bytes(self, nbytes: float, sample: Any = None) -> int | None:
        """``nbytes`` rounded down, at most the full-dimension code (sizes are known: k bytes per vector)."""
        budgets = self.budgets()
        return min(int(nbytes), budgets.high) if nbytes >= budgets.low else None

    def _state(self) -> dict[str, torch.Tensor]:
        return {"pca_components": self._pca, "pca_mean": self._mean, "rotation": self._rotation}

    def _state_shapes(self, dim: int) -> dict[str, tuple[int | str, ...]]:
        return {"pca_components": (dim, dim), "pca_mean": (dim,), "rotation": (dim, dim)}

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self._pca, self._mean, self._rotation = (
            tensors[name].float() for name in ("pca_components", "pca_mean", "rotation"))
        d = self._mean.shape[0]
        if self._mean.ndim != 1 or self._pca.shape != (d, d) or self._rotation.shape != (d, d):
            raise ValueError(f"tq needs pca_components and rotation of shape (d, d) and pca_mean (d,); got "
                             f"{tuple(self._pca.shape)}, {tuple(self._rotation.shape)}, {tuple(self._mean.shape)}")
        self._reset_encoders()


class TQIndex(Index):
    """Exact search of float queries against TurboQuant-MSE codes by faiss' own score, ``<A q + b, decoded
    code>``, a block of documents at a time: faiss decodes the block (``sa_decode``), one matrix product scores
    it, torch's top-k keeps the best. It holds the codes only, never every row decoded."""

    name = "faiss-tq"
    pairs = (("dense", "tq"),)

    def __init__(self, docs: Codes, *, device: str = "cpu", query_batch: int = 512,
                 query_kind: str | None = None) -> None:
        super().__init__(docs, device="cpu", query_batch=query_batch, query_kind=query_kind)
        assert isinstance(docs, TQCodes)
        self._codes = docs

    @property
    def backend(self) -> str:
        return "faiss-decode+blas"

    @property
    def nbytes(self) -> int:
        return self._codes.nbytes

    def _search_batch(self, queries: Codes, top_k: int) -> SearchResult:
        assert isinstance(queries, DenseCodes)
        transformed = self._codes.transformed(queries.values)
        return ranking.torch_top_k(
            lambda start, stop: torch.from_numpy(self._codes[start:stop].transformed_scores(transformed)), top_k,
            n=len(self), block_rows=code_kinds.SCORE_BLOCK_ROWS)


register_compressors = adds_compressors(TQCompressor)


register_index_backends = adds_index_backends(TQIndex)
