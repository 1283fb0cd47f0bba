"""Every index backend returns the brute-force top-k of ``codes.similarity`` + ``adaptemb.ranking.top_k``."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from adaptemb.codes import BinaryCodes, Codes, DenseCodes, QuantizedCodes, SparseCodes
from adaptemb.index import (
    AsymmetricIndex,
    BinaryIndex,
    DenseIndex,
    FunnelIndex,
    Int8Index,
    ScoreIndex,
    SparseIndex,
    build_index,
    rerank,
    resolve_device,
    threshold_top_k,
)
from adaptemb.index.postings import BLOCK_ROWS, BlockedPostings
from adaptemb.ranking import top_k

N, Q, D, H, K = 700, 23, 24, 96, 6
gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _rng() -> np.random.Generator:
    return np.random.default_rng(3)


def _sparse(rng: np.random.Generator, n: int, ragged: bool = False) -> SparseCodes:
    idx = np.argsort(rng.random((n, H)), axis=1)[:, :K]
    vals = rng.random((n, K)).astype(np.float32)
    codes = SparseCodes(idx, vals, H)
    if ragged:  # drop some entries so rows have 1..K actives
        csr = codes.to_csr()
        csr.data[rng.random(csr.nnz) < 0.3] = 0
        csr.eliminate_zeros()
        codes = SparseCodes.from_csr(csr)
    return codes


def _int8(rng: np.random.Generator, n: int, scale: np.ndarray, offset: np.ndarray) -> QuantizedCodes:
    return QuantizedCodes(rng.integers(-127, 128, (n, D)).astype(np.int8), scale, offset)


def _pairs() -> dict[str, tuple[Codes, Codes]]:
    rng = _rng()
    scale, offset = rng.random(D).astype(np.float32) / 50, rng.normal(size=D).astype(np.float32) / 10
    bits = lambda n: BinaryCodes.from_signs(rng.normal(size=(n, 37)))
    return {
        "dense": (DenseCodes(rng.normal(size=(Q, D)).astype(np.float32)), DenseCodes(rng.normal(size=(N, D)).astype(np.float32))),
        "dense16": (DenseCodes(rng.normal(size=(Q, D)).astype(np.float16)), DenseCodes(rng.normal(size=(N, D)).astype(np.float16))),
        "sparse": (_sparse(rng, Q), _sparse(rng, N)),
        "sparse_ragged": (_sparse(rng, Q, ragged=True), _sparse(rng, N, ragged=True)),
        "binary": (bits(Q), bits(N)),
        "int8": (_int8(rng, Q, scale, offset), _int8(rng, N, scale, offset)),
    }


def assert_matches_brute_force(got: tuple[np.ndarray, np.ndarray], scores: np.ndarray, k: int, exact_ids: bool) -> None:
    """Same top-k scores as brute force; every returned id really has its score (ties may reorder ids)."""
    want_scores, want_ids = top_k(scores, k)
    got_scores, got_ids = got
    assert got_ids.shape == (scores.shape[0], k) and got_ids.dtype == np.int64
    np.testing.assert_allclose(got_scores, want_scores, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.take_along_axis(scores, got_ids, axis=1), got_scores, rtol=1e-4, atol=1e-4)
    assert all(len(set(row)) == k for row in got_ids)
    if exact_ids:
        np.testing.assert_array_equal(got_ids, want_ids)


CASES = [
    ("dense", DenseIndex, {}, True),
    ("dense", DenseIndex, {"backend": "torch"}, True),
    ("dense16", DenseIndex, {}, True),
    ("sparse", SparseIndex, {}, True),
    ("sparse", SparseIndex, {"backend": "torch"}, True),
    ("sparse", SparseIndex, {"backend": "scipy"}, True),
    ("sparse", SparseIndex, {"backend": "numba", "threads": 1}, True),
    ("sparse_ragged", SparseIndex, {}, True),
    ("sparse_ragged", SparseIndex, {"backend": "scipy"}, True),
    ("binary", BinaryIndex, {}, False),  # integer Hamming scores tie often
    ("binary", BinaryIndex, {"backend": "torch"}, False),
    ("int8", Int8Index, {}, True),
    ("int8", Int8Index, {"backend": "torch"}, True),
]


@pytest.mark.parametrize(("name", "cls", "options", "exact_ids"), CASES)
@pytest.mark.parametrize("k", [1, 10])
def test_backend_matches_similarity(name: str, cls: type, options: dict, exact_ids: bool, k: int) -> None:
    queries, docs = _pairs()[name]
    index = cls(docs, device="cpu", query_batch=7, **options)  # several query batches
    assert_matches_brute_force(index.search(queries, k), queries.similarity(docs), k, exact_ids)


@pytest.mark.parametrize("options", [{}, {"backend": "torch"}])
def test_asymmetric_dense_queries_against_sparse_docs(options: dict) -> None:
    rng = _rng()
    docs = _sparse(rng, N)
    queries = DenseCodes(rng.normal(size=(Q, H)).astype(np.float32))
    scores = queries.values @ docs.to_dense().T
    got = AsymmetricIndex(docs, device="cpu", query_batch=5, **options).search(queries, 10)
    assert_matches_brute_force(got, scores, 10, exact_ids=True)


def test_sparse_index_large_enough_for_the_threshold_path() -> None:
    rng = np.random.default_rng(5)
    docs, queries = _sparse(rng, 60_000), _sparse(rng, 9)
    assert_matches_brute_force(SparseIndex(docs).search(queries, 10), queries.similarity(docs), 10, exact_ids=True)


def test_threshold_top_k_equals_exact_top_k_with_ties() -> None:
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 50, size=(5, 20_000)).astype(np.float32)  # heavy ties
    scores[1] = 0.0  # a flat row
    scores[2, 12_345] = 99.0
    for k in (1, 10, 100):
        got, want = threshold_top_k(scores, k, chunk=64), top_k(scores, k)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])


def test_top_k_is_capped_at_the_index_size() -> None:
    queries, docs = _pairs()["dense"]
    _, ids = DenseIndex(docs[:4]).search(queries, 10)
    assert ids.shape == (Q, 4)


def test_factory_picks_the_backend_from_the_code_kinds() -> None:
    pairs = _pairs()
    assert isinstance(build_index(pairs["dense"][1], device="cpu"), DenseIndex)
    assert isinstance(build_index(pairs["sparse"][1], device="cpu"), SparseIndex)
    assert isinstance(build_index(pairs["binary"][1], device="cpu"), BinaryIndex)
    assert isinstance(build_index(pairs["int8"][1], device="cpu"), Int8Index)
    assert isinstance(build_index(pairs["sparse"][1], query_kind="dense", device="cpu"), AsymmetricIndex)
    with pytest.raises(ValueError, match="no index backend for binary queries against dense"):
        build_index(pairs["dense"][1], query_kind="binary")


def test_wrong_query_kind_and_device_are_clear_errors() -> None:
    pairs = _pairs()
    index = DenseIndex(pairs["dense"][1])
    with pytest.raises(TypeError, match="takes dense query codes"):
        index.search(pairs["sparse"][0])
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            resolve_device("cuda")


def test_int8_index_rejects_other_calibration() -> None:
    queries, docs = _pairs()["int8"]
    other = QuantizedCodes(queries.codes, queries.scale * 2, queries.offset)
    with pytest.raises(ValueError, match="calibrations"):
        Int8Index(docs).search(other)


def test_score_index_uses_any_score_function() -> None:
    queries, docs = _pairs()["sparse"]
    index = ScoreIndex(docs, lambda q, d: q.similarity(d), query_batch=4)
    assert_matches_brute_force(index.search(queries, 10), queries.similarity(docs), 10, exact_ids=True)


def test_rerank_improves_over_the_shortlist_on_a_planted_case() -> None:
    # 2-dim prefix for the shortlist, 8 dims in full. Doc 0 wins on the prefix (score 1.0) but doc 1
    # wins in full: prefix 0.9 + tail 6 * 1 = 6.9 > 1.0. The others are small noise.
    rng = np.random.default_rng(1)
    full = rng.normal(scale=0.01, size=(50, 8)).astype(np.float32)
    full[0] = [1, 0, 0, 0, 0, 0, 0, 0]
    full[1] = [0.9, 0, 1, 1, 1, 1, 1, 1]
    query = np.array([[1, 0, 1, 1, 1, 1, 1, 1]], dtype=np.float32)
    first = DenseIndex(DenseCodes(full[:, :2].copy()))
    short_ids = first.search(DenseCodes(query[:, :2].copy()), 1)[1]
    assert short_ids[0, 0] == 0
    funnel = FunnelIndex(first, full, shortlist=5)
    scores, ids = funnel.search(DenseCodes(query[:, :2].copy()), query, top_k=1)
    assert ids[0, 0] == 1 and scores[0, 0] == pytest.approx(6.9)
    # an int8 rerank store works the same way (to_dense() is the dequantised vector)
    int8_store = QuantizedCodes(np.round(full / 0.01).clip(-127, 127).astype(np.int8), np.full(8, 0.01, np.float32), np.zeros(8, np.float32))
    assert FunnelIndex(first, int8_store, shortlist=5).search(DenseCodes(query[:, :2].copy()), query, 1)[1][0, 0] == 1


def test_rerank_orders_candidates_by_full_score() -> None:
    docs = np.eye(4, dtype=np.float32)
    scores, ids = rerank(np.array([[0.1, 0.5, 0.3, 0.0]]), docs, np.array([[0, 1, 2, 3]]), top_k=3)
    assert ids.tolist() == [[1, 2, 0]]
    assert scores[0].tolist() == pytest.approx([0.5, 0.3, 0.1])


def test_funnel_rejects_mismatched_store() -> None:
    _, docs = _pairs()["dense"]
    with pytest.raises(ValueError, match="rerank store has"):
        FunnelIndex(DenseIndex(docs), np.zeros((3, D), np.float32))


@gpu
@needs_cuda
@pytest.mark.parametrize(("name", "cls", "options", "exact_ids"), CASES)
def test_backend_on_cuda(name: str, cls: type, options: dict, exact_ids: bool) -> None:
    queries, docs = _pairs()[name]
    index = cls(docs, device="cuda", query_batch=7)
    assert index.device == "cuda"
    assert_matches_brute_force(index.search(queries, 10), queries.similarity(docs), 10, exact_ids=False)


@gpu
@needs_cuda
def test_asymmetric_on_cuda() -> None:
    rng = _rng()
    docs = _sparse(rng, N)
    queries = DenseCodes(rng.normal(size=(Q, H)).astype(np.float32))
    got = AsymmetricIndex(docs, device="cuda").search(queries, 10)
    assert_matches_brute_force(got, queries.values @ docs.to_dense().T, 10, exact_ids=False)


def test_sparse_postings_layout() -> None:
    docs = SparseCodes(np.array([[0, 2], [2, 1]]), np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), 3)
    postings = SparseIndex(docs, backend="scipy")._postings
    assert isinstance(postings, sp.csr_matrix) and postings.shape == (3, 2)
    assert postings[2].indices.tolist() == [0, 1]  # dimension 2 is active in docs 0 and 1


def test_blocked_postings_layout() -> None:
    docs = SparseCodes(np.array([[0, 2], [2, 1]]), np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), 3)
    blocked = BlockedPostings.from_csr(docs.to_csr())
    assert blocked.indptr.tolist() == [0, 1, 2, 4]  # one block: dims 0, 1, 2
    assert blocked.ids.tolist() == [0, 1, 0, 1] and blocked.ids.dtype == np.uint16
    assert blocked.values.tolist() == [1.0, 4.0, 2.0, 3.0]
    assert blocked.nbytes == 4 * 8 + 4 * 2 + 4 * 4


def test_numba_engine_is_the_cpu_default_and_ranks_like_scipy_across_blocks() -> None:
    """Two document blocks (the second ragged), values of both signs, an empty query, ties at 0."""
    rng = np.random.default_rng(11)
    n = BLOCK_ROWS + 4_321
    idx = np.argsort(rng.random((n, 40)), axis=1)[:, :3]
    docs = SparseCodes(idx, rng.normal(size=(n, 3)).astype(np.float32), 40)
    queries = SparseCodes.from_csr(sp.csr_matrix(np.vstack([
        np.where(rng.random((6, 40)) < 0.1, rng.normal(size=(6, 40)), 0.0), np.zeros((1, 40))]).astype(np.float32)))
    index = SparseIndex(docs)
    assert index.backend == "numba-postings"
    for k in (1, 10, 50):
        got = index.search(queries, k)
        want = SparseIndex(docs, backend="scipy").search(queries, k)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)
    _, ids = index.search(queries[6:], 5)
    assert ids.tolist() == [[0, 1, 2, 3, 4]]  # an empty query scores 0 everywhere: lowest ids first


def test_numba_engine_threads_give_identical_results() -> None:
    rng = np.random.default_rng(2)
    docs, queries = _sparse(rng, 5_000), _sparse(rng, 17)
    one = SparseIndex(docs, threads=1).search(queries, 10)
    two = SparseIndex(docs, threads=2).search(queries, 10)
    np.testing.assert_array_equal(one[1], two[1])
    np.testing.assert_array_equal(one[0], two[0])


def test_unknown_sparse_backend_lists_the_valid_ones() -> None:
    docs = _sparse(_rng(), 10)
    with pytest.raises(ValueError, match="use one of auto, numba, scipy, torch"):
        SparseIndex(docs, backend="mkl")
    with pytest.raises(ValueError, match="use one of auto, scipy, torch"):
        AsymmetricIndex(docs, backend="numba")
