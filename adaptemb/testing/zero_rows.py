"""The contract's tests that all-zero rows are data (mixed into ``CompressorContract``): a method that encodes
directions (``normalizes_rows``) fits on the other rows (counted, one ``ZeroRowsWarning``) and gives a zero row the
empty code, in memory and in streaming encode (in its ONNX graph: ``test_onnx_export_matches_encode``); every
method encodes zero rows and searches zero queries to finite scores."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import adaptemb
from adaptemb.method import Compressor
from adaptemb.testing.asserts import (
    assert_close_codes,
    assert_finite_codes,
    assert_same_codes,
    assert_top_k_matches,
    budgets_to_check,
)
from adaptemb.testing.data import Data, with_zero_rows


class ZeroRowContract:
    """All-zero rows as data; mixed into ``CompressorContract`` (which sets ``method``)."""

    method: ClassVar[str]

    def test_fit_leaves_out_zero_rows_of_direction_methods(self, contract_data: Data, contract_params: dict[str, Any],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
        """With 10 % all-zero rows, a method that encodes directions (``normalizes_rows``) fits exactly as on the
        other rows alone, counts the zero rows in ``fit_report["zero_rows_skipped"]`` and warns once; any other
        method fits on them as on any row, without a warning."""
        monkeypatch.setenv("ADAPTEMB_NUM_THREADS", "1")  # two fits compared bit for bit: one thread count
        x = contract_data[0]
        data, zero = with_zero_rows(x)
        fitted, warned = _fit_recording(self.method, contract_params, data)
        if not fitted.normalizes_rows:
            assert not warned and not (fitted.fit_report or {}).get("zero_rows_skipped")
            assert_finite_codes(fitted.encode(data))
            return
        count = int(zero.sum())
        assert fitted.fit_report is not None and fitted.fit_report["zero_rows_skipped"] == count
        assert len(warned) == 1 and f"{count} of {len(x)} rows" in str(warned[0].message)
        alone = adaptemb.get_compressor(self.method, **contract_params).fit(data[~zero])
        assert alone.fit_report is not None and alone.fit_report["zero_rows_skipped"] == 0
        assert alone.budgets() == fitted.budgets()
        for k in budgets_to_check(fitted):
            assert_same_codes(fitted.encode(x, k=k), alone.encode(x, k=k))

    def test_all_zero_fit_input_is_refused_by_direction_methods(self, contract_params: dict[str, Any]) -> None:
        fresh = adaptemb.get_compressor(self.method, **contract_params)
        if not fresh.normalizes_rows:
            pytest.skip(f"{self.method} does not encode directions: a zero row is a point like any other")
        with pytest.raises(ValueError, match="all 40 rows are all zero"):
            fresh.fit(np.zeros((40, 32), dtype=np.float32))

    def test_fits_from_a_file_with_zero_rows(self, contract_data: Data, contract_params: dict[str, Any], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
        """``fit(path)`` over a file with 10 % all-zero rows: a direction method leaves them out of every pass
        (counted, one warning); a method that fits a sample of the stream fits exactly as on the array."""
        monkeypatch.setenv("ADAPTEMB_NUM_THREADS", "1")
        x = contract_data[0]
        data, zero = with_zero_rows(x)
        np.save(tmp_path / "rows.npy", data)
        streamed, warned = _fit_recording(self.method, contract_params, tmp_path / "rows.npy")
        assert streamed.fit_report is not None and streamed.fit_report["stream"]["rows"] == len(x)
        if streamed.normalizes_rows:
            assert streamed.fit_report["zero_rows_skipped"] == int(zero.sum()) and len(warned) == 1
        else:
            assert not warned
        if not streamed.trains_on_stream:
            in_memory, _ = _fit_recording(self.method, contract_params, data)
            for k in budgets_to_check(streamed):
                assert_same_codes(streamed.encode(x, k=k), in_memory.encode(x, k=k))

    def test_zero_rows_encode_to_the_empty_code(self, contract_fitted: Compressor, contract_data: Data) -> None:
        """A zero row encodes like every other zero row, leaves the other rows' codes alone and scores finite
        against every query; for a method that encodes directions its code is the empty one (no active feature,
        zero values: ``to_dense()`` all zero)."""
        x = contract_data[0]
        data, zero = with_zero_rows(x[:40], every=4)
        for k in budgets_to_check(contract_fitted):
            codes = contract_fitted.encode(data, k=k)
            assert len(codes) == len(data)
            assert_finite_codes(codes)
            assert_close_codes(codes[np.flatnonzero(~zero)], contract_fitted.encode(data[~zero], k=k))
            dense = codes.to_dense()[zero]
            np.testing.assert_allclose(dense, np.broadcast_to(dense[0], dense.shape), rtol=1e-5, atol=1e-6)
            if contract_fitted.normalizes_rows:
                assert not dense.any(), "a zero row must get the empty code"
            scores = contract_fitted.score(contract_fitted.encode_queries(x[40:60], k=k), codes)
            assert np.isfinite(scores).all()

    def test_zero_queries_search_to_finite_scores(self, contract_fitted: Compressor, contract_data: Data) -> None:
        """Zero queries among others, against documents with zero rows: ``score``, ``index(...).search`` and
        ``search`` give finite scores (0 for every document where the method encodes directions), the index the
        top-10 of ``score``."""
        x = contract_data[0]
        queries, zero = with_zero_rows(x[:20], every=2)
        docs_rows, _ = with_zero_rows(x)
        for k in budgets_to_check(contract_fitted):
            docs = contract_fitted.encode(docs_rows, k=k)
            index = contract_fitted.index(docs, device="cpu")
            want = contract_fitted.score(contract_fitted.encode_queries(queries, k=index.budget), docs)
            assert np.isfinite(want).all()
            if contract_fitted.normalizes_rows:
                assert not want[zero].any(), "a zero query must score 0 against every document"
            got = index.search(queries, 10)
            assert np.isfinite(got[0]).all()
            assert_top_k_matches(got, want, 10)
            scores, _ = contract_fitted.search(queries, docs, top_k=5, k=index.budget)
            assert np.isfinite(scores).all()

    def test_streaming_encode_of_zero_rows_equals_encode(self, contract_fitted: Compressor, contract_data: Data,
                                                         tmp_path: Path) -> None:
        data, _ = with_zero_rows(contract_data[0])
        np.save(tmp_path / "rows.npy", data)
        adaptemb.encode_files(tmp_path / "rows.npy", contract_fitted, tmp_path / "codes", shard_rows=100,
                              batch_rows=30, progress=False)
        assert_close_codes(adaptemb.read_code_shards(tmp_path / "codes"), contract_fitted.encode(data))


def _fit_recording(method: str, params: dict[str, Any], x: Any) -> tuple[Compressor, list[warnings.WarningMessage]]:
    """A fresh ``method`` fitted on ``x``, and the ``ZeroRowsWarning``s the fit issued."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fitted = adaptemb.get_compressor(method, **params).fit(x)
    return fitted, [w for w in caught if issubclass(w.category, adaptemb.ZeroRowsWarning)]
