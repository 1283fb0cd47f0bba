"""The orthogonal rotation of composed codes ``"projection+quantizer"``: seeded, stored, ITQ and Hadamard, the
choice per rank (``rotation="auto"`` / ``"pairs"``), float queries rotated against sign bits; values checked by
hand on tiny cases. tests/test_compose.py holds the rest of what is particular to compositions.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

import adaptemb
from adaptemb import InvalidConfigError
from adaptemb.compose import (
    HadamardRotation,
    hadamard_rotation,
    itq_rotation,
    random_rotation,
)
from adaptemb.compose import choice as compose_choice
from adaptemb.compose.rotation import DEFAULT_ITQ_ITERATIONS
from adaptemb.index.float_binary import FloatBinaryIndex
from adaptemb.serialization import read_tensors
from adaptemb.testing import clustered_embeddings


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    return clustered_embeddings(n=300, dim=48)[0]



# -- the rotation --------------------------------------------------------------------------------------


def test_the_rotation_is_seeded_orthogonal_and_stored(x: np.ndarray, tmp_path: Path) -> None:
    fitted = adaptemb.fit(x, "svd+binary", byte_budgets=[2], rotation="random")
    assert fitted.budgets().values == (16, 48) and fitted.fit_report["rotation"] == "random"
    _, tensors = read_tensors(fitted.save(tmp_path / "m.safetensors"))
    rotation = tensors["rank16.rotation"].double()
    torch.testing.assert_close(rotation @ rotation.T, torch.eye(16, dtype=torch.float64), atol=1e-5, rtol=0)
    np.testing.assert_allclose(rotation.numpy(), random_rotation(16, 0), atol=1e-6)
    assert {"ranks", "projection.components", "rank16.center", "rank48.quantizer.threshold"} <= set(tensors)
    plain = adaptemb.fit(x, "svd+binary", rotation="none", byte_budgets=[2])
    assert not any("rotation" in key for key in plain.state_tensors())


def test_rotation_pairs_keeps_per_rank_the_rotation_whose_pairs_rank_best(x: np.ndarray, tmp_path: Path) -> None:
    """rotation='pairs': random, itq and none each scored by the pairs' MRR; the best is kept, reported and stored,
    so the loaded file encodes and ranks alike; refused without pairs, or where a part learns from the pairs."""
    rng = np.random.default_rng(1)
    documents = x[:80]
    queries = documents + 0.5 * x.std() * rng.standard_normal(documents.shape)
    fitted = adaptemb.fit(x, "svd+binary", rotation="pairs", byte_budgets=[1, 2], pairs=(queries, documents))
    assert fitted.fit_report["rotation"] == "pairs"
    choices = fitted.fit_report["rotation_choice"]
    assert sorted(choices) == list(fitted.budgets().values)
    tensors = fitted.state_tensors()
    for rank, choice in choices.items():
        mrr = choice["pair_mrr"]
        assert set(mrr) == {"random", "itq", "none"} and choice["pairs"] == 80 and choice["distractor_rows"] == 220
        assert mrr[choice["chosen"]] == max(mrr.values()) and all(0 < value <= 1 for value in mrr.values())
        assert (f"rank{rank}.rotation" in tensors) == (choice["chosen"] != "none")
        alike = adaptemb.fit(x, "svd+binary", rotation=choice["chosen"], byte_budgets=[1, 2], bits_per_dim=1)
        np.testing.assert_array_equal(fitted.encode(x, k=rank).packed, alike.encode(x, k=rank).packed)
    loaded = adaptemb.load(fitted.save(tmp_path / "chosen.safetensors"))
    for rank in choices:
        codes = fitted.encode(x, k=rank)
        np.testing.assert_array_equal(loaded.encode(x, k=rank).packed, codes.packed)
        _, ids = fitted.index(codes).search(x[:20], 5)
        np.testing.assert_array_equal(loaded.index(loaded.encode(x, k=rank)).search(x[:20], 5)[1], ids)
    with pytest.raises(InvalidConfigError, match="pass pairs"):
        adaptemb.fit(x, "svd+binary", rotation="pairs", byte_budgets=[2])
    with pytest.raises(InvalidConfigError, match="cllr learns from them"):
        adaptemb.get_compressor("cllr+binary", rotation="pairs")


def test_itq_brings_the_rows_closer_to_their_signs() -> None:
    """Rows near the corners of a rotated cube: ITQ rotates them towards the corners (from a random start)."""
    rng = np.random.default_rng(0)
    corners = np.where(rng.standard_normal((500, 8)) > 0, 1.0, -1.0)
    centred = corners @ random_rotation(8, 5).T + 0.1 * rng.standard_normal((500, 8))
    start = random_rotation(8, 0)
    learned = itq_rotation(centred, start, iterations=30)
    np.testing.assert_allclose(learned @ learned.T, np.eye(8), atol=1e-5)

    def error(rotation: np.ndarray) -> float:
        z = centred @ rotation
        return float(np.square(np.sign(z) - z).sum())

    errors = [error(itq_rotation(centred, start, iterations)) for iterations in range(6)]
    assert all(later <= earlier * (1 + 1e-6) for earlier, later in itertools.pairwise(errors))  # each step lowers it
    assert error(learned) < 0.4 * error(start)  # measured 477 from 1,440 (ITQ finds a local optimum)
    converged = itq_rotation(centred, start, iterations=1000)  # stops once no sign changes: a fixed point
    np.testing.assert_array_equal(converged, itq_rotation(centred, converged, iterations=1000))


def test_itq_tail_keeps_the_leading_directions_and_learns_itq_on_the_rest(x: np.ndarray, tmp_path: Path) -> None:
    """rotation='itq-tail' at rank 48: the leading min(16, 48 // 4) = 12 directions pass unrotated (identity block),
    the other 36 get ITQ from the seeded random start on those coordinates; stored as a dense matrix and reloaded."""
    fitted = adaptemb.fit(x, "svd+binary", byte_budgets=[2], rotation="itq-tail", bits_per_dim=1)
    assert fitted.fit_report["rotations"] == {16: "itq-tail", 48: "itq-tail"}
    learned = fitted.state_tensors()["rank48.rotation"].double().numpy()
    np.testing.assert_allclose(learned[:12, :12], np.eye(12), atol=0)
    assert not learned[:12, 12:].any() and not learned[12:, :12].any()
    rows = fitted._projected(torch.from_numpy(x), 48).double().numpy()[:, 12:]
    expected = itq_rotation(rows - rows.mean(axis=0), random_rotation(36, 0), DEFAULT_ITQ_ITERATIONS)
    np.testing.assert_allclose(learned[12:, 12:], expected, atol=1e-5)
    np.testing.assert_allclose(learned @ learned.T, np.eye(48), atol=1e-5)
    loaded = adaptemb.load(fitted.save(tmp_path / "tail.safetensors"))
    np.testing.assert_array_equal(loaded.encode(x, k=48).packed, fitted.encode(x, k=48).packed)


def test_itq_tail_unrotated_sets_the_identity_block_and_zero_is_itq(x: np.ndarray) -> None:
    """itq_tail_unrotated=4 at rank 48 keeps 4 leading directions (not 12); a larger count stops at a quarter of the
    rank; 0 gives the ITQ matrix itself."""
    def rotation(**params: object) -> np.ndarray:
        fitted = adaptemb.fit(x, "svd+binary", byte_budgets=[6], rotation="itq-tail", bits_per_dim=1, **params)
        return fitted.state_tensors()["rank48.rotation"].double().numpy()

    four = rotation(itq_tail_unrotated=4)
    np.testing.assert_allclose(four[:4, :4], np.eye(4), atol=0)
    assert not four[:4, 4:].any() and four[4:12, 4:12].any() and not np.allclose(four[4:12, 4:12], np.eye(8))
    capped = rotation(itq_tail_unrotated=40)
    np.testing.assert_allclose(capped[:12, :12], np.eye(12), atol=0)
    itq = adaptemb.fit(x, "svd+binary", byte_budgets=[6], rotation="itq", bits_per_dim=1)
    np.testing.assert_allclose(rotation(itq_tail_unrotated=0), itq.state_tensors()["rank48.rotation"].double().numpy(),
                               atol=1e-6)
    with pytest.raises(adaptemb.InvalidConfigError, match="itq_tail_unrotated"):
        adaptemb.get_compressor("svd+binary", itq_tail_unrotated=-1)


def test_auto_rotation_is_none_at_small_ranks_then_itq_tail_before_sign_bits_and_none_before_other_quantisers(
        x: np.ndarray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """auto: no rotation up to rank NO_ROTATION_MAX_RANK (listed in the file as unrotated), itq-tail (the leading
    directions kept, ITQ from the seeded random start, DEFAULT_ITQ_ITERATIONS rounds, on the rest) above it before
    binary's sign bits; no rotation before rabitq."""
    assert compose_choice.NO_ROTATION_MAX_RANK == 128 and DEFAULT_ITQ_ITERATIONS == 20
    monkeypatch.setattr(compose_choice, "NO_ROTATION_MAX_RANK", 16)  # the 48-d fixture's ranks are 16 and 48
    fitted = adaptemb.fit(x, "svd+binary", byte_budgets=[2], bits_per_dim=1)
    assert fitted.fit_report["rotations"] == {16: "none", 48: "itq-tail"}
    _, tensors = read_tensors(fitted.save(tmp_path / "auto.safetensors"))
    assert tensors["unrotated_widths"].tolist() == [16] and "rank16.center" not in tensors
    np.testing.assert_array_equal(adaptemb.load(tmp_path / "auto.safetensors").encode(x).packed, fitted.encode(x).packed)
    learned = fitted.state_tensors()["rank48.rotation"].double().numpy()
    explicit = adaptemb.fit(x, "svd+binary", byte_budgets=[2], bits_per_dim=1, rotation="itq-tail")
    np.testing.assert_array_equal(learned, explicit.state_tensors()["rank48.rotation"].double().numpy())
    assert not np.allclose(learned[12:, 12:], random_rotation(36, 0), atol=1e-3)  # learned from the random start
    assert adaptemb.fit(x, "svd+rabitq", byte_budgets=[4]).fit_report["rotation"] == "none"


def test_rotation_pairs_chooses_between_hadamard_and_none_above_the_itq_rank(
        x: np.ndarray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compose_choice, "ITQ_MAX_RANK", 16)
    rng = np.random.default_rng(1)
    documents = x[:80]
    queries = documents + 0.5 * x.std() * rng.standard_normal(documents.shape)
    fitted = adaptemb.fit(x, "svd+binary", rotation="pairs", byte_budgets=[2], pairs=(queries, documents))
    choices = fitted.fit_report["rotation_choice"]
    assert set(choices[16]["pair_mrr"]) == {"random", "itq", "none"}
    assert set(choices[48]["pair_mrr"]) == {"hadamard", "none"}
    loaded = adaptemb.load(fitted.save(tmp_path / "chosen.safetensors"))
    np.testing.assert_array_equal(loaded.encode(x, k=48).packed, fitted.encode(x, k=48).packed)


@pytest.mark.parametrize("rank", [1, 8, 12, 48, 100, 384])
def test_the_hadamard_rotation_is_orthogonal_seeded_and_spreads_every_coordinate(rank: int) -> None:
    rotation = hadamard_rotation(rank, seed=3, center=torch.zeros(rank))
    matrix = rotation.matrix.double()
    torch.testing.assert_close(matrix @ matrix.T, torch.eye(rank, dtype=torch.float64), atol=1e-5, rtol=0)
    y = torch.randn(7, rank)
    torch.testing.assert_close(rotation.rotate(y), y @ rotation.matrix, atol=1e-5, rtol=0)
    assert torch.equal(hadamard_rotation(rank, 3, torch.zeros(rank)).signs, rotation.signs)
    if rank >= 8:  # no coordinate stays put: a Haar-random matrix's largest entry at these ranks is 0.2-0.8
        assert not torch.equal(hadamard_rotation(rank, 4, torch.zeros(rank)).signs, rotation.signs)
        assert matrix.abs().max() < 0.8


def test_the_walsh_hadamard_transform_is_sylvesters_matrix() -> None:
    from adaptemb.compose.rotation import walsh_hadamard

    h4 = torch.tensor([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]], dtype=torch.float32) / 2
    torch.testing.assert_close(walsh_hadamard(torch.eye(4)), h4)
    y = torch.randn(5, 32)
    torch.testing.assert_close(walsh_hadamard(walsh_hadamard(y)), y, atol=1e-5, rtol=0)  # H / sqrt(p) is its inverse


def test_a_hadamard_rotation_is_stored_as_signs_and_scores_like_its_matrix(x: np.ndarray, tmp_path: Path) -> None:
    fitted = adaptemb.fit(x, "svd+binary", byte_budgets=[2], rotation="hadamard", bits_per_dim=1)
    assert fitted.fit_report["rotation"] == "hadamard"
    path = fitted.save(tmp_path / "h.safetensors")
    _, tensors = read_tensors(path)
    assert tensors["rank16.hadamard_signs"].dtype == torch.int8 and tensors["rank16.hadamard_signs"].shape == (3, 16)
    assert not any(key.endswith(".rotation") for key in tensors)
    rotation, _ = fitted._stages[16]
    assert isinstance(rotation, HadamardRotation)
    y = fitted._projected(torch.from_numpy(x), 16)
    signs = np.where(((y - rotation.center) @ rotation.matrix).numpy() > tensors["rank16.quantizer.threshold"].numpy(), 1, -1)
    docs, queries = fitted.encode(x, k=16), fitted.encode_queries(x[:5], k=16)
    np.testing.assert_array_equal(docs.to_dense(), signs)
    np.testing.assert_allclose(queries.values, (y[:5] @ rotation.matrix).numpy(), atol=1e-5)
    loaded = adaptemb.load(path)
    np.testing.assert_array_equal(loaded.encode(x, k=16).to_dense(), docs.to_dense())
    np.testing.assert_array_equal(loaded.encode_queries(x[:5], k=16).values, queries.values)


def test_auto_rotates_two_bit_stages_by_itq_where_one_bit_stages_take_itq_tail(
        x: np.ndarray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compose_choice, "NO_ROTATION_MAX_RANK", 16)
    fitted = adaptemb.fit(x, "svd+binary", byte_budgets=[2, 12])
    assert fitted.fit_report["rotations"] == {16: "none", 48: "itq-tail", 96: "itq"}
    assert fitted.fit_report["bits_per_dim"][96] == 2
    itq = adaptemb.fit(x, "svd+binary", byte_budgets=[2, 12], rotation="itq")
    np.testing.assert_array_equal(fitted.encode(x, k=96).packed, itq.encode(x, k=96).packed)
    loaded = adaptemb.load(fitted.save(tmp_path / "two.safetensors"))
    np.testing.assert_array_equal(loaded.encode(x, k=96).packed, fitted.encode(x, k=96).packed)


def test_auto_is_itq_tail_up_to_its_largest_rank_then_hadamard_and_older_itq_files_still_load(
        x: np.ndarray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compose_choice, "NO_ROTATION_MAX_RANK", 0)  # before it, auto rotated every rank
    monkeypatch.setattr(compose_choice, "ITQ_MAX_RANK", 100)  # every rank of the 48-d fixture: an auto file holding a dense matrix at rank 48
    older = adaptemb.fit(x, "svd+binary", byte_budgets=[2])
    assert older.fit_report["rotation"] == "itq-tail"
    older_path = older.save(tmp_path / "older.safetensors")
    monkeypatch.setattr(compose_choice, "ITQ_MAX_RANK", 16)
    fitted = adaptemb.fit(x, "svd+binary", byte_budgets=[2])
    assert fitted.fit_report["rotation"] == "mixed" and fitted.fit_report["rotations"] == {16: "itq-tail", 48: "hadamard"}
    _, tensors = read_tensors(fitted.save(tmp_path / "now.safetensors"))
    assert "rank16.rotation" in tensors and "rank48.hadamard_signs" in tensors and "rank48.rotation" not in tensors
    loaded = adaptemb.load(older_path)  # rank 48 now defaults to Hadamard, but the file holds ITQ's matrix
    np.testing.assert_array_equal(loaded.encode(x, k=48).to_dense(), older.encode(x, k=48).to_dense())
    assert not np.array_equal(fitted.encode(x, k=48).to_dense(), older.encode(x, k=48).to_dense())


def test_damaged_hadamard_signs_are_refused_at_load(x: np.ndarray) -> None:
    fitted = adaptemb.fit(x, "svd+binary", byte_budgets=[2], rotation="hadamard")
    state = fitted.state_tensors()
    state["rank16.hadamard_signs"] = 2 * state["rank16.hadamard_signs"]
    with pytest.raises(adaptemb.CorruptFileError, match=r"\+1 or -1"):
        type(fitted).from_saved(fitted.file_metadata(), state)
    state = fitted.state_tensors()
    del state["rank16.center"]
    with pytest.raises(adaptemb.CorruptFileError, match="rank-16"):
        type(fitted).from_saved(fitted.file_metadata(), state)


def test_float_queries_are_rotated_without_centring_and_score_against_signs(x: np.ndarray) -> None:
    fitted = adaptemb.fit(x, "svd+binary", byte_budgets=[2], bits_per_dim=1, rotation="itq")
    docs, queries = fitted.encode(x[:50], k=16), fitted.encode_queries(x[50:55], k=16)
    assert docs.kind == "binary" and docs.dim == 16 and queries.kind == "dense" and fitted.query_kind == "dense"
    svd = adaptemb.fit(x, "svd")
    rotation = fitted.state_tensors()["rank16.rotation"].numpy()
    center = fitted.state_tensors()["rank16.center"].numpy()
    y_docs, y_queries = svd.encode(x[:50], k=16).to_dense(), svd.encode(x[50:55], k=16).to_dense()
    np.testing.assert_allclose(queries.values, y_queries @ rotation, atol=1e-5)
    signs = np.where((y_docs - center) @ rotation > fitted.state_tensors()["rank16.quantizer.threshold"].numpy(), 1, -1)
    np.testing.assert_allclose(fitted.score(queries, docs), queries.values @ signs.T, atol=1e-4)
    assert fitted.index(docs).backend == "faiss-pq-signs"
    hamming = adaptemb.fit(x, "svd+binary", byte_budgets=[2], float_queries=False)
    assert hamming.symmetric and hamming.encode_queries(x[:3], k=16).kind == "binary"
    assert hamming.index(hamming.encode(x, k=16)).backend == "faiss-binary"


def test_the_float_binary_index_is_the_inner_product_with_the_signs() -> None:
    docs = adaptemb.BinaryCodes.from_signs(np.array([[1, -1, 1], [-1, -1, -1], [1, 1, 1]], dtype=np.float32))
    query = adaptemb.DenseCodes(np.array([[0.5, -2.0, 1.0]], dtype=np.float32))
    scores, ids = FloatBinaryIndex(docs).search(query, 3)
    np.testing.assert_allclose(scores, [[3.5, 0.5, -0.5]], atol=1e-6)  # ±1 · (0.5, -2, 1), by hand
    np.testing.assert_array_equal(ids, [[0, 1, 2]])
