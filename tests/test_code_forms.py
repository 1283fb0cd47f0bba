"""The forms each code kind owns besides its arrays: the columns of a streamed shard, the rows of a vector
database, and scoring a block of documents at a time; checked on values worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import adaptemb
from adaptemb.codes import SCORE_BLOCK_ROWS, RowColumn, blockwise_scores, decoded_inner_products

RAGGED = np.array([[0, 1.5, 0, 0], [0, 0, 0, 0], [2.0, 0, 3.0, -1.0]], dtype=np.float32)
INT8 = adaptemb.QuantizedCodes(np.array([[-128, 0, 127], [5, -5, 1]], np.int8), np.array([0.5, 1.0, 2.0], np.float32),
                      np.array([1.0, 0.0, -1.0], np.float32))


def every_kind() -> dict[str, adaptemb.Codes]:
    return {
        "dense": adaptemb.DenseCodes(np.array([[1.0, -2.0], [0.5, 4.0]], np.float32)),
        "binary": adaptemb.BinaryCodes.from_signs(np.array([[1.0, -1.0, 2.0], [-1.0, -1.0, 1.0]], np.float32)),
        "int8": INT8,
        "sparse fixed-k": adaptemb.SparseCodes(np.array([[1, 3], [0, 2]]), np.array([[2.0, 1.0], [1.0, 4.0]], np.float32), 4),
        "sparse ragged": adaptemb.SparseCodes.from_csr(sp.csr_matrix(RAGGED)),
        "binary_sparse": adaptemb.BinarySparseCodes.from_mask(RAGGED != 0),
        "projected": adaptemb.ProjectedQueries(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), np.array([0.5, -0.5], np.float32)),
    }


@pytest.mark.parametrize("name", list(every_kind()))
def test_row_columns_round_trip_every_kind(name: str) -> None:
    codes = every_kind()[name]
    columns = codes.row_columns()
    assert set(columns) == set(codes.to_arrays()) - set(codes.shared_arrays)
    shared = {key: codes.to_arrays()[key] for key in codes.shared_arrays}
    back = type(codes).from_row_columns(columns, shared, codes.dim)
    np.testing.assert_array_equal(back.to_dense(), codes.to_dense())
    for key, array in codes.to_arrays().items():
        np.testing.assert_array_equal(back.to_arrays()[key], array)


def test_ragged_arrays_become_variable_length_columns() -> None:
    columns = adaptemb.SparseCodes.from_csr(sp.csr_matrix(RAGGED)).row_columns()
    np.testing.assert_array_equal(columns["indices"].offsets, [0, 1, 1, 4])  # counts 1, 0, 3
    np.testing.assert_array_equal(columns["values"].values, [1.5, 2.0, 3.0, -1.0])
    assert columns["counts"].offsets is None and columns["counts"].values.tolist() == [1, 0, 3]


def test_an_array_neither_per_row_nor_shared_is_refused_naming_the_kind() -> None:
    class Odd(adaptemb.DenseCodes):  # no ``kind`` of its own in the class: it does not register
        def to_arrays(self) -> dict[str, np.ndarray]:
            return {"values": self.values, "table": np.zeros(7, np.float32)}

    odd = Odd(np.ones((2, 3), np.float32))
    odd.kind = "odd"
    with pytest.raises(adaptemb.UnsupportedExportError, match="odd codes array 'table' of shape \\(7,\\) is neither"):
        odd.row_columns()
    assert RowColumn(np.ones(2)).offsets is None


@pytest.mark.parametrize("name", [n for n in every_kind() if n != "projected"])
def test_vector_rows_score_as_the_kind_does(name: str) -> None:
    codes = every_kind()[name]
    rows = codes.vector_rows()
    assert sp.issparse(rows) == (codes.vector_form == "sparse") and rows.dtype == np.float32
    dense = rows.toarray() if sp.issparse(rows) else rows
    np.testing.assert_allclose(dense @ dense.T, codes.similarity(codes), rtol=1e-6)


def test_vector_rows_by_hand() -> None:
    kinds = every_kind()
    np.testing.assert_array_equal(kinds["binary"].vector_rows(), [[1, -1, 1], [-1, -1, 1]])
    np.testing.assert_array_equal(INT8.vector_rows(), [[1 - 64, 0, -1 + 254], [3.5, -5, 1]])  # offset + scale * code
    compact = INT8.compact_vector_rows()
    assert compact.dtype == np.uint8 == np.dtype(INT8.compact_vector_dtype)
    np.testing.assert_array_equal(compact, [[0, 128, 255], [133, 123, 129]])  # code + 128
    np.testing.assert_array_equal(kinds["binary_sparse"].vector_rows().toarray(), RAGGED != 0)
    np.testing.assert_array_equal(kinds["dense"].compact_vector_rows(), [[1.0, -2.0], [0.5, 4.0]])  # float32 already


def test_a_kind_without_a_vector_form_says_so() -> None:
    projected = every_kind()["projected"]
    assert projected.vector_form == ""
    with pytest.raises(adaptemb.UnsupportedExportError, match="'projected' codes have no vector-database form"):
        projected.vector_rows()


def test_blockwise_scores_cover_every_block_exactly() -> None:
    rng = np.random.default_rng(0)
    n = 2 * SCORE_BLOCK_ROWS + 5  # two full blocks and a short one
    docs = adaptemb.DenseCodes(rng.integers(-3, 4, (n, 4)).astype(np.float32))  # small integers: every product exact
    queries = rng.integers(-3, 4, (3, 4)).astype(np.float32)
    seen: list[int] = []

    def score_block(block: adaptemb.Codes) -> np.ndarray:
        seen.append(len(block))
        return queries @ block.to_dense().T

    np.testing.assert_array_equal(blockwise_scores(docs, 3, score_block), queries @ docs.values.T)
    assert seen == [SCORE_BLOCK_ROWS, SCORE_BLOCK_ROWS, 5]
    np.testing.assert_array_equal(decoded_inner_products(queries, docs), queries @ docs.values.T)


def test_binary_hamming_over_several_blocks_by_popcount() -> None:
    rng = np.random.default_rng(1)
    docs = adaptemb.BinaryCodes(rng.integers(0, 256, (SCORE_BLOCK_ROWS + 3, 2), dtype=np.uint8), 13)
    queries = docs[[0, SCORE_BLOCK_ROWS + 2]]
    bits_q, bits_d = queries.bits().astype(int), docs.bits().astype(int)
    hamming = (bits_q[:, None, :] != bits_d[None, :, :]).sum(2)
    np.testing.assert_array_equal(queries.similarity(docs), 13 - 2 * hamming)


ONNX_KINDS = ["dense", "binary", "int8", "sparse fixed-k", "binary_sparse"]


@pytest.mark.parametrize("name", ONNX_KINDS)
def test_onnx_outputs_read_back_as_the_same_codes(name: str) -> None:
    """What an exported encoder emits for codes of a kind (``onnx_arrays``) reads back as those codes."""
    codes = every_kind()[name]
    outputs = codes.onnx_arrays(tuple(codes.to_arrays()))
    back = codes.from_onnx_arrays(outputs)
    assert type(back) is type(codes) and back.dim == codes.dim
    np.testing.assert_array_equal(back.to_dense(), codes.to_dense())


def test_packed_sparse_onnx_outputs_read_back_with_their_layout() -> None:
    codes = adaptemb.PackedSparseCodes.from_sparse(np.array([[1, 3], [0, 2]]), np.array([[2.0, 1.0], [1.0, 4.0]],
                                                                                     np.float32), 4, 16)
    back = codes.from_onnx_arrays(codes.onnx_arrays(("packed",)))
    np.testing.assert_array_equal(back.to_dense(), codes.to_dense())


def test_the_forms_a_kind_declares_for_graphs_parity_and_stores() -> None:
    """By hand: int8 dequantises in a graph and for parity's cosine; binary sparse bits are its active features;
    binary rows are sign bits a store may keep; projected queries search a store in their own form."""
    import torch

    kinds = every_kind()
    values = INT8.onnx_values()
    assert values is not None and kinds["dense"].onnx_values() is not None and kinds["binary"].onnx_values() is None
    got = values({"codes": torch.from_numpy(INT8.codes)}).numpy()
    np.testing.assert_allclose(got, INT8.to_dense())
    np.testing.assert_allclose(INT8.parity_vectors("codes", INT8.codes), INT8.to_dense())
    np.testing.assert_array_equal(INT8.parity_vectors("other", INT8.codes), INT8.codes.astype(np.float64))
    assert kinds["binary_sparse"].parity_set_bits and not kinds["binary"].parity_set_bits
    assert kinds["binary"].vector_quantization == "sign_bits" and INT8.vector_quantization == "int8_scalar"
    np.testing.assert_array_equal(kinds["binary"].sign_bits(), kinds["binary"].packed)
    np.testing.assert_array_equal(adaptemb.codes.unpack_signs(kinds["binary"].sign_bits(), 3), [[1, -1, 1], [-1, -1, 1]])
    with pytest.raises(adaptemb.UnsupportedExportError, match="not sign bits"):
        INT8.sign_bits()
    assert kinds["sparse fixed-k"].sparse_vectors and not kinds["dense"].sparse_vectors
    assert kinds["dense"].store_query("Qdrant") is None
    rows, offsets = kinds["projected"].store_query("Qdrant")
    np.testing.assert_array_equal(rows.toarray(), [[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(offsets, [0.5, -0.5])
