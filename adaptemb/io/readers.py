"""Picking the reader of a file by its suffix: ``open_rows`` (one array, read by rows) and ``read_arrays``
(every named array of an ``.npz`` / ``.safetensors`` file)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from adaptemb.errors import CorruptFileError
from adaptemb.io.base import NameNeededError, RowSource
from adaptemb.io.npy import npy_rows
from adaptemb.io.npz import npz_arrays, npz_rows
from adaptemb.io.parquet import ParquetRows
from adaptemb.io.safetensors import safetensors_arrays, safetensors_rows
from adaptemb.io.vecs import vecs_rows

SUPPORTED_SUFFIXES = (".npy", ".npz", ".safetensors", ".parquet", ".fvecs", ".bvecs", ".ivecs")
"""The file types ``open_rows`` reads, in the order error messages list them."""
SINGLE_ARRAY_SUFFIXES = (".npy", ".fvecs", ".bvecs", ".ivecs")
"""File types that hold one array, so take no ``key``."""

_READERS: dict[str, Callable[[Path, str | None], RowSource]] = {
    ".npy": lambda path, _key: npy_rows(path),
    ".npz": npz_rows,
    ".safetensors": safetensors_rows,
    ".parquet": ParquetRows,
    ".fvecs": lambda path, _key: vecs_rows(path),
    ".bvecs": lambda path, _key: vecs_rows(path),
    ".ivecs": lambda path, _key: vecs_rows(path),
}


def open_rows(path: str | Path, key: str | None = None) -> RowSource:
    """The reader of one embedding file, chosen by its suffix (see ``SUPPORTED_SUFFIXES``).

    ``key`` names the array of an ``.npz`` / ``.safetensors`` file or the vector column of a ``.parquet`` file;
    it may be omitted when the file holds exactly one. Errors: ``FileNotFoundError`` (no such file),
    ``IsADirectoryError`` (a folder), ``ValueError`` (an unsupported suffix, a key for a one-array file,
    several arrays and no key), ``KeyError`` (no such key; lists what the file holds), ``CorruptFileError``
    (naming the file).
    """
    source = _existing_file(path)
    suffix = source.suffix.lower()
    if suffix not in _READERS:
        raise ValueError(f"cannot read {source.name}: supported file types are {', '.join(SUPPORTED_SUFFIXES)}")
    if suffix in SINGLE_ARRAY_SUFFIXES and key is not None:
        raise ValueError(f"{source.name} holds a single array; do not pass a key")
    return _guarded(source, lambda: _READERS[suffix](source, key))


def read_arrays(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Every array of an ``.npz`` or ``.safetensors`` file by name (bfloat16 widened to float32, others as
    stored), and the safetensors string metadata (``{}`` for ``.npz``)."""
    source = _existing_file(path)
    suffix = source.suffix.lower()
    if suffix == ".npz":
        return _guarded(source, lambda: (npz_arrays(source), {}))
    if suffix == ".safetensors":
        return _guarded(source, lambda: safetensors_arrays(source))
    raise ValueError(f"cannot read the named arrays of {source.name}: only .npz and .safetensors files hold them")


def _existing_file(path: str | Path) -> Path:
    source = Path(path)
    if source.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(source))
    if not source.is_file():
        raise FileNotFoundError(f"no such file: {source}")
    return source


def _guarded(source: Path, read: Callable[[], object]) -> object:
    """``read()``, with any failure but the caller's own (a missing key, no key among several arrays) turned
    into one ``CorruptFileError`` naming the file."""
    try:
        return read()
    except (CorruptFileError, KeyError, FileNotFoundError, NameNeededError, MemoryError):
        raise
    except Exception as err:  # noqa: BLE001 - every reader's failure becomes one clear message
        raise CorruptFileError(f"could not read {source}: {err}") from None
