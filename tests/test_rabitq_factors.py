"""rabitq's per-vector factors held as float16 (``factor_dtype``): bytes held, faiss' layout restored for every
score, agreement with float32 factors, block-by-block search, and files written before the option.

The files under tests/data/rabitq_float32_factors were written by adaptemb at commit e7f4a7b (before
``factor_dtype``): a rabitq compressor fitted on the default dataset's rows 0..299 with codes of rows 300..319 at
1 and 2 bits, and an svd+rabitq fitted on those rows' first 32 values (renormalised) with ``byte_budgets=[10, 12]``
and codes at 12 B.
"""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import pytest

import adaptemb
from adaptemb.datasets import load_dataset
from adaptemb.errors import InvalidConfigError
from adaptemb_plugins import faiss_codes, rabitq

BEFORE = Path(__file__).parent / "data" / "rabitq_float32_factors"
DOCS, QUERIES = 2000, 200


@pytest.fixture(scope="module")
def corpus() -> np.ndarray:
    return np.ascontiguousarray(load_dataset("default", progress=False).corpus, dtype=np.float32)


@pytest.fixture(scope="module")
def real(corpus: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    queries = np.ascontiguousarray(load_dataset("default", progress=False).queries[:QUERIES], dtype=np.float32)
    return corpus[:DOCS], queries


def _top10(model: adaptemb.Compressor, codes: adaptemb.Codes, queries: np.ndarray) -> np.ndarray:
    return model.index(codes, device="cpu").search(queries, 10)[1]


@pytest.mark.parametrize(("bits", "held", "faiss_size"), [(1, 52, 56), (2, 106, 116), (4, 202, 212)])
def test_float16_factors_take_half_the_factor_bytes(real: tuple[np.ndarray, np.ndarray], bits: int, held: int,
                                                    faiss_size: int) -> None:
    """384-d: sign bits (48 B), extra bits, and 2 factors (1 bit) or 5 (2..4 bits) at 2 B instead of 4 B."""
    docs, _ = real
    model = adaptemb.fit(docs[:500], "rabitq", k=bits)
    assert model.config.factor_dtype == "float16"
    codes = model.encode(docs[:50])
    assert codes.bytes_per_vector == held == codes.codes.shape[1] and codes.factor_dtype == "float16"
    assert faiss.IndexRaBitQ(docs.shape[1], faiss.METRIC_INNER_PRODUCT, bits).sa_code_size() == faiss_size
    wide = adaptemb.fit(docs[:500], "rabitq", k=bits, factor_dtype="float32").encode(docs[:50])
    assert wide.bytes_per_vector == faiss_size and "rabitq_factor_bits" not in wide.tables


@pytest.mark.parametrize("bits", [1, 3])
def test_held_codes_widen_to_faiss_codes_with_rounded_factors(real: tuple[np.ndarray, np.ndarray], bits: int) -> None:
    """Widening gives back faiss' own code byte for byte, except that each factor is its float16 rounding."""
    docs, _ = real
    model = adaptemb.fit(docs[:500], "rabitq", k=bits)
    codes = model.encode(docs[:100])
    faiss_rows = model.faiss_index(bits).sa_encode(docs[:100])
    widened = codes.faiss_codes()
    layout = codes.layout(codes.tables, codes.dim, model.faiss_index(bits))
    factor_bytes = np.zeros(faiss_rows.shape[1], bool)
    for offset, count in layout.factor_runs:
        factor_bytes[offset : offset + 4 * count] = True
        want = np.ascontiguousarray(faiss_rows[:, offset : offset + 4 * count]).view(np.float32)
        got = np.ascontiguousarray(widened[:, offset : offset + 4 * count]).view(np.float32)
        np.testing.assert_array_equal(got, want.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(widened[:, ~factor_bytes], faiss_rows[:, ~factor_bytes])


def test_float16_factors_round_trip_through_files(real: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    docs, queries = real
    model = adaptemb.fit(docs[:500], "rabitq", k=2)
    codes = model.encode(docs[:300])
    loaded_model = adaptemb.load(model.save(tmp_path / "m.safetensors"))
    assert loaded_model.config.factor_dtype == "float16"
    np.testing.assert_array_equal(loaded_model.encode(docs[:300]).codes, codes.codes)
    loaded = adaptemb.load_codes(adaptemb.save_codes(codes, tmp_path / "codes.npz"))
    assert loaded.bytes_per_vector == 106
    np.testing.assert_array_equal(_top10(model, loaded, queries), _top10(model, codes, queries))
    np.testing.assert_array_equal(model.decode(loaded), model.decode(codes))


@pytest.mark.parametrize("bits", [1, 2])
def test_float16_factors_rank_like_float32(real: tuple[np.ndarray, np.ndarray], bits: int) -> None:
    """Same fit, factors as float16 or float32: measured top-10 agreement (position by position) 0.991 (1 bit)
    and 0.992 (2 bits) on all 8,000 rows and 1,500 queries; on these 2,000 rows and 200 queries the floor is
    0.97. Every score moves by less than 1e-3."""
    docs, queries = real
    half = adaptemb.fit(docs, "rabitq", k=bits)
    full = adaptemb.fit(docs, "rabitq", k=bits, factor_dtype="float32")
    half_codes, full_codes = half.encode(docs), full.encode(docs)
    assert (_top10(half, half_codes, queries) == _top10(full, full_codes, queries)).mean() >= 0.97
    half_scores = half.score(half.encode_queries(queries[:50]), half_codes)
    full_scores = full.score(full.encode_queries(queries[:50]), full_codes)
    assert 0 < np.abs(half_scores - full_scores).max() < 1e-3


@pytest.mark.parametrize("bits", [1, 2])
def test_search_in_blocks_equals_one_search(real: tuple[np.ndarray, np.ndarray], monkeypatch: pytest.MonkeyPatch,
                                            bits: int) -> None:
    """Codes held narrower than faiss' are widened a block at a time: the same top-10, scores and decode."""
    docs, queries = real
    model = adaptemb.fit(docs, "rabitq", k=bits)
    codes = model.encode(docs)
    whole = model.index(codes, device="cpu").search(queries, 10)
    scores, decoded = model.score(model.encode_queries(queries), codes), model.decode(codes)
    monkeypatch.setattr(faiss_codes, "SEARCH_BLOCK_ROWS", 300)
    assert len(codes.row_blocks()) == 7
    blocks = model.index(codes, device="cpu").search(queries, 10)
    np.testing.assert_array_equal(blocks[1], whole[1])
    np.testing.assert_array_equal(blocks[0], whole[0])
    np.testing.assert_array_equal(model.score(model.encode_queries(queries), codes), scores)
    np.testing.assert_array_equal(model.decode(codes), decoded)


def test_factors_beyond_float16_are_refused(real: tuple[np.ndarray, np.ndarray]) -> None:
    docs, _ = real
    scaled = 1000 * docs[:300]  # ||x - c||^2 ~ 1e6
    with pytest.raises(ValueError, match="beyond float16's range .* factor_dtype='float32'"):
        adaptemb.fit(scaled, "rabitq").encode(scaled)
    assert adaptemb.fit(scaled, "rabitq", factor_dtype="float32").encode(scaled).bytes_per_vector == 56
    with pytest.raises(InvalidConfigError, match="factor_dtype"):
        adaptemb.fit(docs[:300], "rabitq", factor_dtype="bfloat16")


def test_codes_of_both_factor_dtypes_do_not_mix(real: tuple[np.ndarray, np.ndarray]) -> None:
    docs, _ = real
    half = adaptemb.fit(docs[:300], "rabitq")
    full = adaptemb.fit(docs[:300], "rabitq", factor_dtype="float32")
    with pytest.raises(ValueError, match="different fits"):
        type(half.encode(docs[:5])).concat([half.encode(docs[:5]), full.encode(docs[:5])])


# -- files written before factor_dtype ------------------------------------------------------------------


def test_a_compressor_file_from_before_keeps_float32_factors(corpus: np.ndarray) -> None:
    model = adaptemb.load(BEFORE / "rabitq.safetensors")
    assert model.config.factor_dtype == "float32"
    rows = corpus[300:320]
    for k, nbytes in ((1, 56), (2, 116)):
        before = adaptemb.load_codes(BEFORE / f"rabitq_k{k}_codes.npz")
        assert before.bytes_per_vector == nbytes and before.factor_dtype == "float32"
        _assert_same_bits_close_factors(model, k, model.encode(rows, k=k), before)
        scores = model.score(model.encode_queries(rows), before)
        ids = model.index(before, device="cpu").search(rows, 5)[1]
        np.testing.assert_array_equal(ids[:, 0], np.arange(20))  # each row finds itself first
        np.testing.assert_array_equal(np.take_along_axis(scores, ids, axis=1),
                                      model.index(before, device="cpu").search(rows, 5)[0])


def _assert_same_bits_close_factors(model: adaptemb.Compressor, bits: int, codes: adaptemb.Codes,
                                    before: adaptemb.Codes) -> None:
    """The bits of every code equal the file's; each float32 factor agrees to float rounding (faiss computes the
    factors with the build's own SIMD sums, which differ from build to build and CPU to CPU in the last bits)."""
    layout = rabitq.FactorLayout.of(codes.dim, bits, codes.codes.shape[1])
    factor_bytes = np.zeros(codes.codes.shape[1], bool)
    for offset, count in layout.factor_runs:
        factor_bytes[offset : offset + 4 * count] = True
        got = np.ascontiguousarray(codes.codes[:, offset : offset + 4 * count]).view(np.float32)
        want = np.ascontiguousarray(before.codes[:, offset : offset + 4 * count]).view(np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert factor_bytes.any()
    np.testing.assert_array_equal(codes.codes[:, ~factor_bytes], before.codes[:, ~factor_bytes])


def test_a_composition_file_from_before_keeps_its_ranks_and_codes(corpus: np.ndarray) -> None:
    model = adaptemb.load(BEFORE / "svd_rabitq.safetensors")
    assert model.config.quantizer.factor_dtype == "float32"
    rows = np.ascontiguousarray(corpus[300:320, :32])
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    before = adaptemb.load_codes(BEFORE / "svd_rabitq_codes.npz")
    codes = model.encode(rows, bytes=12)
    assert codes.dim == before.dim == 32 and codes.bytes_per_vector == 12
    np.testing.assert_array_equal(codes.codes, before.codes)
    assert model.encode(rows, bytes=10).dim == 16
    # a new fit of the same composition holds float16 factors: 4 B more of sign bits at the same bytes
    again = adaptemb.fit(np.ascontiguousarray(corpus[:300, :32]), "svd+rabitq", byte_budgets=[8])
    assert again.encode(rows, bytes=8).dim == 32


def test_a_config_saved_without_factor_dtype_means_float32() -> None:
    """JSON configs are saved ones (compressor files, pickled compositions); a missing key there is the old
    float32 layout, while a config made in Python without it gets the default."""
    config = adaptemb.get_compressor("rabitq").Config
    assert config.model_validate_json('{"k": 2}').factor_dtype == "float32"
    assert config.model_validate_json('{"factor_dtype": "float16"}').factor_dtype == "float16"
    assert config(k=2).factor_dtype == config.model_validate({"k": 2}).factor_dtype == "float16"
