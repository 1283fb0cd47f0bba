"""A third-party code kind gets approximate search by implementing its scorer, nothing more.

The test plugin registers a toy method whose documents are a new kind (``toy_ternary``: each dimension -1, 0 or
+1 as int8) searched with dense float queries, an exact index backend for that pair, and names the backend's
``ann_scorer``: a ``CellScorer`` that implements ``score_rows`` (and ``stand_in_queries``, the calibration queries
made from documents, since the toy compressor does not decode). ``Compressor.index(codes, ann=...)``
then builds cells, routes, calibrates, filters and saves without anything else written for the kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch
from ann_support import data, recall

import adaptemb
from adaptemb import (
    AnnConfig,
    Budgets,
    CellScorer,
    Codes,
    Compressor,
    CompressorConfig,
    DenseCodes,
    Index,
    SearchResult,
    adds_compressors,
    adds_index_backends,
)


class TernaryCodes(Codes):
    """-1 / 0 / +1 per dimension (int8): a vector's signs where it is clearly away from zero."""

    kind = "toy_ternary"

    def __init__(self, values: np.ndarray) -> None:
        self.values, self.dim = np.asarray(values, np.int8), values.shape[1]

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, rows: slice | np.ndarray | Sequence[int]) -> TernaryCodes:
        return TernaryCodes(self.values[rows if isinstance(rows, slice) else np.asarray(rows)])

    @property
    def row_nbytes(self) -> int:
        return self.values.nbytes

    def to_dense(self) -> np.ndarray:
        return self.values.astype(np.float32)

    def similarity(self, other: Codes) -> np.ndarray:
        return self.to_dense() @ other.to_dense().T

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"values": self.values}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], dim: int) -> TernaryCodes:
        return cls(arrays["values"])

    @classmethod
    def concat(cls, parts: Sequence[TernaryCodes]) -> TernaryCodes:
        return cls(np.concatenate([p.values for p in parts]))


class TernaryCompressor(Compressor):
    """Documents as ternary codes of the centred embedding; queries stay float (asymmetric)."""

    name = "toy_ternary"
    Config = CompressorConfig
    doc_kind = "toy_ternary"
    symmetric = False
    test_params: ClassVar[dict] = {}

    @property
    def query_kind(self) -> str:
        return "dense"

    def _fit(self, x: torch.Tensor, **supervision: object) -> None:
        self._mean = x.mean(dim=0)
        self._cut = (x - self._mean).abs().mean()

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        centred = x - self._mean
        return TernaryCodes(torch.where(centred.abs() > self._cut, torch.sign(centred), 0).numpy())

    def _encode_queries(self, x: torch.Tensor, k: int | None) -> Codes:
        return DenseCodes((x - self._mean).numpy().astype(np.float32))

    def score(self, query_codes: Codes, doc_codes: Codes) -> np.ndarray:
        return query_codes.to_dense() @ doc_codes.to_dense().T

    def _budgets(self) -> Budgets:
        return Budgets(low=self.dim, high=self.dim, default=self.dim)

    def _state(self) -> dict[str, torch.Tensor]:
        return {"mean": self._mean, "cut": self._cut.reshape(1)}

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self._mean, self._cut = tensors["mean"], tensors["cut"][0]


class TernaryScorer(CellScorer):
    """The kind's scorer: float queries against a run of ternary documents, nothing else."""

    name = "toy-ternary-cells"
    pairs = (("dense", "toy_ternary"),)
    calls: ClassVar[list[int]] = []

    def score_rows(self, queries: Codes, docs: Codes) -> np.ndarray:
        TernaryScorer.calls.append(len(docs))
        return queries.to_dense() @ docs.to_dense().T

    def stand_in_queries(self, docs: Codes) -> Codes:
        """Calibration queries made from documents (the compressor does not decode): their -1/0/+1 rows as floats."""
        return DenseCodes(docs.to_dense())


class TernaryIndex(Index):
    """The exact index of the pair (brute force), naming the approximate layer's scorer."""

    name = "toy-ternary-flat"
    pairs = (("dense", "toy_ternary"),)
    ann_scorer = TernaryScorer

    def _search_batch(self, queries: Codes, top_k: int) -> SearchResult:
        scores = queries.to_dense() @ self.docs.to_dense().T
        ids = np.argsort(-scores, axis=1, kind="stable")[:, :top_k]
        return np.take_along_axis(scores, ids, axis=1), ids


class _ToyPlugin:
    register_compressors = staticmethod(adds_compressors(TernaryCompressor))
    register_index_backends = staticmethod(adds_index_backends(TernaryIndex))


@pytest.fixture
def toy(fresh_plugins: None) -> tuple:
    adaptemb.register_plugin(_ToyPlugin(), name="toy-ternary-plugin")
    corpus, _ = data()
    compressor = adaptemb.fit(corpus[:4000], "toy_ternary")
    return compressor, compressor.encode(corpus)


def test_a_third_party_kind_gets_approximate_search_through_its_scorer(toy: tuple, tmp_path: Path) -> None:
    compressor, codes = toy
    _, queries = data()
    exact = compressor.index(codes, device="cpu")
    assert exact.backend == "numpy" and type(exact.inner).__name__ == "TernaryIndex"
    TernaryScorer.calls.clear()
    ann = compressor.index(codes, ann=AnnConfig(cells=32, calibration_queries=200))
    assert ann.backend == "ann:toy-ternary-cells" and TernaryScorer.calls  # built and calibrated through it
    exact_scores, exact_ids = exact.search(queries, 10)
    TernaryScorer.calls.clear()
    scores, ids = ann.search(queries, 10, nprobe=32)
    np.testing.assert_array_equal(ids, exact_ids)
    np.testing.assert_allclose(scores, exact_scores, rtol=1e-5)
    assert max(TernaryScorer.calls) < len(codes)  # cell by cell, never the whole collection at once
    assert recall(ann.search(queries, 10, nprobe=8)[1], exact_ids) >= 0.6
    assert ann.calibration is not None and ann.calibration.recall[-1] == pytest.approx(1.0)
    allowed = np.arange(0, len(codes), 97)
    _, filtered = ann.search(queries[:20], 10, filter=allowed, nprobe=2)
    assert np.isin(filtered, allowed).all()
    loaded = adaptemb.load_index(ann.save(tmp_path / "toy.safetensors"))
    np.testing.assert_array_equal(loaded.search(queries[:50], 10, nprobe=8)[1], ann.search(queries[:50], 10, nprobe=8)[1])


def test_a_kind_without_a_scorer_is_scanned_through_the_compressors_score(toy: tuple) -> None:
    compressor, codes = toy
    _, queries = data()
    TernaryIndex.ann_scorer = None
    try:
        ann = compressor.index(codes, ann=AnnConfig(cells=16, calibration_queries=0))
    finally:
        TernaryIndex.ann_scorer = TernaryScorer
    assert ann.backend == "ann:score-function"
    np.testing.assert_array_equal(ann.search(queries[:30], 10, nprobe=16)[1],
                                  compressor.index(codes, device="cpu").search(queries[:30], 10)[1])
