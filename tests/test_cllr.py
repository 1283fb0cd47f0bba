"""The cllr compressor: nested budgets, exact zeros of the proximal steps, supervision, int8, save/load, quality."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch

import adaptemb
from adaptemb import DenseCodes, QuantizedCodes
from adaptemb.testing import CompressorContract

SMALL = {"rank": 16, "steps": 100, "batch_size": 128, "progress": False}


class TestCLLRInt8Contract(CompressorContract):
    """``values="int8"``: a different code kind (1 byte per dim) and a saved scale; the float path runs in
    ``test_contract.py``."""

    method = "cllr"
    params: ClassVar[dict[str, object]] = {"values": "int8"}
    allow_brute_force = False


def _decaying(n: int = 400, d: int = 32, seed: int = 0) -> np.ndarray:
    """Rows with a decaying spectrum (std 1 down to 0.01): what makes a rank or column budget bite."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, d)) * np.geomspace(1.0, 0.01, d)).astype(np.float32)


def _nuisance_task(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Documents = a weak 8-d signal + strong 24-d nuisance; a query shares its document's signal, not its nuisance.
    PCA keeps the nuisance; pairs show which directions matter. Returns (docs, queries, gold doc of each query)."""
    rng = np.random.default_rng(seed)
    signal = 0.3 * rng.standard_normal((300, 8))
    docs = np.hstack([signal, rng.standard_normal((300, 24))])
    queries = np.hstack([signal + 0.03 * rng.standard_normal((300, 8)), rng.standard_normal((300, 24))])
    return docs.astype(np.float32), queries.astype(np.float32), np.arange(300)


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    return _decaying()


@pytest.fixture(scope="module")
def fitted(x: np.ndarray) -> adaptemb.Compressor:
    return adaptemb.fit(x, "cllr", **SMALL)


def test_one_fit_serves_every_budget_as_normalised_prefixes(fitted: adaptemb.Compressor, x: np.ndarray) -> None:
    budgets = fitted.budgets()
    assert (budgets.low, budgets.high) == (1, fitted.projection.shape[0]) and budgets.high <= 16
    full = fitted.encode(x, k=budgets.high)
    assert isinstance(full, DenseCodes) and full.values.dtype == np.float32
    for r in (1, 4, budgets.high // 2):
        prefix = fitted.encode(x, k=r)
        assert prefix.dim == r and prefix.bytes_per_vector == 4 * r
        head = full.values[:, :r]
        np.testing.assert_allclose(prefix.values, head / np.linalg.norm(head, axis=1, keepdims=True), rtol=1e-4, atol=1e-5)


def test_code_dimensions_are_ordered_by_strength(fitted: adaptemb.Compressor, x: np.ndarray) -> None:
    weight = fitted.projection.numpy()
    spread = ((x - x.mean(axis=0)) @ weight.T).std(axis=0)
    assert np.all(np.diff(spread) <= 1e-5 * spread[0])
    assert fitted.fit_report is not None and fitted.fit_report["extra"]["rank"] == len(weight)


def test_fit_report(fitted: adaptemb.Compressor) -> None:
    report = fitted.fit_report
    assert report is not None and report["steps"] == SMALL["steps"] and report["seconds"] > 0
    extra = report["extra"]
    assert extra["supervision"] == "views" and extra["regularizer"] == "nuclear"
    assert set(extra["losses_after"]) == {"loss", "nce", "recon", "omega"}
    assert extra["losses_before"]["omega"] == pytest.approx(1.0)  # Ω is measured relative to the PCA start
    assert extra["active_columns"] == 32 and extra["input_dim"] == 32


NESTED = {**SMALL, "prefixes": (4, 8), "prefix_candidates": 256}


@pytest.mark.slow
def test_prefix_nesting_keeps_the_full_codes_neighbours_in_short_prefixes(x: np.ndarray) -> None:
    """The nesting stage trains the 4- and 8-dim prefixes to rank neighbours like the full code does."""
    from adaptemb.ranking import exact_top_k

    def prefix_recall(compressor: adaptemb.Compressor, k: int) -> float:
        full = compressor.encode(x, k=compressor.budgets().high).values
        truth, got = (exact_top_k(codes, codes, 11)[:, 1:] for codes in (full, compressor.encode(x, k=k).values))
        return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(truth, got, strict=True)]))

    spread_only = adaptemb.fit(x, "cllr", **{**NESTED, "prefix_steps": 0})
    nested = adaptemb.fit(x, "cllr", **NESTED)
    assert spread_only.fit_report["extra"]["nesting"] == {}
    nesting = nested.fit_report["extra"]["nesting"]
    assert nesting["prefixes"] == [4, 8] and nesting["steps"] == 150 and nesting["loss_last"] < nesting["loss_first"]
    assert nested.budgets().high == spread_only.budgets().high == 16
    assert prefix_recall(nested, 8) >= prefix_recall(spread_only, 8) + 0.2
    assert prefix_recall(nested, 4) >= prefix_recall(spread_only, 4) + 0.03
    # inside each block between trained prefixes (0-4, 4-8, 8-16) dimensions are ordered by spread
    spread = ((x - x.mean(axis=0)) @ nested.projection.numpy().T).std(axis=0)
    for block in (slice(0, 4), slice(4, 8), slice(8, 16)):
        assert np.all(np.diff(spread[block]) <= 1e-4 * spread[0])


@pytest.mark.slow
def test_prefix_nesting_is_a_left_factor_so_zero_columns_stay_zero(x: np.ndarray) -> None:
    sparse = adaptemb.fit(x, "cllr", regularizer="l21", alpha=30.0, **NESTED)
    assert sparse.fit_report["extra"]["nesting"]["prefixes"] == [4, 8]
    weight = sparse.projection.numpy()
    dead = np.flatnonzero(np.all(weight == 0.0, axis=0))
    assert 0 < len(dead) < 32
    changed = x.copy()
    changed[:, dead] = 1e3
    np.testing.assert_array_equal(sparse.encode(changed, k=4).values, sparse.encode(x, k=4).values)
    with pytest.raises(adaptemb.InvalidConfigError, match="prefixes"):
        adaptemb.get_compressor("cllr", prefixes=(0, 8))


@pytest.mark.slow
def test_nuclear_prox_drops_rank_exactly(x: np.ndarray) -> None:
    ranks = [adaptemb.fit(x, "cllr", alpha=alpha, **SMALL).budgets().high for alpha in (0.0, 10.0, 30.0)]
    assert ranks[0] == 16 and ranks[0] > ranks[1] > ranks[2] >= 1
    low = adaptemb.fit(x, "cllr", alpha=30.0, **SMALL)
    assert np.linalg.matrix_rank(low.projection.double().numpy()) == low.budgets().high
    with pytest.raises(ValueError, match=r"k=17 is out of range|valid budgets"):
        low.encode(x, k=17)


def test_l21_prox_zeroes_whole_columns(x: np.ndarray) -> None:
    sparse = adaptemb.fit(x, "cllr", regularizer="l21", alpha=30.0, **SMALL)
    weight = sparse.projection.numpy()
    dead = np.flatnonzero(np.all(weight == 0.0, axis=0))
    assert 0 < len(dead) < 32 and sparse.fit_report["extra"]["active_columns"] == 32 - len(dead)
    # exact feature selection: the unused input features do not touch the codes at all
    changed = x.copy()
    changed[:, dead] = 1e3
    np.testing.assert_array_equal(sparse.encode(changed).values, sparse.encode(x).values)
    dense = adaptemb.fit(x, "cllr", regularizer="l21", alpha=0.0, **SMALL)
    assert np.all(np.any(dense.projection.numpy() != 0.0, axis=0))


@pytest.mark.slow
def test_clear_errors_for_too_strong_a_regulariser_and_too_large_a_budget(x: np.ndarray) -> None:
    with pytest.raises(ValueError, match="removed every direction"):
        adaptemb.fit(x, "cllr", alpha=1e4, **SMALL)
    with pytest.raises(ValueError, match="exceeds the directions learned"):
        adaptemb.fit(x, "cllr", k=17, **SMALL)
    with pytest.raises(ValueError, match="left rank"):
        adaptemb.fit(x, "cllr", k=16, alpha=30.0, **SMALL)
    with pytest.raises(adaptemb.InvalidConfigError, match="regularizer"):
        adaptemb.get_compressor("cllr", regularizer="trace")


@pytest.mark.slow
def test_pairs_teach_which_directions_matter() -> None:
    docs, queries, gold = _nuisance_task()
    train, test = slice(0, 150), slice(150, 300)
    pca = adaptemb.fit(docs, "svd")
    # 300 steps: turning L from the 24 strong nuisance directions to the 8 weak signal ones takes ~250 of them here
    learned = adaptemb.fit(docs, "cllr", pairs=(queries[train], docs[gold[train]]), **{**SMALL, "steps": 300})
    assert learned.fit_report["extra"]["supervision"] == "pairs"

    def top1(compressor: adaptemb.Compressor) -> float:
        _, ids = compressor.search(queries[test], compressor.encode(docs, k=8), top_k=1, k=8)
        return float(np.mean(ids[:, 0] == gold[test]))

    assert top1(learned) >= top1(pca) + 0.3


@pytest.mark.slow
def test_early_stopping_keeps_the_l_whose_held_out_pairs_rank_best() -> None:
    docs, queries, gold = _nuisance_task()
    pairs = (queries[:150], docs[gold[:150]])
    fast = {**SMALL, "steps": 300, "lr": 0.3}  # at lr 0.3 the held-out pairs stop improving after ~50 steps
    stopped = adaptemb.fit(docs, "cllr", pairs=pairs, **{**fast, "patience": 10})
    report = stopped.fit_report
    assert report["extra"]["held_out_pairs"] == 30  # val_fraction 0.2 of 150
    assert report["stopped_early"] and report["steps"] < 300 and report["steps"] % 2 == 0
    assert report["extra"]["best_step"] == report["steps"] - 10 * 2 > 0  # 10 measurements without improvement
    assert np.isfinite(report["val_loss"])
    assert set(report["train_losses"]) == {"loss", "nce", "recon", "omega"}  # the last steps run, stopped or not
    # the kept L is the best one: a fit that just runs to the best step gives the same projection
    again = adaptemb.fit(docs, "cllr", pairs=pairs, **{**fast, "steps": report["extra"]["best_step"], "patience": 1000})
    np.testing.assert_allclose(again.projection.numpy(), stopped.projection.numpy(), atol=1e-5)
    everything = adaptemb.fit(docs, "cllr", pairs=pairs, **{**SMALL, "val_fraction": 0.0})
    assert everything.fit_report["val_loss"] is None and everything.fit_report["steps"] == SMALL["steps"]
    assert "held_out_pairs" not in everything.fit_report["extra"]
    few = adaptemb.fit(docs, "cllr", pairs=(queries[:35], docs[gold[:35]]), **SMALL)  # 7 < 8 held-out pairs: none
    assert few.fit_report["val_loss"] is None and not few.fit_report["stopped_early"]


@pytest.mark.slow
def test_labels_and_views_supervise(x: np.ndarray) -> None:
    labels = (x[:, 0] > 0).astype(np.int64)
    assert adaptemb.fit(x, "cllr", labels=labels, **SMALL).fit_report["extra"]["supervision"] == "labels"
    both = adaptemb.fit(x, "cllr", labels=labels, pairs=(x[:50], x[50:100]), **SMALL)
    assert both.fit_report["extra"]["supervision"] == "labels+pairs"


@pytest.mark.slow
def test_int8_codes_take_one_byte_per_dim_and_rank_like_float(x: np.ndarray) -> None:
    float_codes = adaptemb.fit(x, "cllr", **SMALL)
    int8 = adaptemb.fit(x, "cllr", values="int8", **SMALL)
    np.testing.assert_array_equal(int8.projection.numpy(), float_codes.projection.numpy())
    for r in (4, int8.budgets().high):
        codes = int8.encode(x, k=r)
        assert isinstance(codes, QuantizedCodes) and codes.codes.dtype == np.int8
        assert codes.row_nbytes == len(x) * r and codes.bytes_per_vector == r
        assert np.abs(codes.codes).max() <= 127
        np.testing.assert_allclose(codes.to_dense(), float_codes.encode(x, k=r).values, atol=float(codes.scale.max()))
        _, ids = int8.search(x[:50], codes, top_k=1, k=r)
        assert np.mean(ids[:, 0] == np.arange(50)) >= 0.95


def test_save_load_keeps_zeros_and_scale(x: np.ndarray, tmp_path: Path) -> None:
    sparse = adaptemb.fit(x, "cllr", regularizer="l21", alpha=30.0, values="int8", **SMALL)
    loaded = adaptemb.load(sparse.save(tmp_path / "cllr.safetensors"))
    np.testing.assert_array_equal(loaded.projection.numpy(), sparse.projection.numpy())
    assert loaded.budgets() == sparse.budgets()
    np.testing.assert_array_equal(loaded.encode(x, k=3).codes, sparse.encode(x, k=3).codes)


@pytest.mark.slow
def test_onnx_export_of_the_projection(fitted: adaptemb.Compressor, x: np.ndarray, tmp_path: Path) -> None:
    for module in ("onnx", "onnxruntime", "onnxscript"):
        pytest.importorskip(module)
    parity = fitted.export_onnx(tmp_path / "cllr.onnx", k=8, sample=x[:64])
    assert parity.rows == 64 and (tmp_path / "cllr.onnx").stat().st_size > 0


@pytest.mark.gpu
def test_fits_on_cuda(x: np.ndarray) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    gpu = adaptemb.fit(x, "cllr", device="cuda", **SMALL)
    assert gpu.fit_report["device"].startswith("cuda") and gpu.projection.device.type == "cpu"
    cpu = adaptemb.fit(x, "cllr", device="cpu", **SMALL)
    assert gpu.budgets().high == cpu.budgets().high
    np.testing.assert_allclose(np.abs(gpu.encode(x, k=4).values), np.abs(cpu.encode(x, k=4).values), atol=5e-2)
    nested = adaptemb.fit(x, "cllr", device="cuda", **NESTED)  # the prefix-nesting stage on the GPU too
    assert nested.fit_report["extra"]["nesting"]["prefixes"] == [4, 8] and nested.budgets().high == 16


@pytest.mark.slow
def test_pairs_beat_pca_and_views_match_it_on_the_shipped_dataset() -> None:
    """The shipped WordNet set (8,000 × 384 all-MiniLM-L6-v2): 500 training pairs, 1,000 held-out queries."""
    from adaptemb.datasets import load_dataset
    from adaptemb.evaluate import ndcg_at_k

    data = load_dataset("default", progress=False)
    gold = data.qrels.indices
    order = np.random.default_rng(0).permutation(len(data.queries))
    train, test = order[:500], order[500:]
    qrels = data.qrels[test]

    def ndcg(compressor: adaptemb.Compressor, r: int) -> float:
        _, ids = compressor.search(data.queries[test], compressor.encode(data.corpus, k=r), top_k=10, k=r)
        return float(np.nanmean(ndcg_at_k(ids, qrels, 10)))

    fast = {"rank": 64, "steps": 100, "progress": False}
    pca = adaptemb.fit(data.corpus, "svd")
    paired = adaptemb.fit(data.corpus, "cllr", pairs=(data.queries[train], data.corpus[gold[train]]), **fast)
    views = adaptemb.fit(data.corpus, "cllr", **fast)
    assert ndcg(paired, 32) >= ndcg(pca, 32) + 0.01
    assert ndcg(views, 32) >= ndcg(pca, 32) - 0.01


@pytest.mark.slow
def test_more_pairs_do_not_make_the_codes_worse() -> None:
    """Held-out pairs stop the fit before it over-fits: 1,000 pairs rank at least as well as 500 (without early
    stopping, 1,000 pairs were 0.024 worse at r = 64 on this split). The shipped set, 500 held-out queries."""
    from adaptemb.datasets import load_dataset
    from adaptemb.evaluate import ndcg_at_k

    data = load_dataset("default", progress=False)
    gold = data.qrels.indices
    order = np.random.default_rng(0).permutation(len(data.queries))
    test = order[1000:]

    def ndcgs(pairs: int) -> np.ndarray:
        train = order[:pairs]
        fitted = adaptemb.fit(data.corpus, "cllr", pairs=(data.queries[train], data.corpus[gold[train]]), progress=False)
        out = []
        for r in (32, 64):
            _, ids = fitted.search(data.queries[test], fitted.encode(data.corpus, k=r), top_k=10, k=r)
            out.append(float(np.nanmean(ndcg_at_k(ids, data.qrels[test], 10))))
        return np.array(out)

    assert np.all(ndcgs(1000) >= ndcgs(500) - 0.005)
