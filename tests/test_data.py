"""Reading embedding files, and the validation every entry point applies."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.numpy import save_file

import adaptemb

X = np.arange(12, dtype=np.float32).reshape(4, 3) / 10


def test_reads_every_supported_format(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", X)
    np.savez(tmp_path / "one.npz", emb=X)
    np.savez(tmp_path / "two.npz", corpus=X, queries=X[:2])
    save_file({"emb": X}, str(tmp_path / "x.safetensors"))
    table = pa.table({"id": [1, 2, 3, 4], "vector": pa.array(list(X), type=pa.list_(pa.float32()))})
    pq.write_table(table, tmp_path / "x.parquet")
    fixed = pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), 3)})
    pq.write_table(fixed, tmp_path / "fixed.parquet")

    for name, key in [("x.npy", None), ("one.npz", None), ("two.npz", "queries"), ("x.safetensors", None),
                      ("x.parquet", None), ("x.parquet", "vector"), ("fixed.parquet", None)]:
        got = adaptemb.load_embeddings(tmp_path / name, key=key)
        expected = X[:2] if key == "queries" else X
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_file_errors_say_what_is_valid(tmp_path: Path) -> None:
    np.savez(tmp_path / "two.npz", corpus=X, queries=X)
    with pytest.raises(ValueError, match="holds 2 arrays \\(corpus, queries\\); name one with key"):
        adaptemb.load_embeddings(tmp_path / "two.npz")
    with pytest.raises(KeyError, match="no array 'nope'; it has: corpus, queries"):
        adaptemb.load_embeddings(tmp_path / "two.npz", key="nope")
    (tmp_path / "x.csv").write_text("1,2")
    with pytest.raises(ValueError, match="supported file types are .npy, .npz, .safetensors, .parquet"):
        adaptemb.load_embeddings(tmp_path / "x.csv")
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    with pytest.raises(adaptemb.CorruptFileError, match="could not read"):
        adaptemb.load_embeddings(tmp_path / "bad.npy")
    with pytest.raises(FileNotFoundError):
        adaptemb.load_embeddings(tmp_path / "missing.npy")
    ragged = pa.table({"v": pa.array([[1.0, 2.0], [1.0]])})
    pq.write_table(ragged, tmp_path / "ragged.parquet")
    with pytest.raises(adaptemb.CorruptFileError, match="different lengths"):
        adaptemb.load_embeddings(tmp_path / "ragged.parquet")


def test_pickled_object_arrays_are_never_loaded(tmp_path: Path) -> None:
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(adaptemb.CorruptFileError, match="pickle"):
        adaptemb.load_embeddings(tmp_path / "obj.npy")


@pytest.mark.parametrize(
    "array",
    [X.astype(np.float16), X.astype(np.float64), torch.from_numpy(X), torch.from_numpy(X).to(torch.bfloat16)],
    ids=["float16", "float64", "torch", "bfloat16"],
)
def test_numpy_and_torch_floats_are_accepted(array: object) -> None:
    out = adaptemb.as_matrix(array)
    assert out.dtype == torch.float32 and out.shape == (4, 3)


def test_validation_messages() -> None:
    with pytest.raises(ValueError, match="for one vector use x\\[None, :\\]"):
        adaptemb.as_matrix(X[0])
    with pytest.raises(ValueError, match="NaN or infinite values in 1 of 4 rows \\(first at row 2\\)"):
        bad = X.copy()
        bad[2, 1] = np.inf
        adaptemb.as_matrix(bad)
    with pytest.raises(ValueError, match="has dimension 3, but this compressor was fitted on dimension 5"):
        adaptemb.as_matrix(X, dim=5)
    with pytest.raises(TypeError, match="got int32"):
        adaptemb.as_matrix(X.astype(np.int32))
    with pytest.raises(TypeError, match="got torch.int64"):
        adaptemb.as_matrix(torch.ones(2, 2, dtype=torch.int64))


def test_finite_values_whose_sum_overflows_are_accepted() -> None:
    """The fast finiteness check sums the rows; a sum past float32's range of finite values is no error."""
    big = np.full((4, 3), 3e38, dtype=np.float32)
    assert torch.equal(adaptemb.as_matrix(big), torch.from_numpy(big))
    big[1, 2], big[3, 0] = -np.inf, np.inf  # infinities that cancel in no sum: still found, with their rows
    with pytest.raises(ValueError, match="NaN or infinite values in 2 of 4 rows \\(first at row 1\\)"):
        adaptemb.as_matrix(big)
    nan = X.copy()
    nan[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite values in 1 of 4 rows \\(first at row 3\\)"):
        adaptemb.as_matrix(nan)
