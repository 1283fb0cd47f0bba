"""The contract every compressor must honour, as a pytest class plugin authors reuse.

Subclass :class:`CompressorContract` in your test module and name your method::

    from adaptemb.testing import CompressorContract

    class TestMyMethod(CompressorContract):
        method = "mymethod"          # registered name
        params = {"h": 64}           # optional, merged over the class's ``test_params``

pytest then checks shapes and budgets, seed determinism, save -> load (in this process and in a
fresh one) giving identical codes, exact storage accounting, the codes file round trip, scoring and
search agreeing, ONNX export reproducing ``encode`` under onnxruntime (for methods that export), and
that bad inputs are rejected with clear errors.
"""

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
from adaptemb.codes import Codes
from adaptemb.compressor import Compressor
from adaptemb.errors import InvalidConfigError, NotFittedError
from adaptemb.ranking import top_k


def clustered_embeddings(n: int = 240, dim: int = 32, clusters: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Unit-norm float32 rows around ``clusters`` random centres, and each row's cluster id."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    labels = rng.integers(0, clusters, size=n)
    rows = centres[labels] + 0.35 * rng.standard_normal((n, dim))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows.astype(np.float32), labels


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


def assert_close_codes(left: Codes, right: Codes, *, rtol: float = 1e-3, max_flips: float = 1e-3) -> None:
    """Codes that stand for the same vectors up to float rounding: ``to_dense()`` values agree within
    ``rtol`` except for at most a ``max_flips`` fraction of entries (ties that last-bit float
    differences can tip, e.g. a top-k boundary or an int8 rounding step)."""
    assert type(left) is type(right) and left.dim == right.dim and len(left) == len(right)
    a, b = left.to_dense(), right.to_dense()
    assert (~np.isclose(a, b, rtol=rtol, atol=rtol)).mean() <= max_flips


class CompressorContract:
    """Shared contract tests; set ``method`` (and optionally ``params``) in a subclass."""

    method: ClassVar[str]
    params: ClassVar[dict[str, Any]] = {}
    fresh_process: ClassVar[bool] = True
    """Set False for a plugin registered at run time (a fresh process cannot see it)."""

    # -- fixtures -----------------------------------------------------------------------------

    @pytest.fixture(scope="class")
    def data(self) -> tuple[np.ndarray, np.ndarray]:
        return clustered_embeddings()

    @pytest.fixture(scope="class")
    def config_params(self) -> dict[str, Any]:
        cls = adaptemb.get_registry().get(self.method)
        return {**cls.test_params, **self.params}

    @pytest.fixture(scope="class")
    def fitted(self, data: tuple[np.ndarray, np.ndarray], config_params: dict[str, Any]) -> Compressor:
        return adaptemb.get_compressor(self.method, **config_params).fit(data[0])

    # -- the contract -------------------------------------------------------------------------

    def test_registered_with_strict_config(self) -> None:
        info = adaptemb.get_registry().info(self.method)
        assert info.cls.name == self.method
        assert info.cls.Config.model_config.get("extra") == "forbid"
        assert info.budgets, "set budget_help: one line saying what k means"
        with pytest.raises(InvalidConfigError, match="unknown parameter 'no_such_param'"):
            adaptemb.get_compressor(self.method, no_such_param=1)

    def test_encode_shapes_and_budgets(self, fitted: Compressor, data: tuple[np.ndarray, np.ndarray]) -> None:
        x = data[0]
        budgets = fitted.budgets()
        assert 1 <= budgets.low <= budgets.default <= budgets.high
        for k in _budgets_to_check(fitted):
            codes = fitted.encode(x, k=k)
            assert len(codes) == len(x)
            assert codes.to_dense().shape == (len(x), codes.dim)
            assert codes.to_dense().dtype == np.float32
            active = codes.active_counts()
            assert active.shape == (len(x),)
            if not budgets.fixed:
                assert active.max() <= (budgets.default if k is None else k)

    def test_batched_encoding_equals_one_pass(self, fitted: Compressor, data: tuple[np.ndarray, np.ndarray]) -> None:
        # BLAS may sum in another order for another batch size, so equal up to float rounding
        for k in _budgets_to_check(fitted):
            assert_close_codes(fitted.encode(data[0], k=k, batch_size=7), fitted.encode(data[0], k=k))
        assert_same_codes(fitted.encode(torch.from_numpy(data[0])), fitted.encode(data[0]))

    def test_seed_determinism(self, data: tuple[np.ndarray, np.ndarray], config_params: dict[str, Any]) -> None:
        first = adaptemb.get_compressor(self.method, seed=3, **config_params).fit(data[0])
        second = adaptemb.get_compressor(self.method, seed=3, **config_params).fit(data[0])
        assert_same_codes(first.encode(data[0]), second.encode(data[0]))

    def test_save_load_identical_codes(self, fitted: Compressor, data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
        path = fitted.save(tmp_path / "model.safetensors")
        loaded = adaptemb.load(path)
        assert loaded.name == fitted.name and loaded.config == fitted.config and loaded.dim == fitted.dim
        assert loaded.budgets() == fitted.budgets()
        for k in _budgets_to_check(fitted):
            assert_same_codes(fitted.encode(data[0], k=k), loaded.encode(data[0], k=k))

    def test_save_load_in_fresh_process(self, fitted: Compressor, data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
        if not self.fresh_process:
            pytest.skip("plugin registered at run time; a fresh process cannot load it")
        model = fitted.save(tmp_path / "model.safetensors")
        np.save(tmp_path / "x.npy", data[0])
        script = textwrap.dedent(
            f"""
            import numpy as np, adaptemb
            codes = adaptemb.load({str(model)!r}).encode(np.load({str(tmp_path / 'x.npy')!r}))
            adaptemb.save_codes(codes, {str(tmp_path / 'codes.npz')!r})
            """
        )
        subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
        assert_same_codes(fitted.encode(data[0]), adaptemb.load_codes(tmp_path / "codes.npz"))

    def test_storage_accounting_is_exact(self, fitted: Compressor, data: tuple[np.ndarray, np.ndarray]) -> None:
        for k in _budgets_to_check(fitted):
            codes = fitted.encode(data[0], k=k)
            arrays = codes.to_arrays()
            assert codes.nbytes == sum(a.nbytes for a in arrays.values())
            assert codes.nbytes == codes.row_nbytes + codes.shared_nbytes
            assert codes.bytes_per_vector == pytest.approx(codes.row_nbytes / len(codes))
            half = codes[np.arange(len(codes) // 2)]
            assert half.row_nbytes <= codes.row_nbytes and half.shared_nbytes == codes.shared_nbytes

    def test_codes_file_round_trip(self, fitted: Compressor, data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
        codes = fitted.encode(data[0])
        adaptemb.save_codes(codes, tmp_path / "codes.npz")
        assert_same_codes(codes, adaptemb.load_codes(tmp_path / "codes.npz"))

    def test_scores_keep_cluster_structure(self, fitted: Compressor, data: tuple[np.ndarray, np.ndarray]) -> None:
        x, labels = data
        budget = fitted.budgets().high
        scores = fitted.score(fitted.encode_queries(x, k=budget), fitted.encode(x, k=budget))
        assert scores.shape == (len(x), len(x)) and np.isfinite(scores).all()
        np.fill_diagonal(scores, -np.inf)
        nearest = scores.argmax(axis=1)
        assert (labels[nearest] == labels).mean() >= 0.9

    def test_search_agrees_with_score(self, fitted: Compressor, data: tuple[np.ndarray, np.ndarray]) -> None:
        x = data[0]
        docs = fitted.encode(x)
        scores, ids = fitted.search(x[:20], docs, top_k=5)
        expected_scores, _ = top_k(fitted.score(fitted.encode_queries(x[:20]), docs), 5)
        assert ids.shape == (20, 5)
        np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-5)

    def test_decode_shape(self, fitted: Compressor, data: tuple[np.ndarray, np.ndarray]) -> None:
        codes = fitted.encode(data[0])
        try:
            recon = fitted.decode(codes)
        except NotImplementedError:
            pytest.skip(f"{self.method} does not decode")
        assert recon.shape == data[0].shape and recon.dtype == np.float32

    @pytest.mark.slow
    def test_onnx_export_matches_encode(self, fitted: Compressor, data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
        for module in ("onnx", "onnxruntime", "onnxscript"):
            pytest.importorskip(module)
        budget = fitted.budgets().default
        try:
            parity = fitted.export_onnx(tmp_path / "encoder.onnx", k=budget, sample=data[0][:64])
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
    def test_rejects_bad_input(self, fitted: Compressor, bad: Any, error: type[Exception], message: str) -> None:
        with pytest.raises(error, match=message):
            fitted.encode(bad)

    def test_rejects_bad_fit_input(self, config_params: dict[str, Any]) -> None:
        fresh = adaptemb.get_compressor(self.method, **config_params)
        with pytest.raises(ValueError, match="NaN"):
            fresh.fit(np.full((8, 32), np.nan, dtype=np.float32))
        with pytest.raises(TypeError, match="floating"):
            fresh.fit(torch.ones(8, 32, dtype=torch.int32))
        with pytest.raises(NotFittedError):
            fresh.encode(np.ones((2, 32), dtype=np.float32))

    def test_rejects_budget_out_of_range(self, fitted: Compressor, data: tuple[np.ndarray, np.ndarray]) -> None:
        budgets = fitted.budgets()
        for k in (budgets.low - 1, budgets.high + 1):
            with pytest.raises(ValueError, match=f"k={k}"):
                fitted.encode(data[0][:2], k=k)
        with pytest.raises(TypeError, match="integer"):
            fitted.encode(data[0][:2], k=2.5)  # type: ignore[arg-type]


def _budgets_to_check(compressor: Compressor) -> list[int | None]:
    budgets = compressor.budgets()
    chosen = [None, budgets.low, (budgets.low + budgets.high) // 2, budgets.high]
    return list(dict.fromkeys(chosen))
