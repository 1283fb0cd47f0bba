"""The contract every compressor must honour, as a pytest class plugin authors reuse.

Subclass :class:`CompressorContract` in your test module and name your method::

    from adaptemb.testing import CompressorContract

    class TestMyMethod(CompressorContract):
        method = "mymethod"          # registered name
        params = {"h": 64}           # optional, merged over the class's ``test_params``

pytest then checks shapes and budgets, seed determinism, save -> load (in this process and in a
fresh one) giving identical codes, exact storage accounting, the codes file round trip, the method's
index returning the top-10 of its own ``score`` (and saving and loading), ONNX export reproducing
``encode`` under onnxruntime (for methods that export), that bad inputs are rejected with clear
errors, and that all-zero rows are data: a method that encodes directions (``normalizes_rows``) fits
on the other rows (counted, one ``ZeroRowsWarning``) and gives a zero row the empty code, in memory, in
streaming encode and in its ONNX graph; every method encodes zero rows and searches zero queries to
finite scores. The fixtures (``contract_data``, ``contract_params``, ``contract_fitted``) and the ``slow`` and
``gpu`` markers come from adaptemb's pytest plugin (``adaptemb.pytest_plugin``), which pytest loads by
itself wherever adaptemb is installed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

import adaptemb
from adaptemb.codes import Codes
from adaptemb.errors import InvalidConfigError, NotFittedError
from adaptemb.method import Compressor
from adaptemb.ranking import top_k

Data = tuple[np.ndarray, np.ndarray]
"""Unit-norm rows and their cluster ids (``clustered_embeddings`` output)."""


def clustered_embeddings(n: int = 240, dim: int = 32, clusters: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Unit-norm float32 rows around ``clusters`` random centres, and each row's cluster id."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    labels = rng.integers(0, clusters, size=n)
    rows = centres[labels] + 0.35 * rng.standard_normal((n, dim))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows.astype(np.float32), labels


def with_zero_rows(x: np.ndarray, every: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """A copy of ``x`` with every ``every``-th row (from row 0) set to zero, and the boolean mask of those rows."""
    data = x.copy()
    zero = np.arange(len(x)) % every == 0
    data[zero] = 0
    return data, zero


def code_arrays(codes: Codes) -> dict[str, np.ndarray]:
    """The arrays behind codes, for exact comparisons."""
    return codes.to_arrays()


def assert_same_codes(left: Codes, right: Codes) -> None:
    """Codes of the same kind with bit-identical arrays."""
    assert type(left) is type(right) and left.dim == right.dim
    a, b = code_arrays(left), code_arrays(right)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def assert_top_k_matches(got: tuple[np.ndarray, np.ndarray], scores: np.ndarray, k: int, *, tol: float = 1e-4) -> None:
    """``got`` (scores, ids) is the top-``k`` of the (n_queries, n_docs) ``scores`` matrix, ties aside.

    The returned scores equal the ``k`` best of each row (within ``tol``, relative to the row's scale),
    every returned id really has the score returned for it, ids are distinct, and any id that differs
    from the brute-force top-k has a score tied (within ``tol``) with the k-th best.
    """
    got_scores, got_ids = got
    k = min(k, scores.shape[1])
    want_scores, want_ids = top_k(np.asarray(scores, dtype=np.float32), k)
    assert got_ids.shape == (scores.shape[0], k) and got_scores.shape == got_ids.shape
    atol = tol * max(1.0, float(np.abs(want_scores).max(initial=0.0)))
    np.testing.assert_allclose(got_scores, want_scores, rtol=tol, atol=atol)
    np.testing.assert_allclose(np.take_along_axis(scores, got_ids, axis=1), got_scores, rtol=tol, atol=atol)
    for row, (ids, expected) in enumerate(zip(got_ids, want_ids)):
        assert len(set(ids.tolist())) == k, f"query {row}: repeated ids {ids}"
        kth = want_scores[row, -1]
        for doc in set(ids.tolist()) ^ set(expected.tolist()):
            assert abs(scores[row, doc] - kth) <= atol + tol * abs(kth), f"query {row}: doc {doc} is not tied at the cut"


MIN_FLIPS_ALLOWED = 4


def assert_close_codes(left: Codes, right: Codes, *, rtol: float = 1e-3, max_flips: float = 1e-3) -> None:
    """Codes that stand for the same vectors up to float rounding: ``to_dense()`` values agree within
    ``rtol`` except for at most a ``max_flips`` fraction of entries (ties that last-bit float
    differences can tip, e.g. a top-k boundary or an int8 rounding step), and never fewer than
    ``MIN_FLIPS_ALLOWED`` entries: on a small matrix a fraction allows less than one tie (mrl+sq's
    240 x 8 codes of the contract data showed 2 flipped rounding steps for one thread count)."""
    assert type(left) is type(right) and left.dim == right.dim and len(left) == len(right)
    a, b = left.to_dense(), right.to_dense()
    flips = int((~np.isclose(a, b, rtol=rtol, atol=rtol)).sum())
    assert flips <= max(max_flips * a.size, MIN_FLIPS_ALLOWED), f"{flips} of {a.size} entries differ"


class CompressorContract:
    """Shared contract tests; set ``method`` (and optionally ``params``) in a subclass."""

    method: ClassVar[str]
    params: ClassVar[dict[str, Any]] = {}
    fresh_process: ClassVar[bool] = True
    """Set False for a plugin registered at run time (a fresh process cannot see it)."""
    allow_brute_force: ClassVar[bool] = True
    """Whether ``index()`` may fall back to brute force through ``score`` (built-in methods may not)."""

    # fixtures ``contract_data``, ``contract_params`` and ``contract_fitted``: adaptemb.pytest_plugin

    # -- the contract -------------------------------------------------------------------------

    def test_registered_with_strict_config(self) -> None:
        info = adaptemb.get_registry().info(self.method)
        assert info.cls.name == self.method
        assert info.cls.Config.model_config.get("extra") == "forbid"
        assert info.budgets, "set budget_help: one line saying what k means"
        with pytest.raises(InvalidConfigError, match="unknown parameter 'no_such_param'"):
            adaptemb.get_compressor(self.method, no_such_param=1)

    def test_implements_the_hooks_not_the_public_methods(self) -> None:
        """``encode`` and ``encode_queries`` are the core's (they read ``input_kind``, validate, batch): a method
        implements ``_encode`` / ``_encode_natural`` / ``_encode_queries`` and declares ``symmetric``."""
        cls = adaptemb.get_registry().get(self.method)
        assert cls.encode is Compressor.encode, f"{self.method} overrides encode: implement _encode instead"
        assert cls.encode_queries is Compressor.encode_queries, (
            f"{self.method} overrides encode_queries: implement _encode_queries (and declare symmetric = False)")

    def test_symmetric_methods_encode_queries_like_documents(self, contract_fitted: Compressor,
                                                             contract_data: Data) -> None:
        """A method that declares ``symmetric`` (the default) encodes queries exactly as documents."""
        if not contract_fitted.symmetric:
            pytest.skip(f"{self.method} encodes queries its own way (symmetric = False)")
        x = contract_data[0][:20]
        assert_same_codes(contract_fitted.encode_queries(x), contract_fitted.encode(x))

    def test_encode_shapes_and_budgets(self, contract_fitted: Compressor, contract_data: Data) -> None:
        x = contract_data[0]
        budgets = contract_fitted.budgets()
        assert 1 <= budgets.low <= budgets.default <= budgets.high
        for k in _budgets_to_check(contract_fitted):
            codes = contract_fitted.encode(x, k=k)
            assert len(codes) == len(x)
            assert codes.to_dense().shape == (len(x), codes.dim)
            assert codes.to_dense().dtype == np.float32
            active = codes.active_counts()
            assert active.shape == (len(x),)
            if not budgets.fixed and budgets.bounds_active:
                assert active.max() <= (budgets.default if k is None else k)

    def test_batched_encoding_equals_one_pass(self, contract_fitted: Compressor, contract_data: Data) -> None:
        # BLAS may sum in another order for another batch size, so equal up to float rounding
        for k in _budgets_to_check(contract_fitted):
            assert_close_codes(contract_fitted.encode(contract_data[0], k=k, batch_size=7), contract_fitted.encode(contract_data[0], k=k))
        assert_same_codes(contract_fitted.encode(torch.from_numpy(contract_data[0])), contract_fitted.encode(contract_data[0]))

    def test_budget_start_is_none_or_an_unfitted_fit_of_that_budget(self, contract_fitted: Compressor,
                                                                     contract_data: Data) -> None:
        k, rows = contract_fitted.budgets().default, contract_data[0]
        start = contract_fitted.budget_start(k)
        if start is not None:  # a method whose fit is a starting point for other budgets' fits
            assert type(start) is type(contract_fitted) and not start.is_fitted
            assert start.config == contract_fitted.config.model_copy(update={"k": k})
            assert start.fit(rows).encode(rows[:5]).bytes_per_vector == contract_fitted.encode(rows[:5]).bytes_per_vector

    def test_stand_in_queries_are_none_or_query_codes_of_each_document(self, contract_fitted: Compressor,
                                                                       contract_data: Data) -> None:
        docs = contract_fitted.encode(contract_data[0][:7])
        made = contract_fitted.stand_in_queries(docs)
        if made is not None:  # a method that makes an approximate index's sample queries itself
            assert made.kind == contract_fitted.query_kind and len(made) == 7
            assert np.isfinite(contract_fitted.score(made, docs)).all()

    def test_seed_determinism(self, contract_data: Data, contract_params: dict[str, Any]) -> None:
        first = adaptemb.get_compressor(self.method, seed=3, **contract_params).fit(contract_data[0])
        second = adaptemb.get_compressor(self.method, seed=3, **contract_params).fit(contract_data[0])
        assert_same_codes(first.encode(contract_data[0]), second.encode(contract_data[0]))

    def test_save_load_identical_codes(self, contract_fitted: Compressor, contract_data: Data, tmp_path: Path) -> None:
        path = contract_fitted.save(tmp_path / "model.safetensors")
        loaded = adaptemb.load(path)
        assert loaded.name == contract_fitted.name and loaded.config == contract_fitted.config and loaded.dim == contract_fitted.dim
        assert loaded.budgets() == contract_fitted.budgets()
        for k in _budgets_to_check(contract_fitted):
            assert_same_codes(contract_fitted.encode(contract_data[0], k=k), loaded.encode(contract_data[0], k=k))

    @pytest.mark.slow  # a new Python process (imports torch and adaptemb): 15-28 s each, measured under load
    def test_save_load_in_fresh_process(self, contract_fitted: Compressor, contract_data: Data, tmp_path: Path) -> None:
        if not self.fresh_process:
            pytest.skip("plugin registered at run time; a fresh process cannot load it")
        model = contract_fitted.save(tmp_path / "model.safetensors")
        np.save(tmp_path / "x.npy", contract_data[0])
        script = textwrap.dedent(
            f"""
            import numpy as np, adaptemb
            codes = adaptemb.load({str(model)!r}).encode(np.load({str(tmp_path / 'x.npy')!r}))
            adaptemb.save_codes(codes, {str(tmp_path / 'codes.npz')!r})
            """
        )
        subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
        assert_same_codes(contract_fitted.encode(contract_data[0]), adaptemb.load_codes(tmp_path / "codes.npz"))

    def test_storage_accounting_is_exact(self, contract_fitted: Compressor, contract_data: Data) -> None:
        for k in _budgets_to_check(contract_fitted):
            codes = contract_fitted.encode(contract_data[0], k=k)
            arrays = codes.to_arrays()
            assert codes.nbytes == sum(a.nbytes for a in arrays.values())
            assert codes.nbytes == codes.row_nbytes + codes.shared_nbytes
            assert codes.bytes_per_vector == pytest.approx(codes.row_nbytes / len(codes))
            half = codes[np.arange(len(codes) // 2)]
            assert half.row_nbytes <= codes.row_nbytes and half.shared_nbytes == codes.shared_nbytes

    def test_codes_file_round_trip(self, contract_fitted: Compressor, contract_data: Data, tmp_path: Path) -> None:
        codes = contract_fitted.encode(contract_data[0])
        adaptemb.save_codes(codes, tmp_path / "codes.npz")
        assert_same_codes(codes, adaptemb.load_codes(tmp_path / "codes.npz"))

    def test_scores_keep_cluster_structure(self, contract_fitted: Compressor, contract_data: Data) -> None:
        x, labels = contract_data
        budget = contract_fitted.budgets().high
        scores = contract_fitted.score(contract_fitted.encode_queries(x, k=budget), contract_fitted.encode(x, k=budget))
        assert scores.shape == (len(x), len(x)) and np.isfinite(scores).all()
        np.fill_diagonal(scores, -np.inf)
        nearest = scores.argmax(axis=1)
        assert (labels[nearest] == labels).mean() >= 0.9

    def test_fits_from_a_file(self, contract_fitted: Compressor, contract_data: Data, contract_params: dict[str, Any],
                              tmp_path: Path) -> None:
        """``fit(path)`` streams the file: a method that fits a sample of the stream fits exactly as on the array
        (the sample is every row when the stream is shorter than ``stream_sample_rows``); a method that trains
        on every row (``trains_on_stream``) keeps its budgets and the cluster structure."""
        x, labels = contract_data
        np.save(tmp_path / "rows.npy", x)
        streamed = adaptemb.get_compressor(self.method, **contract_params).fit(tmp_path / "rows.npy")
        assert streamed.dim == x.shape[1] and streamed.budgets() == contract_fitted.budgets()
        assert streamed.fit_report is not None and streamed.fit_report["stream"]["rows"] == len(x)
        if not streamed.trains_on_stream:
            for k in _budgets_to_check(contract_fitted):
                assert_same_codes(streamed.encode(x, k=k), contract_fitted.encode(x, k=k))
            return
        budget = streamed.budgets().high
        scores = streamed.score(streamed.encode_queries(x, k=budget), streamed.encode(x, k=budget))
        np.fill_diagonal(scores, -np.inf)
        assert (labels[scores.argmax(axis=1)] == labels).mean() >= 0.9

    def test_search_agrees_with_score(self, contract_fitted: Compressor, contract_data: Data) -> None:
        x = contract_data[0]
        docs = contract_fitted.encode(x)
        got = contract_fitted.search(x[:20], docs, top_k=5)
        assert got[1].shape == (20, 5)
        assert_top_k_matches(got, contract_fitted.score(contract_fitted.encode_queries(x[:20]), docs), 5)

    def test_index_returns_the_top_10_of_score(self, contract_fitted: Compressor, contract_data: Data) -> None:
        """``index(docs).search(q, 10)`` is the top-10 of ``score(encode_queries(q), docs)`` at every budget,
        for raw query embeddings and for query codes alike."""
        x = contract_data[0]
        queries = x[:40] + 0.05 * np.random.default_rng(1).standard_normal(x[:40].shape).astype(np.float32)
        for k in _budgets_to_check(contract_fitted):
            docs = contract_fitted.encode(x, k=k)
            index = contract_fitted.index(docs, device="cpu")
            assert len(index) == len(x) and isinstance(index.backend, str) and index.backend
            if not self.allow_brute_force:
                assert not index.brute_force, f"{self.method} fell back to brute force through score()"
            want = contract_fitted.score(contract_fitted.encode_queries(queries, k=index.budget), docs)
            assert_top_k_matches(index.search(queries, 10), want, 10)
            assert_top_k_matches(index.search(index.encode_queries(queries), 10), want, 10)

    def test_index_saves_and_loads(self, contract_fitted: Compressor, contract_data: Data, tmp_path: Path) -> None:
        x = contract_data[0]
        index = contract_fitted.index(contract_fitted.encode(x), device="cpu")
        index.save(tmp_path / "index.safetensors")
        loaded = adaptemb.load_index(tmp_path / "index.safetensors", device="cpu")
        assert len(loaded) == len(index) and loaded.backend == index.backend and loaded.budget == index.budget
        scores, ids = index.search(x[:15], 10)
        again_scores, again_ids = loaded.search(x[:15], 10)
        np.testing.assert_array_equal(again_ids, ids)
        np.testing.assert_array_equal(again_scores, scores)

    def test_decode_shape(self, contract_fitted: Compressor, contract_data: Data) -> None:
        """A method that declares ``decodes`` reconstructs (n, d) float32 rows; any other refuses to."""
        codes = contract_fitted.encode(contract_data[0])
        if not contract_fitted.decodes:
            with pytest.raises(NotImplementedError):
                contract_fitted.decode(codes)
            pytest.skip(f"{self.method} does not decode")
        recon = contract_fitted.decode(codes)
        assert recon.shape == contract_data[0].shape and recon.dtype == np.float32

    @pytest.mark.slow
    def test_onnx_export_matches_encode(self, contract_fitted: Compressor, contract_data: Data, tmp_path: Path) -> None:
        for module in ("onnx", "onnxruntime", "onnxscript"):
            pytest.importorskip(module)
        budget = contract_fitted.budgets().default
        try:
            parity = contract_fitted.export_onnx(tmp_path / "encoder.onnx", k=budget, sample=contract_data[0][:64])
        except NotImplementedError:
            pytest.skip(f"{self.method} does not export to ONNX")
        assert parity.rows == 64 and (tmp_path / "encoder.onnx").stat().st_size > 0

    @pytest.mark.parametrize(
        ("bad", "error", "message"),
        [
            (np.full((4, 32), np.nan, dtype=np.float32), ValueError, "NaN"),
            (np.ones(32, dtype=np.float32), ValueError, "2-D"),
            (np.ones((0, 32), dtype=np.float32), ValueError, "empty"),
            (np.ones((4, 32), dtype=np.int64), TypeError, "floating"),
            (np.ones((4, 31), dtype=np.float32), ValueError, "dimension 31"),
            ([[0.0] * 32], TypeError, "numpy array or torch tensor"),
        ],
        ids=["nan", "1d", "empty", "integer", "wrong-dim", "list"],
    )
    def test_rejects_bad_input(self, contract_fitted: Compressor, bad: Any, error: type[Exception], message: str) -> None:
        with pytest.raises(error, match=message):
            contract_fitted.encode(bad)

    def test_rejects_bad_fit_input(self, contract_params: dict[str, Any]) -> None:
        fresh = adaptemb.get_compressor(self.method, **contract_params)
        with pytest.raises(ValueError, match="NaN"):
            fresh.fit(np.full((8, 32), np.nan, dtype=np.float32))
        with pytest.raises(TypeError, match="floating"):
            fresh.fit(torch.ones(8, 32, dtype=torch.int32))
        with pytest.raises(NotFittedError):
            fresh.encode(np.ones((2, 32), dtype=np.float32))

    def test_query_sample_is_used_or_refused(self, contract_data: Data, contract_params: dict[str, Any],
                                             tmp_path: Path) -> None:
        """A method that judges fit-time choices by a sample of real queries (``"queries"`` in ``fit_inputs``) fits
        with one (seeded: the same codes twice; saved and loaded: the same codes) and refuses a sample of the wrong
        dimension, with NaN or empty, naming it; any other method refuses the sample, naming the methods that take one."""
        x = contract_data[0]
        sample = (x[::6] + 0.1 * np.random.default_rng(1).standard_normal(x[::6].shape)).astype(np.float32)
        fresh = adaptemb.get_compressor(self.method, **contract_params)
        if "queries" not in fresh.fit_inputs:
            with pytest.raises(InvalidConfigError, match="queries"):
                fresh.fit(x, queries=sample)
            return
        first, second = (adaptemb.get_compressor(self.method, seed=3, **contract_params).fit(x, queries=sample)
                         for _ in range(2))
        assert_same_codes(first.encode(x), second.encode(x))
        assert_same_codes(adaptemb.load(first.save(tmp_path / "model.safetensors")).encode(x), first.encode(x))
        for bad, message in ((sample[:, :31], "dimension 31"), (np.full_like(sample, np.nan), "NaN"), (sample[:0], "empty")):
            with pytest.raises(ValueError, match=message):
                adaptemb.get_compressor(self.method, **contract_params).fit(x, queries=bad)

    # -- all-zero rows are data -----------------------------------------------------------------

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
            _assert_finite(fitted.encode(data))
            return
        count = int(zero.sum())
        assert fitted.fit_report is not None and fitted.fit_report["zero_rows_skipped"] == count
        assert len(warned) == 1 and f"{count} of {len(x)} rows" in str(warned[0].message)
        alone = adaptemb.get_compressor(self.method, **contract_params).fit(data[~zero])
        assert alone.fit_report is not None and alone.fit_report["zero_rows_skipped"] == 0
        assert alone.budgets() == fitted.budgets()
        for k in _budgets_to_check(fitted):
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
            for k in _budgets_to_check(streamed):
                assert_same_codes(streamed.encode(x, k=k), in_memory.encode(x, k=k))

    def test_zero_rows_encode_to_the_empty_code(self, contract_fitted: Compressor, contract_data: Data) -> None:
        """A zero row encodes like every other zero row, leaves the other rows' codes alone and scores finite
        against every query; for a method that encodes directions its code is the empty one (no active feature,
        zero values: ``to_dense()`` all zero)."""
        x = contract_data[0]
        data, zero = with_zero_rows(x[:40], every=4)
        for k in _budgets_to_check(contract_fitted):
            codes = contract_fitted.encode(data, k=k)
            assert len(codes) == len(data)
            _assert_finite(codes)
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
        for k in _budgets_to_check(contract_fitted):
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

    @pytest.mark.slow
    def test_onnx_export_matches_encode_on_zero_rows(self, contract_fitted: Compressor, contract_data: Data,
                                                     tmp_path: Path) -> None:
        """The exported graph gives zero rows the codes ``encode`` gives them (as ``encoder_arrays`` lays them
        out), finite: no NaN from normalising a row of norm 0."""
        for module in ("onnx", "onnxruntime", "onnxscript"):
            pytest.importorskip(module)
        from adaptemb.onnx.sessions import run_onnx

        if not contract_fitted.exportable:
            pytest.skip(f"{self.method} does not export to ONNX")
        data, zero = with_zero_rows(contract_data[0][:64], every=4)
        budget = contract_fitted.budgets().default
        path = tmp_path / "encoder.onnx"
        contract_fitted.export_onnx(path, k=budget, sample=data)  # parity on every row, the zero ones included
        names = list(contract_fitted.encoder(budget).output_names)
        got = run_onnx(path, data[zero], names)
        want = contract_fitted.encoder_arrays(contract_fitted.encode(data[zero], k=budget), budget)
        for name in names:
            if got[name].dtype.kind == "f":
                assert np.isfinite(got[name]).all(), name
                np.testing.assert_allclose(got[name].astype(np.float64), want[name].astype(np.float64), atol=1e-4)
            else:
                np.testing.assert_array_equal(got[name].astype(np.int64), want[name].astype(np.int64))

    def test_rejects_budget_out_of_range(self, contract_fitted: Compressor, contract_data: Data) -> None:
        budgets = contract_fitted.budgets()
        for k in (budgets.low - 1, budgets.high + 1):
            with pytest.raises(ValueError, match=f"k={k}"):
                contract_fitted.encode(contract_data[0][:2], k=k)
        with pytest.raises(TypeError, match="integer"):
            contract_fitted.encode(contract_data[0][:2], k=2.5)  # type: ignore[arg-type]


def _fit_recording(method: str, params: dict[str, Any], x: Any) -> tuple[Compressor, list[warnings.WarningMessage]]:
    """A fresh ``method`` fitted on ``x``, and the ``ZeroRowsWarning``s the fit issued."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fitted = adaptemb.get_compressor(method, **params).fit(x)
    return fitted, [w for w in caught if issubclass(w.category, adaptemb.ZeroRowsWarning)]


def _assert_finite(codes: Codes) -> None:
    for name, array in codes.to_arrays().items():
        assert array.dtype.kind != "f" or np.isfinite(array).all(), f"{name} holds NaN or infinite values"


def _budgets_to_check(compressor: Compressor) -> list[int | None]:
    budgets = compressor.budgets()
    middle = (budgets.low + budgets.high) // 2 if budgets.values is None else budgets.values[len(budgets.values) // 2]
    chosen = [None, budgets.low, middle, budgets.high]
    return list(dict.fromkeys(chosen))
