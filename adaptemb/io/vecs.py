"""The ANN-benchmark formats ``.fvecs`` (float32), ``.bvecs`` (uint8) and ``.ivecs`` (int32): each row is its
dimension as a little-endian int32, then that many values. Every row must declare the same dimension."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from adaptemb.errors import CorruptFileError
from adaptemb.io.base import FixedRows, RowSource

VECS_DTYPES = {".fvecs": np.dtype("<f4"), ".bvecs": np.dtype("u1"), ".ivecs": np.dtype("<i4")}


def vecs_rows(path: Path) -> RowSource:
    values = VECS_DTYPES[path.suffix.lower()]
    size = path.stat().st_size
    if size == 0:
        return FixedRows(path, 0, values, (0, 0))
    head = np.fromfile(path, dtype="<i4", count=1)
    dim = int(head[0]) if len(head) else -1
    if dim < 1:
        raise CorruptFileError(f"could not read {path}: its first row declares dimension {dim}; "
                               f"a {path.suffix} row is an int32 dimension >= 1, then the values")
    row_bytes = 4 + dim * values.itemsize
    if size % row_bytes:
        raise CorruptFileError(
            f"could not read {path}: its size ({size:,} bytes) is not a multiple of its row size ({row_bytes:,} bytes: "
            f"an int32 dimension, then {dim} {values.name} values); the file is truncated or not a {path.suffix} file"
        )
    stored = np.dtype([("dim", "<i4"), ("values", values, (dim,))])

    def values_of(rows: np.ndarray, start: int) -> np.ndarray:
        bad = np.flatnonzero(rows["dim"] != dim)
        if len(bad):
            row = start + int(bad[0])
            raise CorruptFileError(f"could not read {path}: row {row} declares dimension {int(rows['dim'][bad[0]])}, "
                                   f"but the first row declares {dim}; all rows must have one dimension")
        return np.ascontiguousarray(rows["values"])

    return FixedRows(path, 0, stored, (size // row_bytes,), dtype=values, row_shape=(dim,), convert=values_of)
