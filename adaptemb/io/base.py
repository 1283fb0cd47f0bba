"""What every reader is: a ``RowSource`` (rows by range, in batches, or all at once), and the reader of
fixed-size rows stored back to back at a byte offset that ``.npy``, ``.npz``, ``.safetensors`` and the
``*vecs`` formats share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from adaptemb.errors import CorruptFileError


class NameNeededError(ValueError):
    """A file holds several arrays (or vector columns) and no ``key`` picked one: the caller's choice to make,
    not a damaged file."""


class RowSource:
    """One input file read by rows without loading the rest of it.

    ``shape`` and ``dtype`` describe the rows as returned (bfloat16 files report float32, their exact
    widening); ``len(source)`` is the number of rows; ``rows(start, stop)`` reads a range,
    ``batches(start, stop, batch_rows)`` a range in order a batch at a time, ``read_all()`` every row.
    Integer dtypes are returned as stored: checking them is the caller's job.
    """

    path: Path
    shape: tuple[int, ...]
    dtype: np.dtype

    def __len__(self) -> int:
        return int(self.shape[0]) if self.shape else 1

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, shape={self.shape}, dtype={self.dtype})"

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` (clipped to the file) as an in-memory array."""
        start, stop = self._clipped(start, stop)
        with self._reading(start, stop):
            return self._read(start, stop)

    def batches(self, start: int, stop: int, batch_rows: int) -> Iterator[np.ndarray]:
        """Rows ``start:stop`` in order, ``batch_rows`` at a time (the last batch may be smaller), reading the
        file once."""
        if batch_rows < 1:
            raise ValueError(f"batch_rows must be >= 1; got {batch_rows}")
        start, stop = self._clipped(start, stop)
        for first in range(start, stop, batch_rows):
            yield self.rows(first, min(first + batch_rows, stop))

    def read_all(self) -> np.ndarray:
        """Every row, as one array of ``shape``."""
        return self.rows(0, len(self))

    def _read(self, start: int, stop: int) -> np.ndarray:
        raise NotImplementedError

    def _clipped(self, start: int, stop: int) -> tuple[int, int]:
        if not self.shape:
            raise ValueError(f"{self.path.name} holds a 0-d array, which has no rows; use read_all()")
        start = min(max(int(start), 0), len(self))
        return start, min(max(int(stop), start), len(self))

    @contextmanager
    def _reading(self, start: int, stop: int) -> Iterator[None]:
        """Turns a failure while reading rows into one ``CorruptFileError`` naming the file and the rows."""
        try:
            yield
        except (CorruptFileError, FileNotFoundError, MemoryError):
            raise
        except Exception as err:  # noqa: BLE001 - decoding, OS and format errors all mean a damaged file
            raise CorruptFileError(f"could not read rows {start}..{stop - 1} of {self.path}: {err}") from None


class FixedRows(RowSource):
    """Rows of ``stored`` items laid back to back from byte ``offset`` of ``path``, read with plain reads at
    the rows' offset (a memory map would keep every page read resident). ``shape`` is the stored layout;
    ``convert(rows, start)`` turns the stored rows into the returned ones (bfloat16 widening, the ``*vecs``
    dimension column), of ``dtype`` and ``row_shape`` when those differ from the stored ones."""

    def __init__(self, path: Path, offset: int, stored: np.dtype, shape: tuple[int, ...], *,
                 dtype: np.dtype | None = None, row_shape: tuple[int, ...] | None = None, limit: int | None = None,
                 convert: Callable[[np.ndarray, int], np.ndarray] | None = None) -> None:
        self.path, self._offset, self._stored = path, offset, stored
        self._layout = tuple(int(s) for s in shape)
        self.shape = self._layout if row_shape is None else (self._layout[0], *row_shape)
        self.dtype = np.dtype(dtype if dtype is not None else stored)
        self._convert = convert
        self._row_items = int(np.prod(self._layout[1:], dtype=np.int64))
        self._row_bytes = self._row_items * stored.itemsize
        needed = offset + (self._layout[0] if self._layout else 1) * self._row_bytes
        available = path.stat().st_size if limit is None else min(limit, path.stat().st_size)
        if needed > available:
            raise CorruptFileError(
                f"could not read {path}: it ends early ({available:,} bytes where the header promises {needed:,}); "
                "the file is truncated or damaged"
            )

    def _read(self, start: int, stop: int) -> np.ndarray:
        count = (stop - start) * self._row_items
        if count == 0:
            rows = np.empty((0, *self._layout[1:]), dtype=self._stored)
        else:
            rows = np.fromfile(self.path, dtype=self._stored, count=count, offset=self._offset + start * self._row_bytes)
            if rows.size != count:
                raise CorruptFileError(f"could not read {self.path}: it ends early (rows {start}..{stop - 1})")
            rows = rows.reshape(stop - start, *self._layout[1:])
        return self._convert(rows, start) if self._convert is not None else rows

    def read_all(self) -> np.ndarray:
        if self.shape:
            return super().read_all()
        with self._reading(0, 1):
            value = np.fromfile(self.path, dtype=self._stored, count=1, offset=self._offset).reshape(())
            return self._convert(value, 0) if self._convert is not None else value


def pick_name(source: Path, names: list[str], key: str | None, what: str) -> str:
    """``key`` when ``names`` has it, else the only name; errors name the file and list what it holds."""
    if key is not None:
        if key not in names:
            raise KeyError(f"{source.name} has no {what} {key!r}; it has: {', '.join(names) or 'none'}")
        return key
    if len(names) != 1:
        raise NameNeededError(
            f"{source.name} holds {len(names)} {what}s ({', '.join(names) or 'none'}); name one with key=..."
        )
    return names[0]


def joined(parts: list[np.ndarray], empty_shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``parts`` end to end (no copy for one part), or an empty array of ``empty_shape``."""
    if not parts:
        return np.empty(empty_shape, dtype=dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)
