"""The faiss-backed methods (pq, opq, sq, rabitq): exact bytes, faiss parity, save/load, budgets, errors.

Parity runs on real text embeddings (the shipped default dataset, 384-d): each method's index returns what
faiss itself returns for the same factory string, trained on the same rows.
"""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import pytest

import adaptemb
from adaptemb.errors import CorruptFileError, InvalidConfigError, NotFittedError

DOCS, QUERIES = 1000, 100


@pytest.fixture(scope="module")
def real() -> tuple[np.ndarray, np.ndarray]:
    from adaptemb.datasets import load_dataset

    data = load_dataset("default", progress=False)
    docs = np.ascontiguousarray(data.corpus[:DOCS], dtype=np.float32)
    queries = np.ascontiguousarray(data.queries[:QUERIES], dtype=np.float32)
    return docs, queries


def _faiss_direct(spec: str, docs: np.ndarray, queries: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
    index = faiss.index_factory(docs.shape[1], spec, faiss.METRIC_INNER_PRODUCT)
    index.train(docs)
    index.add(docs)
    return index.search(queries, k)


def _ours(method: str, docs: np.ndarray, queries: np.ndarray, k_top: int = 10, *, k: int | None = None,
          **params: object) -> tuple[adaptemb.Compressor, tuple[np.ndarray, np.ndarray]]:
    model = adaptemb.fit(docs, method, k=k, **params)
    index = model.index(model.encode(docs), device="cpu")
    return model, index.search(queries, k_top)


def _same_top(ours: tuple[np.ndarray, np.ndarray], theirs: tuple[np.ndarray, np.ndarray], *, tol: float = 1e-5) -> None:
    np.testing.assert_allclose(ours[0], theirs[0], rtol=tol, atol=tol)
    # ids agree except where faiss itself has tied scores at a position
    differ = ours[1] != theirs[1]
    assert np.all(np.isclose(ours[0][differ], theirs[0][differ], atol=tol))
    assert differ.mean() < 0.01


@pytest.mark.slow
def test_pq_is_faiss_index_pq(real: tuple[np.ndarray, np.ndarray]) -> None:
    docs, queries = real
    model, ours = _ours("pq", docs, queries, k=8)
    assert model.factory_string() == "PQ8"
    index = faiss.index_factory(docs.shape[1], "PQ8", faiss.METRIC_INNER_PRODUCT)
    index.do_polysemous_training = False  # relabels centroids only: same scores, much slower (see pq.py)
    index.train(docs)
    index.add(docs)
    _same_top(ours, index.search(queries, 10))
    codes = model.encode(docs)
    assert codes.bytes_per_vector == index.sa_code_size() == 8
    np.testing.assert_array_equal(codes.codes, index.sa_encode(docs))


def test_sq_is_faiss_scalar_quantizer(real: tuple[np.ndarray, np.ndarray]) -> None:
    docs, queries = real
    model = adaptemb.fit(docs, "sq")
    for bits in (4, 6, 8):
        index = model.index(model.encode(docs, k=bits), device="cpu")
        assert index.budget == bits
        _same_top(index.search(queries, 10), _faiss_direct(f"SQ{bits}", docs, queries))
        codes = model.encode(docs[:5], k=bits)
        assert codes.bytes_per_vector == faiss.index_factory(docs.shape[1], f"SQ{bits}").sa_code_size() == docs.shape[1] * bits // 8


@pytest.mark.parametrize("bits", [1, 2])
def test_rabitq_is_faiss_index_rabitq(real: tuple[np.ndarray, np.ndarray], bits: int) -> None:
    docs, queries = real
    model, ours = _ours("rabitq", docs, queries, k=bits, factor_dtype="float32")  # faiss' own code
    theirs = _faiss_direct("RaBitQ" if bits == 1 else f"RaBitQ{bits}", docs, queries)
    if bits == 1:
        _same_top(ours, theirs)
    else:  # faiss' own k=10 search filters by a probabilistic bound; ours keeps 2 x 10 candidates through it
        full = model.score(model.encode_queries(queries), model.encode(docs, k=bits))
        best = -np.sort(-full, axis=1)[:, :10]
        np.testing.assert_allclose(ours[0], best, rtol=1e-5, atol=1e-5)
        assert np.mean(ours[1] == theirs[1]) > 0.95
    code_size = faiss.IndexRaBitQ(docs.shape[1], faiss.METRIC_INNER_PRODUCT, bits).code_size
    assert model.encode(docs[:3], k=bits).bytes_per_vector == code_size == docs.shape[1] * bits // 8 + (8 if bits == 1 else 20)
    np.testing.assert_array_equal(model.encode(docs, k=bits).codes, model.faiss_index(bits).sa_encode(docs))


def test_rabitq_query_bits_and_rotation_match_faiss(real: tuple[np.ndarray, np.ndarray]) -> None:
    docs, queries = real
    _, ours = _ours("rabitq", docs, queries, query_bits=8, rotation=True, factor_dtype="float32")
    index = faiss.index_factory(docs.shape[1], f"RR{docs.shape[1]},RaBitQ", faiss.METRIC_INNER_PRODUCT)
    index.train(docs)
    index.add(docs)
    params = faiss.SearchParametersPreTransform()
    inner = faiss.RaBitQSearchParameters()
    inner.qb = 8  # faiss' default is 4 bits
    params.index_params = inner
    # the rotated queries may differ in a last float bit (another BLAS blocking), which can move an 8-bit level
    _same_top(ours, index.search(queries, 10, params=params), tol=1e-3)


@pytest.mark.slow
def test_opq_trains_faiss_opq(real: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    docs, queries = real
    model = adaptemb.fit(docs[:600], "opq", k=8, opq_iterations=3, train_iterations=5)
    assert model.factory_string() == "OPQ8,PQ8"
    rotation = model.state_tensors()["rotation"].numpy()
    np.testing.assert_allclose(rotation @ rotation.T, np.eye(docs.shape[1]), atol=1e-4)
    codes = model.encode(docs)
    assert codes.bytes_per_vector == 8 and set(codes.shared_arrays) == {"pq_centroids", "rotation"}
    # asymmetric score = <q, decode(code)>: the rotation is undone by faiss' reverse transform
    scores = model.score(model.encode_queries(queries), codes)
    np.testing.assert_allclose(scores, queries @ model.decode(codes).T, rtol=1e-4, atol=1e-4)
    loaded = adaptemb.load(model.save(tmp_path / "opq.safetensors"))
    np.testing.assert_array_equal(loaded.encode(docs).codes, codes.codes)


@pytest.mark.slow
def test_opq_budget_start_continues_the_fitted_rotation(real: tuple[np.ndarray, np.ndarray]) -> None:
    """``budget_start(k)``: opq for another M whose rotation training continues from the fitted rotation for
    ``budget_start_iterations`` alternations (faiss' OPQMatrix keeps a rotation it is given), not from a random one."""
    docs, _ = real
    params = {"k": 8, "nbits": 4, "opq_iterations": 2, "seed": 0}
    first = adaptemb.fit(docs[:900], "opq", **params)
    start = first.budget_start(16)
    assert start is not None and not start.is_fitted and start.config.k == 16 and start.config.budget_start_iterations == 3
    start.fit(docs[:900])
    fresh = adaptemb.fit(docs[:900], "opq", **{**params, "k": 16})
    assert start.fit_report["rotation_start"] == "given" and fresh.fit_report["rotation_start"] == "random"
    assert start.encode(docs[:5]).bytes_per_vector == 8  # 16 codes of 4 bits
    # the fitted rotation is where faiss' training starts: another first fit starts elsewhere, and a random start
    # (faiss' fixed-seed one) with as many alternations ends elsewhere too
    other_first = adaptemb.fit(docs[:900], "opq", **{**params, "seed": 1})
    other_start = other_first.budget_start(16)
    assert other_start is not None
    other_start.fit(docs[:900])
    random_start = adaptemb.fit(docs[:900], "opq", **{**params, "k": 16, "opq_iterations": 3})
    rotation = start.state_tensors()["rotation"].numpy()
    for model in (other_start, random_start):
        assert not np.allclose(model.state_tensors()["rotation"].numpy(), rotation, atol=1e-3)
    assert adaptemb.get_compressor("opq", **params, budget_start_iterations=None).fit(docs[:900]).budget_start(16) is None
    again = first.budget_start(16).fit(docs[:900])  # deterministic with a seed
    np.testing.assert_array_equal(again.encode(docs).codes, start.encode(docs).codes)
    with pytest.raises(NotFittedError):
        adaptemb.get_compressor("opq", **params).budget_start(16)


@pytest.mark.slow
def test_opq_rotation_trains_on_a_sample_and_the_codebooks_on_every_row(real: tuple[np.ndarray, np.ndarray]) -> None:
    """The rotation trains on a seeded sample of ``opq_rows_per_centroid`` rows per centroid or per dimension,
    whichever allows more; the final codebooks on every row with ``train_iterations`` (faiss' OPQ loop used to leave
    them at its own 4 whatever the config said)."""
    docs, _ = real
    params = {"k": 8, "nbits": 4, "opq_iterations": 2, "seed": 0}
    sampled = adaptemb.fit(docs[:900], "opq", opq_rows_per_centroid=1, **params)  # d = 384 > 16 centroids
    assert sampled.fit_report["rotation_train_rows"] == 384 and sampled.fit_report["train_rows"] == 900
    narrow = np.ascontiguousarray(docs[:900, :64])  # 64 dims < 256 centroids at 8 bits
    by_centroids = adaptemb.fit(narrow, "opq", **{**params, "nbits": 8}, opq_rows_per_centroid=2)
    assert by_centroids.fit_report["rotation_train_rows"] == 2 * 256
    every = adaptemb.fit(docs[:900], "opq", opq_rows_per_centroid=None, **params)
    assert every.fit_report["rotation_train_rows"] == 900
    assert not np.array_equal(sampled.state_tensors()["rotation"].numpy(), every.state_tensors()["rotation"].numpy())
    with pytest.raises(ValueError, match="needs at least d = 384 rows; got 300"):
        adaptemb.fit(docs[:300], "opq", **params)
    one, five = (adaptemb.fit(docs[:600], "opq", train_iterations=n, **params) for n in (1, 5))
    np.testing.assert_array_equal(one.state_tensors()["rotation"].numpy(), five.state_tensors()["rotation"].numpy())
    assert not np.array_equal(one.state_tensors()["pq_centroids"].numpy(), five.state_tensors()["pq_centroids"].numpy())
    again = adaptemb.fit(docs[:600], "opq", train_iterations=5, **params)  # deterministic with a seed
    np.testing.assert_array_equal(again.encode(docs).codes, five.encode(docs).codes)


@pytest.mark.slow
@pytest.mark.parametrize(("method", "params"), [("pq", {"k": 16}), ("sq", {"k": 4}), ("rabitq", {"k": 3, "rotation": True})])
def test_save_load_rebuilds_faiss_with_identical_codes(real: tuple[np.ndarray, np.ndarray], tmp_path: Path,
                                                       method: str, params: dict[str, object]) -> None:
    docs, queries = real
    model = adaptemb.fit(docs, method, **params)
    path = model.save(tmp_path / "model.safetensors")
    assert set(adaptemb.load(path).state_tensors()) <= {"pq_centroids", "sq_trained", "rabitq_center", "rotation"}
    loaded = adaptemb.load(path)
    codes = model.encode(docs)
    np.testing.assert_array_equal(loaded.encode(docs).codes, codes.codes)
    index = model.index(codes, device="cpu")
    index.save(tmp_path / "index.safetensors")
    again = adaptemb.load_index(tmp_path / "index.safetensors", device="cpu")
    for left, right in zip(index.search(queries, 10), again.search(queries, 10)):
        np.testing.assert_array_equal(left, right)
    adaptemb.save_codes(codes, tmp_path / "codes.npz")
    reread = adaptemb.load_codes(tmp_path / "codes.npz")
    np.testing.assert_array_equal(reread.codes, codes.codes)
    assert reread.nbytes == codes.nbytes == codes.row_nbytes + codes.shared_nbytes


def test_damaged_tables_are_refused(real: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    docs, _ = real
    codes = adaptemb.fit(docs[:300], "sq").encode(docs[:10])
    arrays = codes.to_arrays()
    np.savez(tmp_path / "bad.npz", **{**arrays, "sq_trained": arrays["sq_trained"][:-1]})
    with pytest.raises(ValueError, match="sq_trained"):
        type(codes).from_arrays({**arrays, "sq_trained": arrays["sq_trained"][:-1]}, codes.dim)
    adaptemb.save_codes(codes, tmp_path / "ok.npz")
    with np.load(tmp_path / "ok.npz") as archive:
        good = dict(archive)
    np.savez(tmp_path / "bad.npz", **{**good, "sq_bits": np.array([5], np.uint8)})
    with pytest.raises(CorruptFileError, match="sq_bits"):
        adaptemb.load_codes(tmp_path / "bad.npz")


def test_budgets_say_what_is_valid(real: tuple[np.ndarray, np.ndarray]) -> None:
    docs, _ = real
    d = docs.shape[1]
    with pytest.raises(InvalidConfigError, match=r"k=10 sub-quantisers must divide d=384; valid k: 1, 2, 3, 4, 6, 8, 12, 16"):
        adaptemb.fit(docs[:300], "pq", k=10)
    pq = adaptemb.fit(docs[:300], "pq", k=4)
    budgets = pq.budgets()
    assert (budgets.low, budgets.high, budgets.per_fit, budgets.bounds_active) == (4, 4, True, False)
    with pytest.raises(ValueError, match="fitted for k=4 only; got k=8: fit another pq with k=8"):
        pq.encode(docs[:2], k=8)
    with pytest.raises(InvalidConfigError, match="needs at least 256 rows; got 100"):
        adaptemb.fit(docs[:100], "pq", k=4)
    assert pq.budget_for_bytes(32) == 32 and pq.budget_for_bytes(40) == 32 and pq.budget_for_bytes(0.5) is None
    sq = adaptemb.fit(docs[:300], "sq")
    assert sq.budgets().options() == [4, 6, 8]
    with pytest.raises(ValueError, match="k=5 is not a budget of sq: valid budgets are 4, 6, 8"):
        sq.encode(docs[:2], k=5)
    with pytest.raises(adaptemb.InvalidConfigError):
        adaptemb.fit(docs[:300], "rabitq", k=5)
    rabitq = adaptemb.fit(docs[:300], "rabitq")
    assert rabitq.budgets().options() == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="k=5 is out of range"):
        rabitq.encode(docs[:2], k=5)
    assert [rabitq.encode(docs[:2], k=b).bytes_per_vector for b in (1, 2, 3, 4)] == [  # float16 factors, the default
        d // 8 + 4, d // 8 + 6 + d // 8 + 4, d // 8 + 6 + 2 * d // 8 + 4, d // 8 + 6 + 3 * d // 8 + 4]
