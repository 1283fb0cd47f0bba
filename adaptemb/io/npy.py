"""``.npy`` files (and the ``.npy`` members an ``.npz`` archive stores uncompressed): the header, then the
rows at their offset."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import numpy as np

from adaptemb.errors import CorruptFileError
from adaptemb.io.base import FixedRows, RowSource


def npy_header(handle: BinaryIO, source: Path) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, Fortran order, dtype) of the ``.npy`` header at ``handle``'s position, which is left at the data.
    Object arrays are refused: reading them would unpickle."""
    version = np.lib.format.read_magic(handle)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read_header(handle)
    if dtype.hasobject:
        raise CorruptFileError(f"could not read {source}: it holds object arrays, which adaptemb never loads (no pickle)")
    return tuple(shape), bool(fortran), dtype


def npy_rows(path: Path, start: int = 0, limit: int | None = None) -> RowSource:
    """The array of the ``.npy`` data starting at byte ``start`` of ``path`` (0: a whole ``.npy`` file), whose
    bytes end at ``limit``."""
    with open(path, "rb") as handle:
        handle.seek(start)
        shape, fortran, dtype = npy_header(handle, path)
        offset = handle.tell()
    if fortran and len(shape) > 1:
        return FortranRows(path, offset, dtype, shape, limit)
    return FixedRows(path, offset, dtype, shape, limit=limit)


class FortranRows(RowSource):
    """A column-major (Fortran-order) ``.npy`` array: its rows are not contiguous, so each read slices a memory
    map of the file and copies the rows out in C order (the map is dropped after each read)."""

    def __init__(self, path: Path, offset: int, dtype: np.dtype, shape: tuple[int, ...], limit: int | None) -> None:
        self.path, self.shape, self.dtype, self._offset = path, shape, dtype, offset
        needed = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        available = path.stat().st_size if limit is None else min(limit, path.stat().st_size)
        if needed > available:
            raise CorruptFileError(f"could not read {path}: it ends early ({available:,} bytes where the header "
                                   f"promises {needed:,}); the file is truncated or damaged")

    def _read(self, start: int, stop: int) -> np.ndarray:
        if stop == start or 0 in self.shape:
            return np.empty((stop - start, *self.shape[1:]), dtype=self.dtype)
        mapped = np.memmap(self.path, dtype=self.dtype, mode="r", offset=self._offset, shape=self.shape, order="F")
        try:
            return np.ascontiguousarray(mapped[start:stop])
        finally:
            del mapped
