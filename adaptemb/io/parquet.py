"""``.parquet`` files: one list column (list, large_list or fixed_size_list of numbers) holds the vectors;
rows are decoded a batch at a time, each row group read once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from adaptemb.errors import CorruptFileError
from adaptemb.io.base import RowSource, joined, pick_name

PARQUET_BATCH = 8_192
"""Rows per decoded parquet batch."""


class ParquetRows(RowSource):
    """The vector column ``key`` of a parquet file (or its only list column)."""

    def __init__(self, path: Path, key: str | None) -> None:
        import pyarrow.parquet as pq

        self.path = path
        self._file = pq.ParquetFile(path, buffer_size=1 << 22, pre_buffer=False)  # stream pages, not whole chunks
        schema = self._file.schema_arrow
        self.column = pick_name(path, vector_columns(schema), key, "vector column")
        value_type = schema.field(self.column).type.value_type
        self.dtype = np.dtype(value_type.to_pandas_dtype())
        metadata = self._file.metadata
        sizes = [metadata.row_group(i).num_rows for i in range(self._file.num_row_groups)]
        self._starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
        self.shape = (int(self._starts[-1]), self._width(schema))

    def _width(self, schema: Any) -> int:
        import pyarrow as pa

        kind = schema.field(self.column).type
        if pa.types.is_fixed_size_list(kind):
            return int(kind.list_size)
        first = next(self._file.iter_batches(batch_size=1, columns=[self.column]), None)
        if first is None or first.num_rows == 0:
            return 0
        return int(first.column(0).value_lengths()[0].as_py() or 0)

    def _pieces(self, start: int, stop: int) -> Iterator[np.ndarray]:
        """Rows start:stop in decoded batches, each row group read once."""
        import pyarrow as pa

        starts = self._starts
        groups = [i for i in range(len(starts) - 1) if starts[i] < stop and starts[i + 1] > start]
        row = int(starts[groups[0]]) if groups else start
        for batch in self._file.iter_batches(batch_size=PARQUET_BATCH, row_groups=groups, columns=[self.column]):
            lo, hi = max(start - row, 0), min(stop - row, batch.num_rows)
            if hi > lo:
                yield list_column_rows(batch.column(0).slice(lo, hi - lo), self.path, self.shape[1])
            row += batch.num_rows
            if row >= stop:
                break
        pa.default_memory_pool().release_unused()  # give the decoded pages back

    def _read(self, start: int, stop: int) -> np.ndarray:
        return joined(list(self._pieces(start, stop)), (0, self.shape[1]), self.dtype)

    def batches(self, start: int, stop: int, batch_rows: int) -> Iterator[np.ndarray]:
        if batch_rows < 1:
            raise ValueError(f"batch_rows must be >= 1; got {batch_rows}")
        start, stop = self._clipped(start, stop)
        pending: list[np.ndarray] = []
        count = 0
        with self._reading(start, stop):
            for piece in self._pieces(start, stop):
                pending.append(piece)
                count += len(piece)
                while count >= batch_rows:
                    rows = joined(pending, (0, self.shape[1]), self.dtype)
                    yield rows[:batch_rows]
                    pending, count = [rows[batch_rows:]], count - batch_rows
        if count:
            yield joined(pending, (0, self.shape[1]), self.dtype)

    def read_all(self) -> np.ndarray:
        import pyarrow.parquet as pq

        with self._reading(0, len(self)):
            column = pq.read_table(self.path, columns=[self.column]).column(0).combine_chunks()
            return list_column_rows(column, self.path, self.shape[1])


def vector_columns(schema: Any) -> list[str]:
    """The names of a parquet / arrow schema's list columns (the ones that can hold vectors)."""
    import pyarrow as pa

    return [field.name for field in schema
            if pa.types.is_list(field.type) or pa.types.is_fixed_size_list(field.type) or pa.types.is_large_list(field.type)]


def list_column_rows(column: Any, source: Path, width: int | None = None) -> np.ndarray:
    """An arrow list array of equal-length vectors as a writable (n, d) array; ``CorruptFileError`` when a
    vector is missing or the lengths differ (from each other, or from ``width``)."""
    if column.null_count:
        raise CorruptFileError(f"could not read {source}: its vector column has {column.null_count} missing vectors (nulls)")
    lengths = set(column.value_lengths().to_numpy(zero_copy_only=False).tolist())
    if width is not None and len(column):
        lengths.add(width)
    if len(lengths) > 1:
        raise CorruptFileError(f"{source.name}: vectors in column have different lengths {sorted(lengths)[:5]}")
    flat = column.flatten().to_numpy(zero_copy_only=False)
    rows = flat.reshape(len(column), lengths.pop() if lengths else (width or 0))
    return rows if rows.flags.writeable else rows.copy()  # arrow's buffers are read-only; torch wants writable memory
