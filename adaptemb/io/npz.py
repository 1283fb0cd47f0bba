"""``.npz`` archives: a member stored uncompressed (``np.savez``) is read at its offset like an ``.npy`` file;
a compressed one (``np.savez_compressed``) is decompressed whole on first use."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import numpy as np

from adaptemb.errors import CorruptFileError
from adaptemb.io.base import RowSource, pick_name
from adaptemb.io.npy import npy_header, npy_rows

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # a zip member's local file header, before its name and extra field


def npz_rows(path: Path, key: str | None) -> RowSource:
    """The array ``key`` of the archive (or its only array)."""
    with _archive(path) as archive:
        members = _members(archive)
        return _member_rows(path, archive, members[pick_name(path, list(members), key, "array")])


def npz_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of the archive, by name."""
    with _archive(path) as archive:
        return {name: _member_rows(path, archive, info).read_all() for name, info in _members(archive).items()}


def _archive(path: Path) -> zipfile.ZipFile:
    if not zipfile.is_zipfile(path):
        raise CorruptFileError(f"could not read {path}: not a readable .npz file (not a zip archive)")
    return zipfile.ZipFile(path)


def _members(archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """The archive's arrays by name (``np.savez`` names a member ``NAME.npy``)."""
    return {info.filename[: -len(".npy")]: info for info in archive.infolist() if info.filename.endswith(".npy")}


def _member_rows(path: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> RowSource:
    if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 0x1:  # stored, not encrypted
        start = _data_offset(path, info)
        return npy_rows(path, start, limit=start + info.file_size)
    with archive.open(info) as member:
        npy_header(member, path)  # refuses object arrays before anything is read
    with archive.open(info) as member:
        return LoadedRows(path, np.lib.format.read_array(member, allow_pickle=False))


def _data_offset(path: Path, info: zipfile.ZipInfo) -> int:
    """Where the bytes of a stored member begin: after its local header, name and extra field."""
    with open(path, "rb") as handle:
        handle.seek(info.header_offset)
        fields = _LOCAL_HEADER.unpack(handle.read(_LOCAL_HEADER.size))
    if fields[0] != b"PK\x03\x04":
        raise CorruptFileError(f"could not read {path}: member {info.filename!r} has no valid zip header")
    return info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]


class LoadedRows(RowSource):
    """An array already in memory (a compressed archive member), read by rows like a file."""

    def __init__(self, path: Path, array: np.ndarray) -> None:
        self.path, self._array, self.shape, self.dtype = path, array, tuple(array.shape), array.dtype

    def _read(self, start: int, stop: int) -> np.ndarray:
        return np.ascontiguousarray(self._array[start:stop])

    def read_all(self) -> np.ndarray:
        return self._array
