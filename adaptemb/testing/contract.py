"""``CompressorContract``: the pytest class every compressor passes (see ``adaptemb.testing``); the zero-row tests
are mixed in from ``adaptemb.testing.zero_rows``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

import adaptemb
from adaptemb.errors import InvalidConfigError, NotFittedError
from adaptemb.method import Compressor
from adaptemb.testing.asserts import (
    assert_close_codes,
    assert_same_codes,
    assert_top_k_matches,
    budgets_to_check,
)
from adaptemb.testing.data import Data, with_zero_rows
from adaptemb.testing.zero_rows import ZeroRowContract


class CompressorContract(ZeroRowContract):
    """Shared contract tests; set ``method`` (and optionally ``params``) in a subclass."""

    method: ClassVar[str]
    params: ClassVar[dict[str, Any]] = {}
    fresh_process: ClassVar[bool] = True
    """Set False for a plugin registered at run time (a fresh process cannot see it), or where another test loads
    the saved fit in a fresh process (adaptemb's own suite loads every built-in class's fit in one process)."""
    allow_brute_force: ClassVar[bool] = True
    """Whether ``index()`` may fall back to brute force through ``score`` (built-in methods may not)."""

    # fixtures ``contract_data``, ``contract_params`` and ``contract_fitted``: adaptemb.pytest_plugin

    @classmethod
    def fit_params(cls) -> dict[str, Any]:
        """What the contract fits the method with (``contract_params``): its ``test_params`` overlaid with ``params``."""
        return {**adaptemb.get_registry().get(cls.method).test_params, **cls.params}

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
        for k in budgets_to_check(contract_fitted):
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
        for k in budgets_to_check(contract_fitted):
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
        for k in budgets_to_check(contract_fitted):
            assert_same_codes(contract_fitted.encode(contract_data[0], k=k), loaded.encode(contract_data[0], k=k))

    @pytest.mark.slow  # a new Python process (imports torch and adaptemb): 15-28 s each, measured under load
    def test_save_load_in_fresh_process(self, contract_fitted: Compressor, contract_data: Data, tmp_path: Path) -> None:
        if not self.fresh_process:
            pytest.skip("fresh_process = False: registered at run time, or loaded in a fresh process by another test")
        model = contract_fitted.save(tmp_path / "model.safetensors")
        (codes,) = codes_from_fresh_process([model], contract_data[0], tmp_path)
        assert_same_codes(contract_fitted.encode(contract_data[0]), codes)

    def test_storage_accounting_is_exact(self, contract_fitted: Compressor, contract_data: Data) -> None:
        for k in budgets_to_check(contract_fitted):
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
            for k in budgets_to_check(contract_fitted):
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
        for k in budgets_to_check(contract_fitted):
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
        """A method that declares ``exportable`` exports a graph whose outputs match ``encode`` on every sample row
        (``export_onnx`` checks the parity), all-zero rows among them: finite, no NaN from normalising a row of norm 0;
        any other method refuses to export."""
        for module in ("onnx", "onnxruntime", "onnxscript"):
            pytest.importorskip(module)
        from adaptemb.onnx.sessions import run_onnx

        budget, path = contract_fitted.budgets().default, tmp_path / "encoder.onnx"
        data, zero = with_zero_rows(contract_data[0][:64], every=4)
        if not contract_fitted.exportable:
            with pytest.raises(NotImplementedError):
                contract_fitted.export_onnx(path, k=budget, sample=data)
            pytest.skip(f"{self.method} does not export to ONNX")
        parity = contract_fitted.export_onnx(path, k=budget, sample=data)
        assert parity.rows == 64 and path.stat().st_size > 0
        names = list(contract_fitted.encoder(budget).output_names)
        got = run_onnx(path, data[zero], names)
        want = contract_fitted.encoder_arrays(contract_fitted.encode(data[zero], k=budget), budget)
        for name in names:
            if got[name].dtype.kind == "f":
                assert np.isfinite(got[name]).all(), name
                np.testing.assert_allclose(got[name].astype(np.float64), want[name].astype(np.float64), atol=1e-4)
            else:
                np.testing.assert_array_equal(got[name].astype(np.int64), want[name].astype(np.int64))

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

    def test_rejects_budget_out_of_range(self, contract_fitted: Compressor, contract_data: Data) -> None:
        budgets = contract_fitted.budgets()
        for k in (budgets.low - 1, budgets.high + 1):
            with pytest.raises(ValueError, match=f"k={k}"):
                contract_fitted.encode(contract_data[0][:2], k=k)
        with pytest.raises(TypeError, match="integer"):
            contract_fitted.encode(contract_data[0][:2], k=2.5)  # type: ignore[arg-type]

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


def codes_from_fresh_process(models: list[Path], x: np.ndarray, work: Path) -> list[Any]:
    """The codes of ``x`` from each saved compressor of ``models``, each loaded and encoded in one new Python process
    (one start, which imports torch and adaptemb, for all of them); ``work``: a folder for the rows and codes."""
    np.save(work / "x.npy", x)
    outputs = [str(work / f"fresh_codes_{i}.npz") for i in range(len(models))]
    script = textwrap.dedent(
        f"""
        import numpy as np, adaptemb
        x = np.load({str(work / "x.npy")!r})
        for model, out in zip({[str(m) for m in models]!r}, {outputs!r}):
            adaptemb.save_codes(adaptemb.load(model).encode(x), out)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    return [adaptemb.load_codes(out) for out in outputs]
