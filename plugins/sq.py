"""``sq``: faiss scalar quantisation, 4, 6 or 8 bits per dimension (faiss ``IndexScalarQuantizer``).

Each dimension's range (min and max over the fit rows) is cut into 2^bits levels: the factory strings
``SQ4``, ``SQ6`` and ``SQ8``, d / 2, 3 d / 4 and d bytes per vector. The trained ranges do not depend on
the bit width, so one fit serves every budget. Queries stay float; faiss scores them against the decoded
codes (asymmetric inner product).
"""

from __future__ import annotations

from typing import Any, Literal

import faiss
import numpy as np
import torch
from pydantic import Field

from adaptemb import Budgets, CompressorConfig, adds_compressors, adds_index_backends

from .faiss_codes import METRIC, FaissCodes, FaissCodesIndex, FaissCompressor, faiss_training, scalar, table

QTYPES = {4: faiss.ScalarQuantizer.QT_4bit, 6: faiss.ScalarQuantizer.QT_6bit, 8: faiss.ScalarQuantizer.QT_8bit}
"""Bits per dimension -> faiss quantiser type (non-uniform: one range per dimension)."""


class SQCodes(FaissCodes):
    """faiss scalar-quantiser codes: ``ceil(d * bits / 8)`` bytes per row; tables ``sq_trained`` (2 d,) float32
    (faiss' per-dimension minimum then range) and ``sq_bits`` (1,) uint8."""

    kind = "sq"
    table_names = ("sq_trained", "sq_bits")

    @classmethod
    def build_faiss(cls, tables: dict[str, np.ndarray], dim: int) -> faiss.Index:
        bits = scalar(tables, "sq_bits")
        if bits not in QTYPES:
            raise ValueError(f"sq_bits must be one of {sorted(QTYPES)}; got {bits}")
        trained = table(tables, "sq_trained", (2 * dim,))
        index = faiss.IndexScalarQuantizer(dim, QTYPES[bits], METRIC)
        faiss.copy_array_to_vector(trained, index.sq.trained)
        index.is_trained = True
        return index

    def query_scores(self, queries: np.ndarray, **search: Any) -> np.ndarray:
        # faiss' SQ inner-product search is the dot product with the decoded components
        return self.decoded_scores(queries)


class SQConfig(CompressorConfig):
    k: Literal[4, 6, 8] = Field(8, description="Default bits per dimension: 4, 6 or 8.")


class SQCompressor(FaissCompressor):
    """faiss scalar quantisation (``SQ4``/``SQ6``/``SQ8``) with per-dimension min/max ranges."""

    name = "sq"
    role = "quantizer"
    Config = SQConfig
    budget_help = "bits per dimension: 4, 6 or 8 (d / 2, 3 d / 4 or d bytes per vector); one fit serves all"
    codes_class = SQCodes
    config: SQConfig

    def _fit(self, x: torch.Tensor, **supervision: object) -> None:
        index = faiss.index_factory(x.shape[1], f"SQ{self.config.k}", METRIC)
        with faiss_training():
            index.train(np.ascontiguousarray(x.numpy()))
        self._trained = torch.from_numpy(faiss.vector_to_array(index.sq.trained).astype(np.float32))
        self._reset_encoders()

    def tables(self, k: int) -> dict[str, np.ndarray]:
        return {"sq_trained": self._trained.numpy(), "sq_bits": np.array([k], dtype=np.uint8)}

    def _budgets(self) -> Budgets:
        return Budgets(low=min(QTYPES), high=max(QTYPES), default=self.config.k, values=tuple(sorted(QTYPES)),
                       bounds_active=False)

    def _state(self) -> dict[str, torch.Tensor]:
        return {"sq_trained": self._trained}

    def _state_shapes(self, dim: int) -> dict[str, tuple[int | str, ...]]:
        return {"sq_trained": (2 * dim,)}  # faiss' per-dimension minimum, then range

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self._trained = tensors["sq_trained"].float()
        if self._trained.ndim != 1 or self._trained.shape[0] % 2:
            raise ValueError(f"sq_trained must be 1-D of length 2 d; got {tuple(self._trained.shape)}")
        self._reset_encoders()


class SQIndex(FaissCodesIndex):
    """faiss' scalar-quantiser search (``IndexScalarQuantizer``, inner product)."""

    name = "faiss-sq"
    pairs = (("dense", "sq"),)


register_compressors = adds_compressors(SQCompressor)


register_index_backends = adds_index_backends(SQIndex)
