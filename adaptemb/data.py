"""Reading embedding matrices from files: .npy, .npz, .safetensors and .parquet."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from adaptemb.errors import CorruptFileError

SUPPORTED_SUFFIXES = (".npy", ".npz", ".safetensors", ".parquet")


def load_embeddings(path: str | Path, key: str | None = None) -> np.ndarray:
    """Read one embedding matrix from a file.

    ``key`` names the array in an ``.npz``/``.safetensors`` file or the vector column of a
    ``.parquet`` file; it may be omitted when the file holds exactly one candidate. The array is
    returned as stored (validation happens where it is used).
    """
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"no such file: {source}")
    suffix = source.suffix.lower()
    readers = {".npy": _read_npy, ".npz": _read_npz, ".safetensors": _read_safetensors, ".parquet": _read_parquet}
    if suffix not in readers:
        raise ValueError(f"cannot read {source.name}: supported file types are {', '.join(SUPPORTED_SUFFIXES)}")
    if suffix == ".npy" and key is not None:
        raise ValueError(f"{source.name} holds a single array; do not pass a key")
    try:
        return readers[suffix](source, key)
    except (CorruptFileError, KeyError, FileNotFoundError):
        raise
    except Exception as err:  # noqa: BLE001 - each reader's failure becomes one clear message
        raise CorruptFileError(f"could not read {source}: {err}") from None


def _pick(source: Path, names: list[str], key: str | None, what: str) -> str:
    if key is not None:
        if key not in names:
            raise KeyError(f"{source.name} has no {what} {key!r}; it has: {', '.join(names) or 'none'}")
        return key
    if len(names) != 1:
        raise ValueError(
            f"{source.name} holds {len(names)} {what}s ({', '.join(names) or 'none'}); name one with key=..."
        )
    return names[0]


def _read_npy(source: Path, key: str | None) -> np.ndarray:
    return np.load(source, allow_pickle=False)


def _read_npz(source: Path, key: str | None) -> np.ndarray:
    with np.load(source, allow_pickle=False) as archive:
        return archive[_pick(source, list(archive.files), key, "array")]


def _read_safetensors(source: Path, key: str | None) -> np.ndarray:
    import torch
    from safetensors import safe_open

    with safe_open(str(source), framework="pt") as handle:
        name = _pick(source, list(handle.keys()), key, "tensor")
        tensor = handle.get_tensor(name)
    # numpy has no bfloat16: widen it to float32, which is exact
    return tensor.float().numpy() if tensor.dtype == torch.bfloat16 else tensor.numpy()


def _read_parquet(source: Path, key: str | None) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    vector_columns = [
        field.name for field in table.schema
        if pa.types.is_list(field.type) or pa.types.is_fixed_size_list(field.type) or pa.types.is_large_list(field.type)
    ]
    column = table.column(_pick(source, vector_columns, key, "vector column"))
    lengths = set(column.combine_chunks().value_lengths().to_numpy(zero_copy_only=False).tolist())
    if len(lengths) > 1:
        raise ValueError(f"{source.name}: vectors in column have different lengths {sorted(lengths)[:5]}")
    flat = column.combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return flat.reshape(len(column), lengths.pop() if lengths else 0)
