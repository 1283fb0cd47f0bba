"""The built-in training-free methods against independent reference computations."""

import numpy as np
import pytest

import adaptemb
from adaptemb.ranking import top_k


@pytest.fixture(scope="module")
def corpus() -> np.ndarray:
    rng = np.random.default_rng(7)
    # anisotropic data so principal directions are well separated
    x = rng.standard_normal((400, 48)) * np.linspace(3.0, 0.2, 48) + 0.5
    return x.astype(np.float32)


@pytest.mark.parametrize("rank", [1, 5, 16, 48])
def test_svd_ranks_exactly_like_numpy_pca(corpus: np.ndarray, rank: int) -> None:
    queries, docs = corpus[:40], corpus
    mean = docs.astype(np.float64).mean(axis=0)
    _, _, vt = np.linalg.svd(docs.astype(np.float64) - mean, full_matrices=False)
    project = lambda x: (x.astype(np.float64) - mean) @ vt[:rank].T
    expected = project(queries) @ project(docs).T

    compressor = adaptemb.fit(docs, "svd")
    got = compressor.score(compressor.encode_queries(queries, k=rank), compressor.encode(docs, k=rank))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(top_k(got, 10)[1], top_k(expected, 10)[1])


def test_svd_one_fit_serves_every_rank_and_decodes(corpus: np.ndarray) -> None:
    compressor = adaptemb.fit(corpus, "svd")
    assert compressor.budgets() == adaptemb.Budgets(low=1, high=48, default=48)
    full = compressor.decode(compressor.encode(corpus))
    np.testing.assert_allclose(full, corpus, atol=1e-4)
    errors = [np.linalg.norm(compressor.decode(compressor.encode(corpus, k=r)) - corpus) for r in (4, 8, 16, 32)]
    assert errors == sorted(errors, reverse=True)
    variance = compressor.explained_variance.numpy()
    assert np.all(np.diff(variance) <= 0)


def test_svd_k_limits_the_components_kept(corpus: np.ndarray, tmp_path) -> None:
    compressor = adaptemb.fit(corpus, "svd", k=8)
    assert compressor.budgets().high == 8
    with pytest.raises(ValueError, match="1 <= k <= 8"):
        compressor.encode(corpus, k=9)
    small = compressor.save(tmp_path / "svd8.safetensors").stat().st_size
    big = adaptemb.fit(corpus, "svd").save(tmp_path / "svd48.safetensors").stat().st_size
    assert small < big
    with pytest.raises(ValueError, match="only d=48"):
        adaptemb.fit(corpus, "svd", k=49)


@pytest.mark.parametrize("prefix", [1, 7, 48])
def test_mrl_is_truncation_then_renormalisation(corpus: np.ndarray, prefix: int) -> None:
    codes = adaptemb.compress(corpus, method="mrl", k=prefix)
    expected = corpus[:, :prefix] / np.linalg.norm(corpus[:, :prefix], axis=1, keepdims=True)
    np.testing.assert_allclose(codes.to_dense(), expected, rtol=1e-6, atol=1e-6)
    assert codes.bytes_per_vector == 4 * prefix


def test_int8_quantisation_error_is_within_half_a_step(corpus: np.ndarray) -> None:
    compressor = adaptemb.fit(corpus, "int8")
    codes = compressor.encode(corpus)
    step = (corpus.max(0) - corpus.min(0)) / 254
    assert np.all(np.abs(codes.to_dense() - corpus) <= step / 2 + 1e-5)
    assert codes.bytes_per_vector == corpus.shape[1]
    # one query quantises with the stored calibration, identically to the batch
    np.testing.assert_array_equal(compressor.encode(corpus[3:4]).codes, codes.codes[3:4])


def test_int8_clips_values_outside_the_calibrated_range(corpus: np.ndarray) -> None:
    compressor = adaptemb.fit(corpus, "int8")
    far = corpus[:2] * 100
    assert np.abs(compressor.encode(far).codes.astype(int)).max() == 127


def test_int8_quantile_calibration_narrows_the_range() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2000, 8)).astype(np.float32)
    x[0] = 50.0  # one outlier row
    minmax = adaptemb.fit(x, "int8").encode(x[1:])
    quantile = adaptemb.fit(x, "int8", calibration="quantile").encode(x[1:])  # clips 0.1 % per side
    err = lambda c: np.abs(c.to_dense() - x[1:]).mean()
    assert err(quantile) < err(minmax) / 5  # measured: 0.0065 vs 0.0525


def test_int8_and_binary_have_no_budget(corpus: np.ndarray) -> None:
    for method in ("int8", "binary"):
        compressor = adaptemb.fit(corpus, method)
        assert compressor.budgets().fixed
        assert len(compressor.encode(corpus, k=48)) == len(corpus)
        with pytest.raises(ValueError, match=f"{method} has no budget"):
            compressor.encode(corpus, k=32)
        with pytest.raises(ValueError, match=f"{method} has no budget"):  # one rule for fit and encode
            adaptemb.fit(corpus, method, k=32)
        assert adaptemb.fit(corpus, method, k=48).budgets().high == 48


@pytest.mark.parametrize("dim", [7, 64, 384, 1000])
def test_binary_costs_at_most_d_over_8_plus_16_bytes(dim: int) -> None:
    x = np.random.default_rng(dim).standard_normal((10, dim)).astype(np.float32)
    codes = adaptemb.compress(x, method="binary", threshold="zero")
    assert codes.bytes_per_vector == -(-dim // 8) <= dim / 8 + 16
    np.testing.assert_array_equal(codes.to_dense(), np.where(x > 0, 1.0, -1.0))


def test_binary_mean_threshold_balances_bits(corpus: np.ndarray) -> None:
    zero = adaptemb.compress(corpus, method="binary", threshold="zero").to_dense()
    mean = adaptemb.compress(corpus, method="binary", threshold="mean").to_dense()
    assert abs((mean > 0).mean() - 0.5) < abs((zero > 0).mean() - 0.5)


def test_binary_rescoring_recovers_float_ranking_better_than_hamming() -> None:
    rng = np.random.default_rng(3)
    docs = rng.standard_normal((2000, 64)).astype(np.float32)
    queries = docs[:50] + 0.8 * rng.standard_normal((50, 64)).astype(np.float32)
    truth = top_k(queries @ docs.T, 10)[1]
    recall = lambda ids: np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, truth)])

    hamming = adaptemb.fit(docs, "binary", threshold="zero")
    rescored = adaptemb.fit(docs, "binary", threshold="zero", rescore=100)
    _, hamming_ids = hamming.search(queries, hamming.encode(docs), top_k=10)
    scores, rescored_ids = rescored.search(queries, rescored.encode(docs), top_k=10)
    assert recall(rescored_ids) > recall(hamming_ids) + 0.1
    # rescored scores are <q, sign(doc)>, best first
    signs = np.where(docs > 0, 1.0, -1.0)
    np.testing.assert_allclose(scores[0], queries[0] @ signs[rescored_ids[0]].T, rtol=1e-5)
    assert np.all(np.diff(scores, axis=1) <= 1e-6)
