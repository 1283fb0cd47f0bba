"""Packed sparse codes: bit layout checked by hand, quantisation, exact storage, the codes file and its refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import adaptemb
from adaptemb import CorruptFileError, PackedSparseCodes
from adaptemb.codes.packed_sparse import (
    ELIAS_FANO_LAYOUT,
    SparsePacker,
    float16_bits,
    index_bits,
    low_bits_of,
    max_k_within,
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
    fixed = [row_bytes(k, 1536, bits, low_bits=None) for k, bits in ((8, 2), (8, 3), (32, 16))]
    assert fixed == [13, 14, 108]  # k * (11 + bits) bits


def test_elias_fano_rows_are_sized_by_hand() -> None:
    """k = 8 over 1536: 7 low bits (8 * 7), a bitmap of 8 ones and 1536 >> 7 = 12 zeros: 76 index bits, not 88.
    k = 32: 5 low bits, 32 + 48 bitmap bits: 240, not 352. The coding is used only where it saves a whole byte."""
    assert low_bits_of(8, 1536, 2) == 7 and row_bytes(8, 1536, 2) == 12  # (76 + 16) / 8 -> 12, fixed 13
    assert low_bits_of(32, 1536, 16) == 5 and row_bytes(32, 1536, 16) == 94  # (240 + 512) / 8
    assert low_bits_of(2, 5, 1) is None and row_bytes(2, 5, 1) == 1  # (2 + 2 + 2) + 2 bits: no byte saved
    for dim, bits in ((1536, 1), (3072, 2), (300, 16)):
        for nbytes in (1, 8, 10, 16, 32, 64):
            k = max_k_within(nbytes, dim, bits)
            assert row_bytes(k + 1, dim, bits) > nbytes and (k == 0 or row_bytes(k, dim, bits) <= nbytes)
    assert [max_k_within(16, 1536, 1), max_k_within(16, 3072, 2)] == [13, 10]  # fixed width: 10 and 9


def test_elias_fano_bit_layout_by_hand() -> None:
    """dim 20, 2 low bits: slots 13, 2 and an empty one (7 with value 0 -> 20) sort to 2, 13, 20; low parts 10 01 00;
    high parts 0, 3, 5 -> ones at 0, 3 + 1, 5 + 2 of a 3 + 20 >> 2 = 8-bit bitmap: 10001001; levels (following
    their slots) 0, 1, 0: 100100 10001001 010 -> 10010010 00100101 0."""
    book = np.tile(np.array([[0.5, 1.0]], np.float16), (20, 1))
    packer = SparsePacker(20, 1, book, low_bits=2)
    packed = packer(torch.tensor([[13, 2, 7]]), torch.tensor([[0.9, 0.6, 0.0]])).numpy()
    assert packed.tolist() == [[0b10010010, 0b00100101, 0]]
    codes = PackedSparseCodes(packed, 20, 3, 1, book, low_bits=2)
    indices, levels = codes.slots()
    assert indices.tolist() == [[2, 13, 20]] and levels.tolist() == [[0, 1, 0]]
    np.testing.assert_array_equal(np.flatnonzero(codes.to_dense()[0]), [2, 13])
    with pytest.raises(ValueError, match="Elias-Fano index bitmap holds 2 entries, not k=3"):
        PackedSparseCodes(packed & np.array([[255, 0b11111011, 255]], np.uint8), 20, 3, 1, book, low_bits=2).slots()
    with pytest.raises(ValueError, match=r"uint8 \(n, 3\) for k=3, dim=20, value_bits=1, Elias-Fano \(2 low bits\)"):
        PackedSparseCodes(packed[:, :2], 20, 3, 1, book, low_bits=2)
    with pytest.raises(ValueError, match="low bits must lie in 1..5"):
        PackedSparseCodes(packed, 20, 3, 1, book, low_bits=6)


@pytest.mark.parametrize(("dim", "k", "bits"), [(1536, 13, 1), (3072, 26, 2), (64, 8, 3), (300, 5, 16), (3072, 64, 4)])
def test_elias_fano_codes_hold_what_fixed_width_codes_hold(dim: int, k: int, bits: int) -> None:
    """The same slots packed both ways (empty slots included): the same dense rows, counts and similarities, in
    fewer bytes; slices, concatenation and the codes file keep the coding."""
    rng = np.random.default_rng(dim + k)
    book = None if bits == 16 else PackedSparseCodes.storable_codebook(synthetic_codebook(rng, dim, bits), bits)
    indices = np.stack([rng.choice(dim, k, replace=False) for _ in range(200)])
    values = rng.uniform(0.05, 2.0, (200, k)).astype(np.float32)
    values[3], values[5, 2] = 0.0, 0.0
    coded = PackedSparseCodes.from_sparse(indices, values, dim, bits, book)
    with torch.no_grad():
        fixed = PackedSparseCodes(SparsePacker(dim, bits, book)(torch.from_numpy(indices), torch.from_numpy(values))
                                  .numpy(), dim, k, bits, book, low_bits=None)
    assert coded.low_bits == low_bits_of(k, dim, bits) is not None
    assert coded.bytes_per_vector == row_bytes(k, dim, bits) < fixed.bytes_per_vector
    np.testing.assert_array_equal(coded.to_dense(), fixed.to_dense())
    np.testing.assert_array_equal(coded.active_counts(), fixed.active_counts())
    np.testing.assert_array_equal(coded[::3].to_dense(), fixed[::3].to_dense())
    joined = PackedSparseCodes.concat([coded[100:], coded[:100]])
    np.testing.assert_array_equal(joined.packed, np.concatenate([coded.packed[100:], coded.packed[:100]]))
    with pytest.raises(ValueError, match="index coding"):
        PackedSparseCodes.concat([coded, fixed])
    arrays = coded.to_arrays()
    assert arrays["layout"].tolist() == [ELIAS_FANO_LAYOUT, k, bits, coded.low_bits]
    again = PackedSparseCodes.from_arrays(arrays, dim)
    np.testing.assert_array_equal(again.packed, coded.packed)
    assert again.low_bits == coded.low_bits


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
    np.testing.assert_array_equal(codes.codebook, PackedSparseCodes.storable_codebook(codebook, bits))
    got = np.take_along_axis(codes.to_dense(), indices, axis=1)
    entries = codes.codebook[indices].astype(np.float32)  # (30, k, levels): the stored codebook quantises
    distance = np.abs(entries - values[..., None])
    assert np.all(np.abs(got - values) <= distance.min(axis=2) + 1e-6)


def test_float16_values_are_kept_exactly() -> None:
    rng = np.random.default_rng(1)
    indices = np.stack([rng.choice(1536, 8, replace=False) for _ in range(20)])
    values = rng.uniform(0.1, 2.0, (20, 8)).astype(np.float32)
    codes = PackedSparseCodes.from_sparse(indices, values, 1536, 16)
    assert codes.bytes_per_vector == 26  # 8 * 16 value bits and 76 Elias-Fano index bits (fixed: 8 * 11)
    np.testing.assert_array_equal(np.take_along_axis(codes.to_dense(), indices, axis=1),
                                  values.astype(np.float16).astype(np.float32))


def test_storage_accounting_slicing_and_concat() -> None:
    codes = small_codes()
    assert codes.nbytes == sum(a.nbytes for a in codes.to_arrays().values())
    assert codes.row_nbytes == 3 and codes.shared_nbytes == CODEBOOK.nbytes + 12  # 1 bit: (low, high) only
    both = PackedSparseCodes.concat([codes[[2]], codes[:2]])
    np.testing.assert_array_equal(both.to_dense(), codes.to_dense()[[2, 0, 1]])
    other = PackedSparseCodes.from_sparse(np.array([[0, 1]]), np.array([[1.0, 1.0]], np.float32), 5, 16)
    with pytest.raises(ValueError, match="same dim"):
        PackedSparseCodes.concat([codes, other])


def test_similarity_is_the_dequantised_dot_product() -> None:
    codes = small_codes()
    dense = codes.to_dense()
    np.testing.assert_allclose(codes.similarity(codes), dense @ dense.T, rtol=1e-6)


@pytest.mark.slow
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
    assert codes.bytes_per_vector == 12
    assert 0 <= sizes[21000] - sizes[1000] - 20000 * 12 <= 64  # a further row costs its width (+ a longer npy shape)
    assert sizes[1000] - 1000 * 12 <= 11 * 1024  # the header: codebook (1536 x (2 x 2 + 2) B = 9 KiB), layout, npz


def synthetic_codebook(rng: np.random.Generator, dim: int, bits: int) -> np.ndarray:
    """Ascending per-feature levels of a few scales, as csr's k-means (1-4 bits) or range (8 bits) makes them."""
    low = rng.uniform(0.001, 0.3, (dim, 1)) * 10.0 ** rng.integers(-2, 2, (dim, 1))
    high = low + rng.uniform(0.01, 2.0, (dim, 1))
    steps = np.linspace(0, 1, 2**bits) if bits == 8 else np.sort(rng.uniform(0, 1, (dim, 2**bits)), axis=1)
    return low + (high - low) * steps


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 8, 16])
def test_a_file_at_dim_3072_takes_at_most_n_times_width_plus_64_kib(tmp_path, bits: int) -> None:
    """Issue 26's bar at h = 4 x 768: the stored codebook (float16 range + uint8 inner positions) fits the 64 KiB,
    which the whole float16 codebook (96 KiB at 4 bits, 1.5 MiB at 8 bits) did not; reloaded codes are the same."""
    rng = np.random.default_rng(bits)
    dim, k, n = 3072, 6, 50
    codebook = None if bits == 16 else synthetic_codebook(rng, dim, bits)
    indices = np.stack([rng.choice(dim, k, replace=False) for _ in range(n)])
    codes = PackedSparseCodes.from_sparse(indices, rng.uniform(0.0, 2.5, (n, k)).astype(np.float32), dim, bits, codebook)
    path = adaptemb.save_codes(codes, tmp_path / "codes.npz")
    assert path.stat().st_size <= n * codes.bytes_per_vector + 64 * 1024
    inner = {1: 0, 2: 2, 3: 6, 4: 14, 8: 0}
    layout = codes.to_arrays()["layout"].nbytes  # 4 int32 with Elias-Fano indices (1-3 bits here), else 3
    assert layout == (16 if bits <= 3 else 12)
    assert codes.shared_nbytes == layout + (0 if bits == 16 else dim * (4 + inner[bits]))  # 55,308 B at 4 bits
    loaded = adaptemb.load_codes(path)
    assert isinstance(loaded, PackedSparseCodes)
    np.testing.assert_array_equal(loaded.packed, codes.packed)
    np.testing.assert_array_equal(loaded.codebook.view(np.uint16), codes.codebook.view(np.uint16))
    np.testing.assert_array_equal(loaded.similarity(codes[:5]), codes.similarity(codes[:5]))
    empty = PackedSparseCodes.from_sparse(indices[:0], np.zeros((0, k), np.float32), dim, bits, codebook)
    assert adaptemb.save_codes(empty, tmp_path / "empty.npz").stat().st_size <= 64 * 1024  # the header alone
    assert len(adaptemb.load_codes(tmp_path / "empty.npz")) == 0


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_the_stored_codebook_is_near_the_given_one_and_rounds_once(bits: int) -> None:
    """Ends kept exactly, inner entries within half a 1/255 step of the range (plus float16 rounding), and
    rounding a stored codebook again changes no bit."""
    rng = np.random.default_rng(10 + bits)
    codebook = synthetic_codebook(rng, 500, bits).astype(np.float16)
    stored = PackedSparseCodes.storable_codebook(codebook, bits)
    assert stored.dtype == np.float16 and stored.shape == codebook.shape
    np.testing.assert_array_equal(stored[:, [0, -1]], codebook[:, [0, -1]])
    span = codebook[:, -1:].astype(np.float64) - codebook[:, :1]
    error = np.abs(stored.astype(np.float64) - codebook.astype(np.float64))
    assert np.all(error <= span / 510 + np.abs(codebook.astype(np.float64)) * 2.0**-10)
    np.testing.assert_array_equal(PackedSparseCodes.storable_codebook(stored, bits).view(np.uint16), stored.view(np.uint16))
    with pytest.raises(ValueError, match="ascend"):
        PackedSparseCodes.storable_codebook(codebook[:, ::-1], bits)


def test_a_version_1_file_still_loads_and_an_unstored_codebook_is_written_whole(tmp_path) -> None:
    """Today's file before the compact codebook: layout version 1 and the whole float16 codebook (built here by
    hand). It loads to the same codes, and saving them again keeps every codebook bit (as version 1)."""
    rng = np.random.default_rng(4)
    dim, k, bits = 300, 5, 3
    codebook = np.sort(rng.uniform(0.1, 2.0, (dim, 2**bits)), axis=1).astype(np.float16)  # not in stored form
    slots = np.stack([rng.choice(dim, k, replace=False) for _ in range(20)])
    levels = rng.integers(0, 2**bits, (20, k))
    packed = pack_fields([(torch.from_numpy(slots), index_bits(dim)), (torch.from_numpy(levels), bits)]).numpy()
    with np.load(adaptemb.save_codes(small_codes(), tmp_path / "today.npz")) as archive:
        header = {**json.loads(str(archive["__adaptemb__"])), "dim": dim, "n": 20}
    old = tmp_path / "version1.npz"
    np.savez(old, packed=packed, layout=np.array([1, k, bits], np.int32), codebook=codebook,
             __adaptemb__=np.array(json.dumps(header)))
    loaded = adaptemb.load_codes(old)
    assert isinstance(loaded, PackedSparseCodes)
    np.testing.assert_array_equal(loaded.codebook, codebook)
    want = np.zeros((20, dim), np.float32)
    np.put_along_axis(want, slots, np.take_along_axis(codebook[slots], levels[..., None], axis=2)[..., 0], axis=1)
    np.testing.assert_array_equal(loaded.to_dense(), want)
    assert loaded.to_arrays()["layout"][0] == 1 and loaded.shared_arrays == ("layout", "codebook")
    again = adaptemb.load_codes(adaptemb.save_codes(loaded, tmp_path / "again.npz"))
    np.testing.assert_array_equal(again.codebook.view(np.uint16), codebook.view(np.uint16))
    np.testing.assert_array_equal(again.packed, packed)


def test_a_damaged_stored_codebook_is_refused(tmp_path) -> None:
    rng = np.random.default_rng(5)
    codes = PackedSparseCodes.from_sparse(np.array([[0, 1], [2, 3]]), np.ones((2, 2), np.float32), 40, 2,
                                          synthetic_codebook(rng, 40, 2))
    path = adaptemb.save_codes(codes, tmp_path / "codes.npz")
    assert codes.shared_arrays == ("layout", "codebook_range", "codebook_steps")
    assert small_codes().shared_arrays == ("layout", "codebook_range")  # 1 bit: no inner entries
    short = _rewrite(path, tmp_path, codebook_steps=np.zeros((40, 1), np.uint8))
    with pytest.raises(CorruptFileError, match=r"codebook_steps of shape \(40, 2\)"):
        adaptemb.load_codes(short)
    swapped = _rewrite(path, tmp_path, codebook_range=codes.to_arrays()["codebook_range"][:, ::-1].copy())
    with pytest.raises(CorruptFileError, match="low <= high"):
        adaptemb.load_codes(swapped)


def _rewrite(path, tmp_path, **changes) -> object:
    with np.load(path) as archive:
        arrays = {key: archive[key] for key in archive.files}
    arrays.update(changes)
    target = tmp_path / "changed.npz"
    np.savez(target, **arrays)
    return target


def test_a_damaged_elias_fano_file_is_refused(tmp_path) -> None:
    rng = np.random.default_rng(6)
    indices = np.stack([rng.choice(1536, 13, replace=False) for _ in range(4)])
    codes = PackedSparseCodes.from_sparse(indices, np.ones((4, 13), np.float32), 1536, 1, synthetic_codebook(rng, 1536, 1))
    assert codes.low_bits == 6 and codes.bytes_per_vector == 16
    path = adaptemb.save_codes(codes, tmp_path / "codes.npz")
    loaded = adaptemb.load_codes(path)
    assert isinstance(loaded, PackedSparseCodes) and loaded.low_bits == 6
    np.testing.assert_array_equal(loaded.to_dense(), codes.to_dense())
    damaged = codes.packed.copy()
    damaged[2, 10] ^= 0b00010000  # bit 84: inside the bitmap (bits 78..114), one entry more or less
    with pytest.raises(CorruptFileError, match="row 2's Elias-Fano index bitmap holds 1[24] entries, not k=13"):
        adaptemb.load_codes(_rewrite(path, tmp_path, packed=damaged))


def test_foreign_and_newer_files_are_refused(tmp_path) -> None:
    path = adaptemb.save_codes(small_codes(), tmp_path / "codes.npz")
    newer = _rewrite(path, tmp_path, layout=np.array([ELIAS_FANO_LAYOUT + 1, 2, 1], np.int32))
    with pytest.raises(CorruptFileError, match=f"layout version {ELIAS_FANO_LAYOUT + 1}; this adaptemb reads versions 1, 2, 3"):
        adaptemb.load_codes(newer)
    short = _rewrite(path, tmp_path, layout=np.array([ELIAS_FANO_LAYOUT, 2, 1], np.int32))
    with pytest.raises(CorruptFileError, match="layout version 3 must be 4 integers"):
        adaptemb.load_codes(short)
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
    for bits, book, low_bits in ((3, codebook, None), (16, None, None), (3, codebook, 3)):
        packer = SparsePacker(50, bits, book, low_bits).eval()
        path = tmp_path / f"packer{bits}_{low_bits}.onnx"
        torch.onnx.export(packer, (indices, values), str(path), dynamo=True, input_names=["indices", "values"],
                          output_names=["packed"])
        got = ort.InferenceSession(str(path)).run(None, {"indices": indices.numpy(), "values": values.numpy()})[0]
        np.testing.assert_array_equal(got, packer(indices, values).numpy())


@pytest.mark.parametrize("bits", [2, pytest.param(16, marks=pytest.mark.slow)])
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
