"""The csr compressor: packed sparse codes, adaptive k, byte budgets, supervision, scoring, save/load, quality floors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import adaptemb
from adaptemb import PackedSparseCodes, ProjectedQueries
from adaptemb.testing import assert_same_codes
from adaptemb_plugins.csr.values import MEASURED_BITS, VALUE_BITS_MARGIN

SMALL = {"hidden": 64, "k": 4, "epochs": 3, "batch_size": 64, "k_aux": 16, "progress": False}


def _clustered(n: int = 512, d: int = 16, classes: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, d))
    labels = rng.integers(0, classes, size=n)
    x = centres[labels] + 0.5 * rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), labels


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return _clustered()


@pytest.fixture(scope="module")
def fitted(data):
    return adaptemb.fit(data[0], "csr", **SMALL)


@pytest.mark.slow
def test_exactly_k_nonnegative_entries(fitted, data) -> None:
    codes = fitted.encode(data[0])
    assert isinstance(codes, PackedSparseCodes) and codes.k == 4
    indices, _ = codes.slots()
    assert indices.shape == (len(data[0]), 4) and (codes.to_dense() >= 0).all()
    for row in indices:
        assert len(set(row.tolist())) == 4
    bits = fitted.value_bits(4)
    assert codes.value_bits == bits and bits in (1, 2, 3, 4, 8)
    assert codes.row_nbytes == len(data[0]) * -(-4 * (7 + bits) // 8)  # h = 64: 7-bit indices (64 = empty slot)


def test_any_k_after_fit(fitted, data) -> None:
    for k in (1, 7, 64):
        codes = fitted.encode(data[0][:10], k=k)
        assert codes.slots()[0].shape == (10, k)
        assert (codes.to_dense() >= 0).all()
    low, high = (fitted.encode(data[0][:10], k=k).slots()[0] for k in (2, 6))
    assert all(set(a) <= set(b) for a, b in zip(low.tolist(), high.tolist())), "the top-2 latents stay among the top-6"
    with pytest.raises(ValueError):
        fitted.encode(data[0][:2], k=65)


@pytest.mark.slow
def test_explicit_value_bits_override_the_choice(data) -> None:
    compressor = adaptemb.fit(data[0], "csr", value_bits=2, **{**SMALL, "epochs": 1})
    codes = compressor.encode(data[0][:20], k=8)
    # Elias-Fano indices, 3 low bits: 8 * 3 + (8 ones + 64 >> 3 zeros) + 8 * 2 value bits = 56 bits (fixed: 8 * 9 = 72)
    assert codes.value_bits == 2 and codes.codebook.shape == (64, 4) and codes.bytes_per_vector == 7
    # 2 low bits: k = 11 takes 11 * 2 + 11 + 16 + 11 * 2 = 71 bits <= 72, k = 12 76; k = 9 takes 61 <= 64, k = 10 66
    assert compressor.budget_for_bytes(9) == 11 and compressor.budget_for_bytes(8) == 9
    assert compressor.budget_for_bytes(1) is None
    floats = adaptemb.fit(data[0], "csr", value_bits=16, **{**SMALL, "epochs": 1})
    exact = floats.encode(data[0][:20])
    indices, _ = exact.slots()
    with torch.no_grad():  # the float values before packing: the encoder module's first stage
        chosen, values = floats.encoder(4).encoder(torch.from_numpy(data[0][:20]))
    np.testing.assert_array_equal(np.take_along_axis(exact.to_dense(), indices, axis=1),
                                  np.take_along_axis(values.numpy(), np.argsort(chosen.numpy(), axis=1), axis=1)
                                  .astype(np.float16).astype(np.float32))  # stored slots ascend by index


def test_files_written_before_packed_codes_load_with_float16_values() -> None:
    """Their config says value_dtype (float16 or float32 values): now float16 values, packed."""
    for dtype in ("float16", "float32"):
        assert adaptemb.get_compressor("csr", value_dtype=dtype).config.value_bits == 16


def test_bytes_choose_k_and_value_bits_from_the_measured_table(fitted, data) -> None:
    table = fitted.fit_report["extra"]["value_choices"]
    assert {row["value_bits"] for row in table} == set(MEASURED_BITS) == {1, 2, 3, 4}  # 8 and 16 never won
    assert all(0.0 <= row["recall@10"] <= 1.0 for row in table)
    for nbytes in (3, 5, 8, 16, 40):
        codes = fitted.encode(data[0][:50], bytes=nbytes)
        assert codes.bytes_per_vector <= nbytes
        assert codes.value_bits == fitted.value_bits(codes.k)
        fits = [row for row in table if row["chosen"] and row["bytes"] <= nbytes]
        best, chosen = max(row["recall@10"] for row in fits), next(row for row in fits if row["k"] == codes.k)
        assert chosen["recall@10"] >= best - VALUE_BITS_MARGIN - 1e-4  # the rows' recall is rounded to 4 places
        trained = fitted.config.k  # more latents are preferred up to the trained k; above it only the best recall
        assert not [row for row in fits if trained >= row["k"] > codes.k
                    and row["recall@10"] >= best - VALUE_BITS_MARGIN + 1e-4]
        assert codes.k <= trained or chosen["recall@10"] >= best - 1e-4
    with pytest.raises(adaptemb.InvalidConfigError, match="bytes"):
        fitted.encode(data[0][:5], bytes=0.5)


def test_fit_report(fitted) -> None:
    report = fitted.fit_report
    assert report["device"] == "cpu" and report["epochs"] >= 1
    extra = report["extra"]
    assert 0.0 <= extra["dead_fraction"] <= 1.0
    assert set(extra["activation_frequency"]) >= {"min", "median", "max", "mean"}
    assert {"recon_k", "contrastive", "aux"} <= set(report["train_losses"])


def _contrastive_drop(compressor) -> tuple[float, float]:
    extra = compressor.fit_report["extra"]
    return extra["losses_before"]["contrastive"], extra["losses_after"]["contrastive"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["views", "pairs", "labels"])
def test_supervision_lowers_contrastive_loss(data, kind: str) -> None:
    x, labels = data
    rng = np.random.default_rng(1)
    supervision = {}
    if kind == "pairs":
        noisy = x + 0.1 * rng.normal(size=x.shape).astype(np.float32)
        supervision["pairs"] = (noisy, x)
    elif kind == "labels":
        supervision["labels"] = labels
    compressor = adaptemb.fit(x, "csr", **{**SMALL, "epochs": 5}, **supervision)
    before, after = _contrastive_drop(compressor)
    assert after < before
    supervised = compressor.fit_report["extra"].get("supervised")
    assert (supervised is None) == (kind == "views")
    if supervised is not None:  # the fine-tune keeps its best held-out state, the unsupervised one included
        assert supervised["held_out_queries"] > 0
        assert supervised["held_out_mrr_after"] >= supervised["held_out_mrr_before"]


@pytest.mark.slow
def test_compress_passes_supervision(data) -> None:
    x, labels = data
    small = {key: v for key, v in SMALL.items() if key != "k"}
    codes = adaptemb.compress(x, "csr", k=4, labels=labels, **{**small, "epochs": 1})
    assert len(codes) == len(x) and codes.k == 4


def test_save_load_identical_codes(fitted, data, tmp_path) -> None:
    path = fitted.save(tmp_path / "csr.safetensors")
    loaded = adaptemb.load(path)
    assert loaded.fit_report is None and [loaded.value_bits(k) for k in range(1, 65)] == [
        fitted.value_bits(k) for k in range(1, 65)]
    for k in (2, 4, 9):
        assert_same_codes(fitted.encode(data[0], k=k), loaded.encode(data[0], k=k))
    assert loaded.budget_for_bytes(6) == fitted.budget_for_bytes(6)
    q = data[0][:5]
    np.testing.assert_array_equal(fitted.encode_queries(q).values, loaded.encode_queries(q).values)


@pytest.mark.parametrize("normalize", ["l2", "none", "standardize"])
@pytest.mark.parametrize("decoder", ["untied", "tied"])
def test_asymmetric_score_is_query_dot_reconstruction(data, normalize: str, decoder: str) -> None:
    x = data[0][:128] * 3.0  # not unit norm, so "standardize"/"none" differ from "l2"
    compressor = adaptemb.fit(x, "csr", normalize=normalize, decoder=decoder, value_bits=16, query_form="decoder",
                              **{**SMALL, "epochs": 1})
    docs = compressor.encode(x[:20], k=5)
    queries = x[20:23] + 0.1
    query_codes = compressor.encode_queries(queries)
    assert isinstance(query_codes, ProjectedQueries) and query_codes.dim == 64
    if normalize == "l2":  # the query is L2-normalised like the documents
        queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    expected = queries.astype(np.float64) @ compressor.decode(docs).astype(np.float64).T
    np.testing.assert_allclose(compressor.score(query_codes, docs), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("normalize", ["l2", "standardize"])
def test_encoder_queries_score_their_pre_activations(data, normalize: str) -> None:
    """The default asymmetric query: its encoder pre-activations W_enc (n(q) - b_pre) + b_enc against the dequantised
    documents; a zero query of an l2 compressor scores 0."""
    x = data[0][:200] * 2.0
    compressor = adaptemb.fit(x, "csr", normalize=normalize, **{**SMALL, "epochs": 1})
    docs = compressor.encode(x[:30], k=5)
    queries = np.concatenate([x[30:33] + 0.1, np.zeros((1, x.shape[1]), np.float32)])
    state = compressor.state_tensors()
    normalised = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-30) if normalize == "l2" else (
        (queries - state["shift"].numpy()) / state["scale"].numpy())
    pre = (normalised - state["pre_bias"].numpy()) @ state["enc_weight"].numpy().T + state["enc_bias"].numpy()
    if normalize == "l2":
        pre[3] = 0.0
    scores = compressor.score(compressor.encode_queries(queries), docs)
    np.testing.assert_allclose(scores, pre @ docs.to_dense().T, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_symmetric_scoring_is_sparse_dot(data) -> None:
    compressor = adaptemb.fit(data[0], "csr", scoring="symmetric", **{**SMALL, "epochs": 1})
    q, d = compressor.encode_queries(data[0][:4]), compressor.encode(data[0][:30])
    assert isinstance(q, PackedSparseCodes)
    np.testing.assert_allclose(compressor.score(q, d), q.to_dense() @ d.to_dense().T, rtol=1e-5, atol=1e-6)


def test_bad_config_is_clear() -> None:
    with pytest.raises(adaptemb.InvalidConfigError, match="decoder"):
        adaptemb.get_compressor("csr", decoder="sideways")
    with pytest.raises(ValueError, match="larger than the latent size"):
        adaptemb.fit(np.ones((8, 4), np.float32), "csr", k=20, hidden=16, progress=False)


@pytest.mark.gpu
def test_fits_on_cuda(data) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    compressor = adaptemb.fit(data[0], "csr", device="cuda", **SMALL)
    assert compressor.fit_report["device"].startswith("cuda")
    assert compressor.encode(data[0][:5]).k == 4


def _ndcg_at_10(scores: np.ndarray, qrels) -> float:
    top = np.argsort(-scores, axis=1)[:, :10]
    gains = np.asarray(qrels[np.arange(len(top))[:, None], top].todense()) > 0
    ideal = np.minimum(np.asarray((qrels > 0).sum(axis=1)).ravel(), 10)
    discounts = 1.0 / np.log2(np.arange(2, 12))
    idcg = np.array([discounts[:m].sum() for m in ideal])
    return float(np.mean((gains * discounts).sum(axis=1) / np.maximum(idcg, 1e-12)))


@pytest.mark.slow
def test_quality_floor_on_real_embeddings() -> None:
    from adaptemb.datasets import load_dataset

    dataset = load_dataset("default", progress=False)  # shipped: 384-d WordNet / MiniLM
    corpus, queries, qrels = dataset.corpus[:2000], dataset.queries, dataset.qrels[:, :2000]
    keep = np.asarray(qrels.sum(axis=1)).ravel() > 0
    queries, qrels = queries[keep], qrels[keep]
    full = _ndcg_at_10(queries @ corpus.T, qrels)
    csr = adaptemb.fit(corpus, "csr", k=32, epochs=4, progress=False)
    svd = adaptemb.fit(corpus, "svd")
    assert (csr.encode(corpus, k=32).active_counts() == 32).mean() > 0.99, "trained codes keep k non-zero entries"
    for k in (16, 32):
        ours = _ndcg_at_10(csr.score(csr.encode_queries(queries, k=k), csr.encode(corpus, k=k)), qrels)
        pca = _ndcg_at_10(svd.score(svd.encode_queries(queries, k=k), svd.encode(corpus, k=k)), qrels)
        assert ours > pca, f"k={k}: csr {ours:.3f} <= pca {pca:.3f}"
        assert ours >= 0.6 * full, f"k={k}: csr keeps {ours / full:.0%} of full NDCG@10"


def test_codebooks_are_per_feature_k_means() -> None:
    from adaptemb_plugins.csr.values import fit_codebook

    values = np.array([1.0, 1.2, 0.8, 5.0, 5.5, 4.5, 2.0, 3.0, 0.0], np.float32)  # feature 0: two clusters
    features = np.array([0, 0, 0, 0, 0, 0, 1, 1, 2])  # feature 1: too rare for 4 levels; 2: only a zero
    two = fit_codebook(values, features, 3, 2)
    np.testing.assert_allclose(two[0], [1.0, 5.0], rtol=1e-6)
    np.testing.assert_allclose(two[1], [2.0, 3.0], rtol=1e-6)  # its own two values
    four = fit_codebook(values, features, 3, 4)
    np.testing.assert_array_equal(four[1], four[2])  # rare and unseen features take the pooled codebook
    assert np.all(np.diff(four, axis=1) >= 0)


def test_budgets_fix_each_k_s_value_bits_smallest_first() -> None:
    """Budgets, smallest first, each take the most latents within the margin of the best recall among the codes
    that fit and whose k is free or holds that width, and fix their k's width; a k no budget picks keeps the fewest
    bits within the tolerance of its best."""
    from adaptemb_plugins.csr.values import ValueTables, pick

    # rows (k, value bits, bytes, recall) over h = 1536, bytes as packed (row_bytes)
    rows = [[2, 1, 3, 0.50], [2, 2, 4, 0.53], [2, 4, 4, 0.535],  # 3 B fixes k=2 at 1 bit: 4 B cannot take 2-4 bits
            [3, 1, 5, 0.60], [3, 2, 5, 0.65],  # 5 B: 2 bits recall 0.05 more than 1 bit, beyond the margin
            [4, 1, 6, 0.645], [4, 2, 7, 0.66],  # 6 B: k=4 within 0.01 of k=3's 0.65: more latents win, 1 bit
            [6, 1, 9, 0.50], [6, 2, 9, 0.503], [6, 3, 10, 0.504]]  # never picked: fewest bits within 0.005, 1
    tables = ValueTables(torch.zeros(4, 1536, 32, dtype=torch.float16), torch.tensor(rows))
    assert tables.bits_by_k == {2: 1, 3: 2, 4: 1, 6: 1}
    assert [tables.budget_for_bytes(b) for b in (2, 3, 4, 5, 6, 7, 10)] == [None, 2, 2, 3, 4, 4, 4]
    assert tables.recall_within(7) == pytest.approx(0.645) and tables.recall_within(2) == -1.0
    assert tables.budget_for_bytes(6, keep=lambda k: k != 4) == 3  # a head's own k only
    assert pick([[3, 2, 5, 0.65], [3, 1, 5, 0.65]])[1] == 1  # a tie in k and recall: fewer bits
    wide = [[32, 1, 52, 0.730], [40, 2, 70, 0.735], [64, 1, 60, 0.738]]  # above the trained k latents stop winning
    assert pick(wide)[0] == 64 and pick(wide, trained_k=32)[0] == 32
    assert pick(wide[1:], trained_k=32)[0] == 64  # none within reach up to it: the best recall
    # a table fitted before Elias-Fano indices stored k=5 at 1 bit as 5 * 12 bits = 8 B; it packs into 7 B now
    stale = ValueTables(torch.zeros(5, 1536, 32, dtype=torch.float16), torch.tensor([*rows, [5, 1, 8, 0.70]]))
    assert stale.sized[-1, 2] == PackedSparseCodes.row_bytes(5, 1536, 1) == 7
    assert stale.budget_for_bytes(7) == 5 and stale.rows()[-1]["bytes"] == 7


def test_info_shows_the_choice_table(fitted, tmp_path) -> None:
    from typer.testing import CliRunner

    from adaptemb.cli import app

    path = fitted.save(tmp_path / "csr.safetensors")
    output = CliRunner().invoke(app, ["info", str(path)], env={"COLUMNS": "200"}).output
    assert "byte budgets (the value bits of each k, measured at fit):" in output
    bits = fitted.value_bits(4)
    assert f'{{"k": 4, "value_bits": {bits}, "bytes": {-(-4 * (7 + bits) // 8)}, "recall@10": ' in output



def test_k_anneals_linearly_to_its_target_then_holds() -> None:
    from adaptemb_plugins.csr.objective import LossSettings

    settings = LossSettings(k=4, multi_k_factor=4, multi_k_coef=0.125, k_aux=16, aux_coef=0.03, dead_steps=50,
                            cl_coef=1.0, temperature=0.2, view_dropout=0.0, k_start=64, anneal_steps=100)
    assert [settings.k_at(step) for step in (0, 25, 50, 99, 100, 1000)] == [64, 49, 34, 5, 4, 4]
    still = LossSettings(**{**settings.__dict__, "k_start": 0})
    assert {still.k_at(step) for step in (0, 50, 100)} == {4}


@pytest.mark.slow
def test_heads_fitted_for_byte_budgets(data, tmp_path) -> None:
    x = _clustered(n=3000, d=32, classes=16)[0]
    params = {**SMALL, "hidden": 128, "k": 24, "epochs": 2, "head_epochs": 2}
    compressor = adaptemb.fit(x, "csr", bytes=[6, 8, 40], **params)
    reports = {entry["bytes"]: entry for entry in compressor.fit_report["extra"]["heads"]}
    assert set(reports) == {6, 8, 40}
    assert reports[40]["k"] > 24 / 3 and not reports[40]["kept"] and "main fit" in reports[40]["why"]
    for nbytes, k in ((6, 5), (8, 8)):  # the most 2-bit values a row of that many bytes holds over h = 128:
        entry = reports[nbytes]  # 5 * 4 low bits + 5 + 8 bitmap bits + 10 = 43 <= 48; 8 * 4 + 8 + 8 + 16 = 64 <= 64
        assert entry["k"] == k == PackedSparseCodes.max_k_within(nbytes, 128, 2)
        assert entry["kept"] == (entry["held_out_recall@10"] > entry["main_fit_recall@10"])
        assert {"dead_fraction_before", "dead_fraction_after", "seconds"} <= set(entry)
    for nbytes in (6, 8, 10, 16, 40):
        assert compressor.encode(x, bytes=nbytes).bytes_per_vector <= nbytes
    loaded = adaptemb.load(compressor.save(tmp_path / "heads.safetensors"))
    for nbytes in (6, 8, 40):
        assert_same_codes(compressor.encode(x, bytes=nbytes), loaded.encode(x, bytes=nbytes))
        docs = loaded.encode(x, bytes=nbytes)
        np.testing.assert_array_equal(compressor.index(docs).search(x[:20], 5)[1], loaded.index(docs).search(x[:20], 5)[1])


def test_a_head_serves_the_k_up_to_its_own() -> None:
    """k goes to the head trained for the smallest k at or above it, the main fit (the largest) above them all."""
    from adaptemb_plugins.csr.heads import Head, serving

    heads = [Head(k, nbytes, None, None) for k, nbytes in ((32, 0), (5, 8), (7, 10))]  # type: ignore[arg-type]
    assert [serving(heads, k).k for k in (1, 5, 6, 7, 8, 13, 32, 100)] == [5, 5, 7, 7, 32, 32, 32, 32]


@pytest.mark.slow
def test_supervised_fine_tune_stops_after_its_patience(data) -> None:
    """The pairs' fine-tune runs until ``supervised_patience`` epochs in a row measure no better held-out MRR (or its
    epochs end), for the main fit and every head alike."""
    x, _ = data
    rng = np.random.default_rng(4)
    queries = x[:200] + 0.3 * rng.normal(size=(200, x.shape[1])).astype(np.float32)
    params = {**SMALL, "hidden": 128, "k": 24, "epochs": 2, "head_epochs": 1, "supervised_epochs": 8}
    for patience in (1, 3):
        compressor = adaptemb.fit(x, "csr", bytes=6, pairs=(queries, x[:200]), supervised_patience=patience, **params)
        extra = compressor.fit_report["extra"]
        for report in (extra["supervised"], *(head["supervised"] for head in extra["heads"])):
            every = report["steps_per_epoch"]
            assert report["steps"] == min(8 * every, report["best_step"] + patience * every)


def test_fit_for_bytes_needs_a_method_that_does() -> None:
    x = _clustered()[0]
    with pytest.raises(adaptemb.InvalidConfigError, match="svd is not fitted for a byte budget"):
        adaptemb.fit(x, "svd", bytes=16)
    with pytest.raises(adaptemb.InvalidConfigError, match="byte_budgets must be whole numbers"):
        adaptemb.fit(x, "csr", bytes=[0], **SMALL)


@pytest.mark.slow
def test_pairs_learn_a_query_map_that_is_saved(data, tmp_path) -> None:
    x, _ = data
    rng = np.random.default_rng(3)
    shift = rng.normal(size=(1, x.shape[1])).astype(np.float32)  # queries live elsewhere than their documents
    queries = x[:200] + 0.5 * shift + 0.05 * rng.normal(size=(200, x.shape[1])).astype(np.float32)
    compressor = adaptemb.fit(x, "csr", pairs=(queries, x[:200]), **{**SMALL, "epochs": 3})
    supervised = compressor.fit_report["extra"]["supervised"]
    assert supervised["held_out_queries"] == 40
    loaded = adaptemb.load(compressor.save(tmp_path / "pairs.safetensors"))
    np.testing.assert_allclose(compressor.encode_queries(queries[:10]).values, loaded.encode_queries(queries[:10]).values)
    without = adaptemb.fit(x, "csr", **{**SMALL, "epochs": 3})
    docs = compressor.encode(x)
    found = compressor.index(docs).search(queries, 1)[1][:, 0]
    found_without = without.index(without.encode(x)).search(queries, 1)[1][:, 0]
    assert (found == np.arange(200)).mean() >= (found_without == np.arange(200)).mean()


def test_pairs_that_do_not_help_are_declined_and_the_fit_is_the_one_without_them(data) -> None:
    """Pairs whose queries are noise, unrelated to their documents: the confirming share finds no gain, the fit
    report says the pairs were declined, and the codes are those of the fit without pairs."""
    from adaptemb_plugins.csr.supervision import CONFIRM_MIN_GAIN

    x, _ = data
    rng = np.random.default_rng(5)
    noise = rng.normal(size=(200, x.shape[1])).astype(np.float32)
    params = {**SMALL, "epochs": 2, "supervised_epochs": 3}
    compressor = adaptemb.fit(x, "csr", pairs=(noise, x[rng.permutation(len(x))[:200]]), **params)
    supervised = compressor.fit_report["extra"]["supervised"]
    assert supervised["kept"] is False and supervised["decision"].startswith("declined")
    assert supervised["confirm_queries"] == 40 and supervised["confirm_gain_interval"][0] <= CONFIRM_MIN_GAIN
    without = adaptemb.fit(x, "csr", **params)
    assert_same_codes(compressor.encode(x), without.encode(x))
    assert_same_codes(compressor.encode(x, k=4), without.encode(x, k=4))
    np.testing.assert_array_equal(compressor.encode_queries(x[:20]).values, without.encode_queries(x[:20]).values)
