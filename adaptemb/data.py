"""Reading embedding matrices from files: .npy, .npz, .safetensors and .parquet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def pick_name(source: Path, names: list[str], key: str | None, what: str) -> str:
    """``key`` when ``names`` has it, else the only name; errors name the file and list what it holds."""
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
        return archive[pick_name(source, list(archive.files), key, "array")]


def _read_safetensors(source: Path, key: str | None) -> np.ndarray:
    import torch
    from safetensors import safe_open

    with safe_open(str(source), framework="pt") as handle:
        name = pick_name(source, list(handle.keys()), key, "tensor")
        tensor = handle.get_tensor(name)
    # numpy has no bfloat16: widen it to float32, which is exact
    return tensor.float().numpy() if tensor.dtype == torch.bfloat16 else tensor.numpy()


def _read_parquet(source: Path, key: str | None) -> np.ndarray:
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    column = table.column(pick_name(source, vector_columns(table.schema), key, "vector column"))
    return list_column_rows(column.combine_chunks(), source)


def vector_columns(schema: Any) -> list[str]:
    """The names of a parquet / arrow schema's list columns (the ones that can hold vectors)."""
    import pyarrow as pa

    return [field.name for field in schema
            if pa.types.is_list(field.type) or pa.types.is_fixed_size_list(field.type) or pa.types.is_large_list(field.type)]


def list_column_rows(column: Any, source: Path) -> np.ndarray:
    """An arrow list array of equal-length vectors as an (n, d) array; ``CorruptFileError`` when lengths differ."""
    lengths = set(column.value_lengths().to_numpy(zero_copy_only=False).tolist())
    if len(lengths) > 1:
        raise CorruptFileError(f"{source.name}: vectors in column have different lengths {sorted(lengths)[:5]}")
    flat = column.flatten().to_numpy(zero_copy_only=False)
    return flat.reshape(len(column), lengths.pop() if lengths else 0)
