"""Every code type's scoring and storage, checked against values worked out by hand."""

import numpy as np
import pytest
import scipy.sparse as sp

from adaptemb import BinaryCodes, BinarySparseCodes, DenseCodes, QuantizedCodes, SparseCodes
from adaptemb.codes import index_dtype


def test_dense_similarity_is_dot_product_by_hand() -> None:
    a = DenseCodes(np.array([[1.0, 2.0], [0.0, -1.0]], dtype=np.float32))
    b = DenseCodes(np.array([[3.0, 4.0], [1.0, 0.0], [0.5, 0.5]], dtype=np.float32))
    # row 0: 1*3+2*4=11, 1*1+2*0=1, 0.5+1=1.5 ; row 1: -4, 0, -0.5
    np.testing.assert_allclose(a.similarity(b), [[11.0, 1.0, 1.5], [-4.0, 0.0, -0.5]])
    assert a.nbytes == a.row_nbytes == 2 * 2 * 4 and a.bytes_per_vector == 8.0


def test_sparse_fixed_k_similarity_and_bytes_by_hand() -> None:
    # row 0 = {1: 2.0, 3: 1.0}; row 1 = {0: 1.0, 3: 4.0} over dim 5
    a = SparseCodes(np.array([[1, 3], [0, 3]]), np.array([[2.0, 1.0], [1.0, 4.0]], dtype=np.float32), dim=5)
    # b row 0 = {3: 0.5, 4: 9.0}
    b = SparseCodes(np.array([[3, 4]]), np.array([[0.5, 9.0]], dtype=np.float32), dim=5)
    # only index 3 overlaps: 1.0*0.5=0.5 and 4.0*0.5=2.0
    np.testing.assert_allclose(a.similarity(b), [[0.5], [2.0]])
    assert a.indices.dtype == np.uint8  # dim 5 fits in one byte
    assert a.row_nbytes == 2 * 2 * 1 + 2 * 2 * 4  # indices + float32 values
    assert a.bytes_per_vector == 10.0
    np.testing.assert_allclose(a.to_dense(), [[0, 2, 0, 1, 0], [1, 0, 0, 4, 0]])


def test_sparse_ragged_counts_are_part_of_the_payload() -> None:
    matrix = sp.csr_matrix(np.array([[0, 1.5, 0], [0, 0, 0], [2.0, 0, 3.0]], dtype=np.float32))
    codes = SparseCodes.from_csr(matrix, np.float16)
    np.testing.assert_array_equal(codes.active_counts(), [1, 0, 2])
    # 3 indices (uint8) + 3 float16 values + 3 counts (uint8)
    assert codes.row_nbytes == 3 * 1 + 3 * 2 + 3 * 1
    np.testing.assert_allclose(codes.similarity(codes), [[2.25, 0, 0], [0, 0, 0], [0, 0, 13.0]])
    np.testing.assert_allclose(codes[[2, 0]].to_dense(), [[2.0, 0, 3.0], [0, 1.5, 0]])


def test_sparse_concat_keeps_fixed_layout() -> None:
    part = SparseCodes(np.array([[0, 1]]), np.array([[1.0, 1.0]], dtype=np.float32), dim=300)
    both = SparseCodes.concat([part, part])
    assert both.is_fixed_k and len(both) == 2 and both.indices.dtype == np.uint16


@pytest.mark.parametrize(("dim", "dtype"), [(1, np.uint8), (256, np.uint8), (257, np.uint16), (65536, np.uint16), (65537, np.uint32)])
def test_index_dtype_is_the_smallest_that_fits(dim: int, dtype: type) -> None:
    assert index_dtype(dim) == np.dtype(dtype)


def test_binary_similarity_is_plus_minus_one_dot_by_hand() -> None:
    x = np.array([[0.5, -1.0, 2.0, -0.1, 0.3], [-1.0, -1.0, -1.0, 1.0, 1.0]], dtype=np.float32)
    codes = BinaryCodes.from_signs(x)
    # signs: row0 = + - + - + ; row1 = - - - + +
    assert codes.packed.shape == (2, 1) and codes.bytes_per_vector == 1.0
    np.testing.assert_array_equal(codes.packed[:, 0], [0b10101000, 0b00011000])
    # row0 vs row1 agree at positions 1 and 4, disagree at 0, 2, 3: hamming 3, +-1 dot = 2 - 3 = -1
    np.testing.assert_array_equal(codes.hamming(codes), [[0, 3], [3, 0]])
    np.testing.assert_allclose(codes.similarity(codes), [[5, -1], [-1, 5]])
    np.testing.assert_allclose(codes.to_dense()[0], [1, -1, 1, -1, 1])


def test_binary_similarity_matches_popcount_on_random_bits() -> None:
    rng = np.random.default_rng(1)
    a = BinaryCodes.from_signs(rng.standard_normal((7, 77)))
    b = BinaryCodes.from_signs(rng.standard_normal((9, 77)))
    expected = np.bitwise_count(a.packed[:, None, :] ^ b.packed[None, :, :]).sum(-1)
    np.testing.assert_array_equal(a.hamming(b), expected)


def test_int8_similarity_is_dot_of_dequantised_vectors_by_hand() -> None:
    scale = np.array([0.5, 2.0], dtype=np.float32)
    offset = np.array([1.0, 0.0], dtype=np.float32)
    a = QuantizedCodes(np.array([[2, -1]], dtype=np.int8), scale, offset)  # -> [2.0, -2.0]
    b = QuantizedCodes(np.array([[0, 3], [-2, 0]], dtype=np.int8), scale, offset)  # -> [1, 6], [0, 0]
    np.testing.assert_allclose(a.to_dense(), [[2.0, -2.0]])
    np.testing.assert_allclose(a.similarity(b), [[2.0 - 12.0, 0.0]])
    assert a.row_nbytes == 2 and a.shared_nbytes == 16 and a.nbytes == 18 and a.bytes_per_vector == 2.0


def test_int8_refuses_codes_of_another_calibration() -> None:
    a = QuantizedCodes(np.zeros((1, 2), dtype=np.int8), np.ones(2, np.float32), np.zeros(2, np.float32))
    b = QuantizedCodes(np.zeros((1, 2), dtype=np.int8), np.full(2, 2.0, np.float32), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="different calibrations"):
        a.similarity(b)


def test_scoring_across_kinds_is_refused_with_a_reason() -> None:
    dense = DenseCodes(np.ones((1, 8), dtype=np.float32))
    binary = BinaryCodes.from_signs(np.ones((1, 8)))
    with pytest.raises(TypeError, match="same compressor"):
        dense.similarity(binary)


def test_codes_validate_their_arrays() -> None:
    with pytest.raises(ValueError, match="out of range"):
        SparseCodes(np.array([[5]]), np.array([[1.0]], dtype=np.float32), dim=5)
    with pytest.raises(ValueError, match="float16 or float32"):
        SparseCodes(np.array([[1]]), np.array([[1.0]]), dim=5)
    with pytest.raises(ValueError, match="uint8"):
        BinaryCodes(np.zeros((1, 2), dtype=np.uint8), dim=24)
    with pytest.raises(TypeError, match="slice or an array"):
        DenseCodes(np.ones((2, 2), dtype=np.float32))[0]


def test_binary_sparse_bitmap_round_trips() -> None:
    mask = np.random.default_rng(0).random((1000, 37)) < 0.6  # dense rows: the bitmap layout is smallest
    codes = BinarySparseCodes.from_mask(mask)
    assert codes.layout == "bitmap" and codes.bytes_per_vector == 5  # ceil(37 / 8)
    np.testing.assert_array_equal(codes.packed, np.packbits(mask, axis=1))
    back = BinarySparseCodes.from_arrays(codes.to_arrays(), 37)
    np.testing.assert_array_equal(back.to_dense() > 0, mask)


@pytest.mark.parametrize("layout", ["packed", "ragged", "bitmap"])
def test_binary_sparse_layouts_pack_and_unpack_a_block_at_a_time(layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same bytes and sets whether rows are (un)packed all at once or a few at a time."""
    from adaptemb.codes import binary_sparse

    rng = np.random.default_rng(5)
    mask = rng.random((301, 200)) < rng.uniform(0.0, 0.1, size=(301, 1))
    rows, cols = np.nonzero(mask)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=301))])
    whole = BinarySparseCodes(indptr, cols, 200, layout=layout)
    monkeypatch.setattr(binary_sparse, "BLOCK_BITS", 64)  # a few rows a block
    blocks = BinarySparseCodes(indptr, cols, 200, layout=layout)
    np.testing.assert_array_equal(blocks.packed, whole.packed)
    np.testing.assert_array_equal(blocks.to_dense() > 0, mask)
    np.testing.assert_array_equal(blocks.active_counts(), mask.sum(axis=1))
    np.testing.assert_array_equal(BinarySparseCodes.from_arrays(whole.to_arrays(), 200).to_dense() > 0, mask)
