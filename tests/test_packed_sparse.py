"""Packed sparse codes: bit layout checked by hand, quantisation, exact storage, the codes file and its refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import adaptemb
from adaptemb import CorruptFileError, PackedSparseCodes
from adaptemb.codes.packed_sparse import (
    SparsePacker,
    float16_bits,
    index_bits,
    pack_fields,
    row_bytes,
    unpack_fields,
)

CODEBOOK = np.array([[0.5, 1.0], [0.25, 2.0], [1.0, 3.0], [0.1, 0.2], [4.0, 8.0]], np.float16)  # dim 5, 1-bit


def small_codes() -> PackedSparseCodes:
    indices = np.array([[0, 2], [4, 1], [3, 0]])
    values = np.array([[0.9, 1.1], [7.0, 0.0], [0.12, 0.7]], np.float32)
    return PackedSparseCodes.from_sparse(indices, values, 5, 1, CODEBOOK)


def test_index_bits_leave_room_for_the_empty_slot() -> None:
    assert [index_bits(d) for d in (5, 1536, 2047, 2048, 3072)] == [3, 11, 11, 12, 12]
    assert row_bytes(8, 1536, 2) == 13 and row_bytes(8, 1536, 3) == 14 and row_bytes(32, 1536, 16) == 108


def test_bit_layout_by_hand() -> None:
    """dim 5: 3-bit indices then 1-bit levels. Row 0: indices 0, 2; 0.9 -> level 1 of (0.5, 1.0), 1.1 -> level 0
    of (1.0, 3.0): bits 000 010 1 0 -> 00001010 = 10. Row 1: 7.0 -> level 1 of (4, 8); 0.0 is an empty slot
    (index 5, level 0): 100 101 1 0 -> 10010110 = 150."""
    codes = small_codes()
    assert codes.packed.tolist() == [[10], [150], [0b01100000]]
    assert codes.bytes_per_vector == 1
    dense = codes.to_dense()
    want = np.zeros((3, 5), np.float32)
    want[0, [0, 2]] = [1.0, 1.0]
    want[1, 4] = 8.0
    want[2, [3, 0]] = [0.1, 0.5]
    np.testing.assert_allclose(dense, want, rtol=1e-3)
    np.testing.assert_array_equal(codes.active_counts(), [2, 1, 2])


def test_pack_fields_round_trips_any_widths() -> None:
    rng = np.random.default_rng(0)
    fields = [(rng.integers(0, 2**12, (50, 7)), 12), (rng.integers(0, 8, (50, 7)), 3), (rng.integers(0, 2**16, (50, 7)), 16)]
    packed = pack_fields([(torch.from_numpy(values), bits) for values, bits in fields]).numpy()
    assert packed.shape == (50, -(-7 * 31 // 8))
    for (want, _), got in zip(fields, unpack_fields(packed, [(7, 12), (7, 3), (7, 16)])):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 8])
def test_levels_are_the_nearest_codebook_entries(bits: int) -> None:
    rng = np.random.default_rng(bits)
    dim, k = 40, 6
    codebook = np.sort(rng.uniform(0.1, 3.0, (dim, 2**bits)), axis=1).astype(np.float16)
    indices = np.stack([rng.choice(dim, k, replace=False) for _ in range(30)])
    values = rng.uniform(0.05, 3.5, (30, k)).astype(np.float32)
    codes = PackedSparseCodes.from_sparse(indices, values, dim, bits, codebook)
    got = np.take_along_axis(codes.to_dense(), indices, axis=1)
    entries = codebook[indices].astype(np.float32)  # (30, k, levels)
    distance = np.abs(entries - values[..., None])
    assert np.all(np.abs(got - values) <= distance.min(axis=2) + 1e-6)


def test_float16_values_are_kept_exactly() -> None:
    rng = np.random.default_rng(1)
    indices = np.stack([rng.choice(1536, 8, replace=False) for _ in range(20)])
    values = rng.uniform(0.1, 2.0, (20, 8)).astype(np.float32)
    codes = PackedSparseCodes.from_sparse(indices, values, 1536, 16)
    assert codes.bytes_per_vector == 27  # 8 * (11 + 16) bits
    np.testing.assert_array_equal(np.take_along_axis(codes.to_dense(), indices, axis=1),
                                  values.astype(np.float16).astype(np.float32))


def test_storage_accounting_slicing_and_concat() -> None:
    codes = small_codes()
    assert codes.nbytes == sum(a.nbytes for a in codes.to_arrays().values())
    assert codes.row_nbytes == 3 and codes.shared_nbytes == CODEBOOK.nbytes + 12
    both = PackedSparseCodes.concat([codes[[2]], codes[:2]])
    np.testing.assert_array_equal(both.to_dense(), codes.to_dense()[[2, 0, 1]])
    other = PackedSparseCodes.from_sparse(np.array([[0, 1]]), np.array([[1.0, 1.0]], np.float32), 5, 16)
    with pytest.raises(ValueError, match="same dim"):
        PackedSparseCodes.concat([codes, other])


def test_similarity_is_the_dequantised_dot_product() -> None:
    codes = small_codes()
    dense = codes.to_dense()
    np.testing.assert_allclose(codes.similarity(codes), dense @ dense.T, rtol=1e-6)


def test_codes_file_takes_rows_times_width_plus_a_fixed_header(tmp_path) -> None:
    rng = np.random.default_rng(2)
    dim, k = 1536, 8
    codebook = np.sort(rng.uniform(0.1, 1.0, (dim, 4)), axis=1).astype(np.float16)
    sizes = {}
    for n in (1000, 21000):
        indices = np.stack([rng.choice(dim, k, replace=False) for _ in range(n)])
        codes = PackedSparseCodes.from_sparse(indices, rng.uniform(0.1, 1, (n, k)).astype(np.float32), dim, 2, codebook)
        path = adaptemb.save_codes(codes, tmp_path / f"codes{n}.npz")
        sizes[n] = path.stat().st_size
        loaded = adaptemb.load_codes(path)
        assert isinstance(loaded, PackedSparseCodes)
        np.testing.assert_array_equal(loaded.packed, codes.packed)
        np.testing.assert_array_equal(loaded.codebook, codes.codebook)
    assert codes.bytes_per_vector == 13
    assert 0 <= sizes[21000] - sizes[1000] - 20000 * 13 <= 64  # a further row costs its width (+ a longer npy shape)
    assert sizes[1000] - 1000 * 13 <= 16 * 1024  # the header: codebook (12 KiB), layout, npz framing


def _rewrite(path, tmp_path, **changes) -> object:
    with np.load(path) as archive:
        arrays = {key: archive[key] for key in archive.files}
    arrays.update(changes)
    target = tmp_path / "changed.npz"
    np.savez(target, **arrays)
    return target


def test_foreign_and_newer_files_are_refused(tmp_path) -> None:
    path = adaptemb.save_codes(small_codes(), tmp_path / "codes.npz")
    newer = _rewrite(path, tmp_path, layout=np.array([2, 2, 1], np.int32))
    with pytest.raises(CorruptFileError, match="layout version 2"):
        adaptemb.load_codes(newer)
    wide = _rewrite(path, tmp_path, packed=np.zeros((3, 2), np.uint8))
    with pytest.raises(CorruptFileError, match="uint8"):
        adaptemb.load_codes(wide)
    out_of_range = _rewrite(path, tmp_path, packed=np.full((3, 1), 255, np.uint8))  # index 7 > dim 5
    with pytest.raises(CorruptFileError, match="out of range"):
        adaptemb.load_codes(out_of_range)
    with np.load(path) as archive:
        header = json.loads(str(archive["__adaptemb__"]))
    assert header["kind"] == "packed_sparse" and header["n"] == 3


def test_bad_construction_is_refused() -> None:
    with pytest.raises(ValueError, match="value_bits"):
        PackedSparseCodes(np.zeros((1, 1), np.uint8), 5, 2, 5, CODEBOOK)
    with pytest.raises(ValueError, match="codebook"):
        PackedSparseCodes.from_sparse(np.array([[0, 1]]), np.ones((1, 2), np.float32), 5, 1)
    with pytest.raises(ValueError, match="0..4"):
        PackedSparseCodes.from_sparse(np.array([[0, 5]]), np.ones((1, 2), np.float32), 5, 1, CODEBOOK)


def test_float16_bits_match_numpy_bit_patterns() -> None:
    values = np.array([0.0, -0.0, 1.0, -2.5, 6e-8, 3e-5, 6.1e-5, 65504.0, 1e6, 0.1, 1 / 3], np.float32)
    want = np.clip(values, -65504, 65504).astype(np.float16).view(np.uint16).astype(np.int64)
    want[1] = 0  # -0.0 compares equal to 0: stored as +0
    np.testing.assert_array_equal(float16_bits(torch.from_numpy(values)).numpy(), want)


@pytest.mark.slow
def test_packer_exports_to_onnx_bit_identical(tmp_path) -> None:
    """The packer is the storage form inside exported encoders: onnxruntime gives the same bytes."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(3)
    codebook = np.sort(rng.uniform(0.1, 2.0, (50, 8)), axis=1).astype(np.float16)
    indices = torch.from_numpy(np.stack([rng.choice(50, 6, replace=False) for _ in range(40)]))
    values = torch.from_numpy(rng.uniform(0.0, 2.5, (40, 6)).astype(np.float32))
    values[::5] = 0.0
    for bits, book in ((3, codebook), (16, None)):
        packer = SparsePacker(50, bits, book).eval()
        path = tmp_path / f"packer{bits}.onnx"
        torch.onnx.export(packer, (indices, values), str(path), dynamo=True, input_names=["indices", "values"],
                          output_names=["packed"])
        got = ort.InferenceSession(str(path)).run(None, {"indices": indices.numpy(), "values": values.numpy()})[0]
        np.testing.assert_array_equal(got, packer(indices, values).numpy())


@pytest.mark.parametrize("bits", [2, 16])
def test_index_over_levels_returns_the_top_k_of_the_dequantised_scores(bits: int) -> None:
    """Projected queries against packed documents (empty slots included): the level kernel's top-10 is the top-10
    of ``ProjectedQueries.similarity``, scores included; packed queries (symmetric) too."""
    from adaptemb.index.packed import PackedSparseIndex
    from adaptemb.testing import assert_top_k_matches

    rng = np.random.default_rng(bits)
    dim, k, n = 300, 5, 2000
    codebook = np.sort(rng.uniform(0.1, 2.0, (dim, 2**bits)), axis=1).astype(np.float16) if bits != 16 else None
    indices = np.stack([rng.choice(dim, k, replace=False) for _ in range(n)])
    values = rng.uniform(0.0, 2.0, (n, k)).astype(np.float32)
    values[::7, 2:] = 0.0  # empty slots
    docs = PackedSparseCodes.from_sparse(indices, values, dim, bits, codebook)
    queries = adaptemb.ProjectedQueries(rng.standard_normal((70, dim)).astype(np.float32),
                                        rng.standard_normal(70).astype(np.float32))
    index = PackedSparseIndex(docs, query_kind="projected", threads=2)
    assert index.backend == "numba-levels"
    assert_top_k_matches(index.search(queries, 10), queries.similarity(docs), 10)
    symmetric = PackedSparseIndex(docs, query_kind="packed_sparse")
    assert_top_k_matches(symmetric.search(docs[:30], 10), docs[:30].similarity(docs), 10)
