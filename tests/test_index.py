"""Every index backend returns the brute-force top-k of ``codes.similarity`` + ``adaptemb.ranking.top_k``;
backends are found through the index registry; indexes save and load."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import adaptemb
from adaptemb.codes import (
    BinaryCodes,
    BinarySparseCodes,
    Codes,
    DenseCodes,
    ProjectedQueries,
    QuantizedCodes,
    SparseCodes,
)
from adaptemb.devices import resolve_device
from adaptemb.index import (
    BinaryIndex,
    DenseIndex,
    FunnelIndex,
    Index,
    Int8Index,
    ScoreIndex,
    SparseIndex,
    rerank,
    threshold_top_k,
)
from adaptemb.index.postings import (
    BLOCK_ROWS,
    MIN_DOCS_PER_TASK,
    BlockedPostings,
    ForwardCodes,
    QueryBlocks,
    _projected_kernel,
    run_projected,
)
from adaptemb.ranking import reciprocal_ranks, top_k
from adaptemb.registry import build_index

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


def _binary_sparse(rng: np.random.Generator, n: int) -> BinarySparseCodes:
    mask = rng.random((n, H)) < 0.08
    mask[0] = False  # an empty row: cosine 0 by definition
    return BinarySparseCodes.from_mask(mask)


def _projected(rng: np.random.Generator, n: int) -> ProjectedQueries:
    return ProjectedQueries(rng.normal(size=(n, H)).astype(np.float32), rng.normal(size=n).astype(np.float32))


def _pairs() -> dict[str, tuple[Codes, Codes]]:
    rng = _rng()
    scale, offset = rng.random(D).astype(np.float32) / 50, rng.normal(size=D).astype(np.float32) / 10
    bits = lambda n: BinaryCodes.from_signs(rng.normal(size=(n, 37)))
    return {
        "projected_sparse": (_projected(rng, Q), _sparse(rng, N)),
        "projected_ragged": (_projected(rng, Q), _sparse(rng, N, ragged=True)),
        "projected_binary_sparse": (_projected(rng, Q), _binary_sparse(rng, N)),
        "binary_sparse": (_binary_sparse(rng, Q), _binary_sparse(rng, N)),
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
    ("projected_sparse", SparseIndex, {}, True),
    ("projected_sparse", SparseIndex, {"backend": "numba", "threads": 1}, True),
    ("projected_sparse", SparseIndex, {"backend": "scipy"}, True),
    ("projected_sparse", SparseIndex, {"backend": "torch"}, True),
    ("projected_ragged", SparseIndex, {}, True),
    ("projected_binary_sparse", SparseIndex, {}, True),
    ("projected_binary_sparse", SparseIndex, {"backend": "scipy"}, True),
    ("binary_sparse", SparseIndex, {}, False),  # integer overlap counts tie often
    ("binary_sparse", SparseIndex, {"backend": "scipy"}, False),
    ("binary_sparse", SparseIndex, {"backend": "torch"}, False),
]


@pytest.mark.parametrize(("name", "cls", "options", "exact_ids"), CASES)
@pytest.mark.parametrize("k", [1, 10])
def test_backend_matches_similarity(name: str, cls: type, options: dict, exact_ids: bool, k: int) -> None:
    queries, docs = _pairs()[name]
    index = cls(docs, device="cpu", query_batch=7, **options)  # several query batches
    assert_matches_brute_force(index.search(queries, k), queries.similarity(docs), k, exact_ids)


@pytest.mark.parametrize("backend", ["numba", "scipy", "torch"])
def test_document_weights_and_cosine_metric(backend: str) -> None:
    """``doc_scale`` multiplies every document's score; cosine divides overlaps by sqrt(|A| |B|)."""
    rng = _rng()
    queries, docs = _pairs()["projected_sparse"]
    weights = rng.random(N).astype(np.float32) + 0.5
    index = SparseIndex(docs, backend=backend, doc_scale=weights, query_batch=9)
    assert_matches_brute_force(index.search(queries, 10), queries.similarity(docs) * weights, 10, exact_ids=True)
    bits_q, bits_d = _pairs()["binary_sparse"]
    cosine = SparseIndex(bits_d, backend=backend, metric="cosine")
    assert_matches_brute_force(cosine.search(bits_q, 10), bits_q.similarity(bits_d, metric="cosine"), 10, exact_ids=False)


def test_projected_kernel_splits_documents_across_threads_for_few_queries() -> None:
    """One query block but two threads: the documents go in two ranges whose top-k lists are merged."""
    rng = np.random.default_rng(4)
    docs, queries = _sparse(rng, 2 * MIN_DOCS_PER_TASK + 7), _projected(rng, 3)
    for threads in (1, 2):
        index = SparseIndex(docs, threads=threads, query_kind="projected")
        assert_matches_brute_force(index.search(queries, 25), queries.similarity(docs), 25, exact_ids=True)


def test_projected_kernel_first_pass_changes_no_result() -> None:
    """The int8 first pass only skips documents: with its bound switched off (slack inf, every document rescored in
    float32) the kernel returns the same scores and ids, bit for bit. Each query has a cluster of near-ties (its
    top-K dimensions, values equal to 1e-4) that holds its whole top-20, so a first pass without its bound (slack
    0) drops documents here; queries of ordinary and of very uneven magnitudes, offsets, negative weights."""
    rng = np.random.default_rng(0)
    n = 3000
    values = rng.normal(size=(3, H)).astype(np.float32)
    values[1] *= np.exp2(rng.integers(-20, 20, size=H))
    group = rng.integers(0, 4, n)  # rows of group q < 3 are near-ties at the top of query q; group 3 is random
    idx = np.argsort(rng.random((n, H)), axis=1)[:, :K]
    vals = rng.uniform(0, 0.5, (n, K)).astype(np.float32)
    for q in range(3):
        idx[group == q] = np.argsort(-values[q])[:K]
        vals[group == q] = 1 + 1e-4 * rng.random(((group == q).sum(), K))
    scale = np.where(group == 3, rng.uniform(-1, 2, n), 1).astype(np.float32)
    docs = ForwardCodes.from_csr(SparseCodes(idx, vals, H).to_csr(), scale)
    blocks = QueryBlocks.of(values, rng.normal(size=3).astype(np.float32), H, K)
    arrays = (docs.indptr, docs.indices, docs.values, docs.scale, docs.norms)
    def search(slack: np.ndarray, threads: int) -> tuple[np.ndarray, np.ndarray]:
        varied = QueryBlocks(blocks.weights, blocks.coarse, blocks.unscale, slack, blocks.offsets, blocks.count)
        return run_projected(_projected_kernel(), varied, n, arrays, 20, threads)

    for threads in (1, 2):
        rescored = search(np.full_like(blocks.slack, np.inf), threads)
        first_pass = search(blocks.slack, threads)
        np.testing.assert_array_equal(first_pass[1], rescored[1])
        np.testing.assert_array_equal(first_pass[0], rescored[0])
    assert (search(np.zeros_like(blocks.slack), 1)[1] != rescored[1]).any()  # the case needs the bound


def test_projected_layout_keeps_wide_code_spaces() -> None:
    """More than 65,536 code dimensions: the row layout switches to 32-bit indices."""
    rng = np.random.default_rng(6)
    idx = rng.integers(0, 70_000, size=(300, 4))
    idx[:, 1:] = idx[:, :1] + np.arange(1, 4) * 7  # distinct per row
    docs = SparseCodes(idx, rng.random((300, 4)).astype(np.float32), 70_100)
    queries = ProjectedQueries(rng.normal(size=(5, 70_100)).astype(np.float32))
    assert ForwardCodes.from_csr(docs.to_csr()).indices.dtype == np.uint32
    assert_matches_brute_force(SparseIndex(docs).search(queries, 10), queries.similarity(docs), 10, exact_ids=True)


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


def test_reciprocal_ranks_by_hand() -> None:
    scores = torch.tensor([[0.9, 0.5, 0.7, 0.1], [0.2, 0.8, 0.8, 0.3], [0.4, 0.3, 0.2, 0.1]])
    relevant = torch.tensor([[False, False, True, True], [False, False, True, False], [False] * 4])
    # query 0: best relevant 0.7, one row above -> 1/2; query 1: a tie with the relevant 0.8 counts for it -> 1;
    # query 2: nothing relevant -> 0
    np.testing.assert_allclose(reciprocal_ranks(scores, relevant).numpy(), [0.5, 1.0, 0.0])


def test_top_k_is_capped_at_the_index_size() -> None:
    queries, docs = _pairs()["dense"]
    _, ids = DenseIndex(docs[:4]).search(queries, 10)
    assert ids.shape == (Q, 4)


def test_registry_picks_the_backend_from_the_code_kinds() -> None:
    pairs = _pairs()
    assert isinstance(build_index(pairs["dense"][1], device="cpu"), DenseIndex)
    assert isinstance(build_index(pairs["sparse"][1], device="cpu"), SparseIndex)
    assert isinstance(build_index(pairs["binary"][1], device="cpu"), BinaryIndex)
    assert isinstance(build_index(pairs["int8"][1], device="cpu"), Int8Index)
    assert isinstance(build_index(pairs["binary_sparse"][1], device="cpu"), SparseIndex)
    projected = build_index(pairs["sparse"][1], query_kind="projected", device="cpu")
    assert isinstance(projected, SparseIndex) and projected.backend == "numba-rows"
    with pytest.raises(ValueError, match="no index backend for binary queries against dense documents; served: "):
        build_index(pairs["dense"][1], query_kind="binary")
    infos = {info.name: info for info in adaptemb.get_index_registry().infos()}
    assert infos["sparse-postings"].source.package == "adaptemb"


def test_wrong_query_kind_and_device_are_clear_errors() -> None:
    pairs = _pairs()
    index = DenseIndex(pairs["dense"][1])
    with pytest.raises(TypeError, match="takes dense query codes for dense documents; got sparse"):
        index.search(pairs["sparse"][0])
    with pytest.raises(ValueError, match="serves sparse or projected queries for sparse documents"):
        SparseIndex(pairs["sparse"][1], query_kind="dense")
    with pytest.raises(ValueError, match="top_k must be an integer >= 1"):
        index.search(pairs["dense"][0], 0)
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


def test_sparse_postings_layout() -> None:
    docs = SparseCodes(np.array([[0, 2], [2, 1]]), np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), 3)
    lists = SparseIndex(docs, backend="scipy")._lists
    assert isinstance(lists, sp.csr_matrix) and lists.shape == (3, 2)
    assert lists[2].indices.tolist() == [0, 1]  # dimension 2 is active in docs 0 and 1


def test_blocked_postings_layout() -> None:
    docs = SparseCodes(np.array([[0, 2], [2, 1]]), np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), 3)
    blocked = BlockedPostings.from_csr(docs.to_csr(), np.array([1.0, 0.5], np.float32))
    assert blocked.indptr.tolist() == [0, 1, 2, 4]  # one block: dims 0, 1, 2
    assert blocked.ids.tolist() == [0, 1, 0, 1] and blocked.ids.dtype == np.uint16
    assert blocked.values.tolist() == [1.0, 4.0, 2.0, 3.0]
    assert blocked.scale.tolist() == [1.0, 0.5]
    assert blocked.nbytes == 4 * 8 + 4 * 2 + 4 * 4 + 2 * 4
    two_blocks = BlockedPostings.from_csr(docs.to_csr(), block_rows=1)
    assert two_blocks.indptr.tolist() == [0, 1, 1, 2, 2, 3, 4]  # block 0: dims 0..2, then block 1
    assert two_blocks.ids.tolist() == [0, 0, 0, 0]


def test_index_backends_register_like_compressors(fresh_plugins: None) -> None:
    """A third-party plugin ships a backend for its own code kind; a clashing pair names both plugins."""

    class Reversed(Index):
        name = "reversed-dense"
        pairs = (("reversed", "dense"),)

        def _search_batch(self, queries: Codes, top_k: int) -> tuple[np.ndarray, np.ndarray]:
            return top_k(-(queries.to_dense() @ self.docs.to_dense().T), top_k)

    @adaptemb.hookimpl
    def register_index_backends(registry: adaptemb.IndexRegistry) -> None:
        registry.add(Reversed)

    adaptemb.register_plugin(type("P", (), {"register_index_backends": staticmethod(register_index_backends)}), name="rev")
    assert adaptemb.get_index_registry().for_kinds("reversed", "dense") is Reversed

    class Clash(Reversed):
        name = "clash"
        pairs = (("dense", "dense"),)

    @adaptemb.hookimpl
    def register_clash(registry: adaptemb.IndexRegistry) -> None:
        registry.add(Clash)

    adaptemb.register_plugin(type("C", (), {"register_index_backends": staticmethod(register_clash)}), name="clash")
    with pytest.raises(adaptemb.DuplicateIndexError, match="DenseIndex .*clashes with .*Clash .*plugin 'clash'|Clash .*plugin 'clash'.*clashes with DenseIndex"):
        adaptemb.get_index_registry()


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
    with pytest.raises(ValueError, match="metric='cosine' is defined for binary_sparse codes"):
        SparseIndex(docs, metric="cosine")
    with pytest.raises(ValueError, match="doc_scale must be 10 finite numbers"):
        SparseIndex(docs, doc_scale=np.ones(3))
