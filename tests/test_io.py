"""adaptemb.io: one reader per file format, shared by load_embeddings, streaming encode, fitting from files and
datasets. Whatever loads also streams, with the same rows and dtype."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import save_file

import adaptemb
from adaptemb.datasets import load_dataset
from adaptemb.errors import CorruptFileError
from adaptemb.io import SUPPORTED_SUFFIXES, RowSource, open_rows, read_arrays

N, D = 203, 12
BASE = np.random.default_rng(0).standard_normal((N, D)).astype(np.float32)


def write_npy(path: Path, x: np.ndarray) -> None:
    np.save(path, x)


def write_npz(path: Path, x: np.ndarray) -> None:
    np.savez(path, emb=x, other=x[:3])  # stored uncompressed: members read at their offset


def write_npz_compressed(path: Path, x: np.ndarray) -> None:
    np.savez_compressed(path, emb=x)


def write_safetensors(path: Path, x: np.ndarray | torch.Tensor) -> None:
    tensor = x if isinstance(x, torch.Tensor) else torch.from_numpy(x)
    save_file({"emb": tensor, "ids": torch.arange(len(tensor))}, str(path))


def parquet_writer(kind: str) -> Callable[[Path, np.ndarray], None]:
    def write(path: Path, x: np.ndarray) -> None:
        value = pa.from_numpy_dtype(x.dtype)
        if kind == "fixed_size_list":
            column = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1), type=value), x.shape[1])
        else:
            column = pa.array(list(x), type=pa.list_(value) if kind == "list" else pa.large_list(value))
        pq.write_table(pa.table({"id": np.arange(len(x)), "emb": column}), path, row_group_size=50)

    return write


def write_vecs(path: Path, x: np.ndarray) -> None:
    rows = np.empty(len(x), dtype=[("dim", "<i4"), ("values", x.dtype.newbyteorder("<"), (x.shape[1],))])
    rows["dim"], rows["values"] = x.shape[1], x
    rows.tofile(path)


def values(dtype: str) -> np.ndarray | torch.Tensor:
    if dtype == "bfloat16":
        return torch.from_numpy(BASE).to(torch.bfloat16)
    if dtype in ("uint8", "int32"):
        return np.random.default_rng(1).integers(0, 255, (N, D)).astype(dtype)
    return BASE.astype(dtype)


CASES = [
    *[("x.npy", write_npy, dtype, None) for dtype in ("float16", "float32", "float64", "int32")],
    *[("x.npz", write_npz, dtype, "emb") for dtype in ("float16", "float32", "float64")],
    ("packed.npz", write_npz_compressed, "float32", None),
    *[("x.safetensors", write_safetensors, dtype, "emb") for dtype in ("float16", "bfloat16", "float32", "float64")],
    *[(f"{kind}.parquet", parquet_writer(kind), dtype, None)
      for kind in ("list", "large_list", "fixed_size_list") for dtype in ("float16", "float32", "float64")],
    ("x.fvecs", write_vecs, "float32", None),
    ("x.bvecs", write_vecs, "uint8", None),
    ("x.ivecs", write_vecs, "int32", None),
]


@pytest.mark.parametrize(("name", "write", "dtype", "key"), CASES,
                         ids=[f"{name}-{dtype}" for name, _, dtype, _ in CASES])
def test_every_format_loads_what_it_streams(name: str, write: Callable, dtype: str, key: str | None,
                                            tmp_path: Path) -> None:
    x = values(dtype)
    write(tmp_path / name, x)
    expected = x.float().numpy() if isinstance(x, torch.Tensor) else x  # bfloat16 widens exactly to float32
    loaded = adaptemb.load_embeddings(tmp_path / name, key=key)
    assert loaded.dtype == expected.dtype and loaded.shape == (N, D)
    np.testing.assert_array_equal(loaded, expected)

    source = open_rows(tmp_path / name, key)
    assert isinstance(source, RowSource) and (len(source), source.shape, source.dtype) == (N, (N, D), expected.dtype)
    batches = list(source.batches(0, N, 64))
    assert [len(b) for b in batches] == [64, 64, 64, 11]
    streamed = np.concatenate(batches)
    assert streamed.dtype == loaded.dtype
    np.testing.assert_array_equal(streamed, loaded)
    np.testing.assert_array_equal(source.rows(37, 140), loaded[37:140])
    np.testing.assert_array_equal(np.concatenate(list(source.batches(45, 160, 50))), loaded[45:160])
    assert source.rows(N - 2, N + 50).shape == (2, D) and source.rows(10, 10).shape == (0, D)


def test_fortran_order_npy_loads_and_streams(tmp_path: Path) -> None:
    np.save(tmp_path / "f.npy", np.asfortranarray(BASE))
    source = open_rows(tmp_path / "f.npy")
    np.testing.assert_array_equal(source.rows(5, 9), BASE[5:9])
    np.testing.assert_array_equal(adaptemb.load_embeddings(tmp_path / "f.npy"), BASE)


def test_read_arrays_gives_every_array_and_the_metadata(tmp_path: Path) -> None:
    save_file({"a": torch.from_numpy(BASE).to(torch.bfloat16), "b": torch.arange(3)}, str(tmp_path / "t.safetensors"),
              metadata={"note": "hi"})
    arrays, metadata = read_arrays(tmp_path / "t.safetensors")
    assert metadata == {"note": "hi"} and arrays["a"].dtype == np.float32 and arrays["b"].dtype == np.int64
    np.testing.assert_array_equal(arrays["a"], torch.from_numpy(BASE).to(torch.bfloat16).float().numpy())
    np.savez(tmp_path / "t.npz", a=BASE, label=np.array("text"))
    arrays, metadata = read_arrays(tmp_path / "t.npz")
    assert metadata == {} and str(arrays["label"]) == "text"
    np.testing.assert_array_equal(arrays["a"], BASE)


# -- refused files ----------------------------------------------------------------------------------


def test_vecs_files_must_be_whole_rows_of_one_dimension(tmp_path: Path) -> None:
    write_vecs(tmp_path / "x.fvecs", BASE)
    (tmp_path / "cut.fvecs").write_bytes((tmp_path / "x.fvecs").read_bytes()[:-3])
    with pytest.raises(CorruptFileError, match=r"cut\.fvecs: its size .* is not a multiple of its row size \(52 bytes"):
        open_rows(tmp_path / "cut.fvecs")
    raw = bytearray((tmp_path / "x.fvecs").read_bytes())
    raw[52 * 7 : 52 * 7 + 4] = np.int32(5).tobytes()  # row 7 claims another dimension
    (tmp_path / "mixed.fvecs").write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError, match=r"mixed\.fvecs: row 7 declares dimension 5, but the first row declares 12"):
        adaptemb.load_embeddings(tmp_path / "mixed.fvecs")
    (tmp_path / "zero.ivecs").write_bytes(np.zeros(4, np.int32).tobytes())
    with pytest.raises(CorruptFileError, match="declares dimension 0"):
        open_rows(tmp_path / "zero.ivecs")
    with pytest.raises(ValueError, match="holds a single array; do not pass a key"):
        open_rows(tmp_path / "x.fvecs", key="emb")


def test_errors_name_the_file_and_what_is_valid(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        open_rows(tmp_path / "missing.npy")
    with pytest.raises(IsADirectoryError, match=f"Is a directory: '{tmp_path}'"):
        open_rows(tmp_path)
    (tmp_path / "x.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match=", ".join(SUPPORTED_SUFFIXES).replace(".", r"\.")):
        open_rows(tmp_path / "x.csv")
    write_safetensors(tmp_path / "x.safetensors", BASE)
    with pytest.raises(KeyError, match="no tensor 'nope'; it has: emb, ids"):
        open_rows(tmp_path / "x.safetensors", key="nope")
    with pytest.raises(ValueError, match=r"holds 2 tensors \(emb, ids\); name one with key"):
        open_rows(tmp_path / "x.safetensors")
    whole = (tmp_path / "x.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(whole[:-100])
    with pytest.raises(CorruptFileError, match=r"cut\.safetensors: it ends early"):
        open_rows(tmp_path / "cut.safetensors", key="emb")
    (tmp_path / "junk.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(CorruptFileError, match="junk.safetensors: its safetensors header is not valid JSON"):
        open_rows(tmp_path / "junk.safetensors")
    np.save(tmp_path / "x.npy", BASE)
    (tmp_path / "cut.npy").write_bytes((tmp_path / "x.npy").read_bytes()[:-10])
    with pytest.raises(CorruptFileError, match=r"cut\.npy: it ends early"):
        open_rows(tmp_path / "cut.npy")
    np.savez(tmp_path / "obj.npz", emb=np.array([{"a": 1}], dtype=object))
    with pytest.raises(CorruptFileError, match="no pickle"):
        open_rows(tmp_path / "obj.npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(CorruptFileError, match="bad.npz: not a readable .npz"):
        open_rows(tmp_path / "bad.npz")
    pq.write_table(pa.table({"v": pa.array([[1.0, 2.0], None])}), tmp_path / "nulls.parquet")
    with pytest.raises(CorruptFileError, match="1 missing vectors"):
        adaptemb.load_embeddings(tmp_path / "nulls.parquet")


# -- the same rows everywhere -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bf16_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    x = BASE / np.linalg.norm(BASE, axis=1, keepdims=True)
    path = tmp_path_factory.mktemp("bf16") / "x.safetensors"
    save_file({"emb": torch.from_numpy(np.tile(x, (3, 1))).to(torch.bfloat16)}, str(path))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("method", ["svd", "csr"])
def test_a_bfloat16_file_streams_to_the_in_memory_codes(method: str, bf16_file: Path, tmp_path: Path) -> None:
    rows = adaptemb.load_embeddings(bf16_file)
    params = {"k": 8} if method == "svd" else {**adaptemb.get_registry().get("csr").test_params, "epochs": 1}
    compressor = adaptemb.fit(rows, method, **params)
    adaptemb.encode_files([bf16_file], compressor, tmp_path / "out", shard_rows=250, batch_rows=64, progress=False)
    got, expected = adaptemb.read_code_shards(tmp_path / "out").to_arrays(), compressor.encode(rows).to_arrays()
    assert got.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def test_fitting_from_a_bfloat16_file_sees_the_loaded_rows(bf16_file: Path) -> None:
    rows = adaptemb.load_embeddings(bf16_file)
    streamed, in_memory = adaptemb.fit(bf16_file, "svd", k=8), adaptemb.fit(rows, "svd", k=8)
    np.testing.assert_allclose(streamed.encode(rows).to_dense(), in_memory.encode(rows).to_dense(), atol=1e-5)


def test_datasets_read_through_the_same_readers(tmp_path: Path) -> None:
    write_vecs(tmp_path / "corpus.fvecs", BASE)
    dataset = load_dataset(tmp_path)  # a folder with a corpus only: held-out queries
    assert dataset.corpus.shape[1] == D and len(dataset.corpus) + len(dataset.queries) == N
    save_file({"corpus": torch.from_numpy(BASE).to(torch.bfloat16), "queries": torch.from_numpy(BASE[:5]).to(torch.bfloat16),
               "gold": torch.arange(5)}, str(tmp_path / "d.safetensors"))
    dataset = load_dataset(tmp_path / "d.safetensors")
    np.testing.assert_array_equal(dataset.queries, torch.from_numpy(BASE[:5]).to(torch.bfloat16).float().numpy())
