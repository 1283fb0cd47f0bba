"""Rows of embeddings read from files or Python batches without holding them all: what streaming encode
reads (``row_batches`` over :class:`adaptemb.io.RowSource` readers) and what ``Compressor.fit`` trains on
when given files or batches instead of an array (``RowStream``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from adaptemb.io import RowSource, list_column_rows, open_rows, pick_name, vector_columns
from adaptemb.serialization import existing_file
from adaptemb.validation import all_zero_error, as_matrix, zero_rows

CHUNK_ROWS = 16_384
"""Rows a stream reads at a time (and the unit its shuffled passes permute)."""
SHUFFLE_BYTES = 128 * 2**20
"""Float32 bytes of rows a shuffled pass mixes at once (at least two batches): 43,690 rows at d = 768."""


def row_batches(sources: list[RowSource], start: int, stop: int, batch_rows: int) -> Iterator[np.ndarray]:
    """Rows ``start:stop`` of the inputs laid end to end, ``batch_rows`` at a time."""
    offset = 0
    for source in sources:
        lo, hi = max(start - offset, 0), min(stop - offset, len(source))
        if hi > lo:
            yield from source.batches(lo, hi, batch_rows)
        offset += len(source)


# -- streams for fitting ---------------------------------------------------------------------------


class RowStream:
    """Embeddings read pass by pass, never all at once: what ``Compressor.fit`` trains on when it is given
    files or batches instead of an array.

    Build one with ``RowStream.of(x)``: a path or a list of paths (any file ``adaptemb.io.open_rows`` reads:
    ``.npy``, ``.npz``, ``.safetensors``, ``.parquet``, ``.fvecs`` ...; rows laid end to end), a re-iterable of 2-D arrays (a list of batches, an object whose ``__iter__`` starts
    over), or a callable returning a fresh iterator of 2-D arrays. A one-shot iterator (a generator) is
    refused: fitting reads the rows more than once (a sample, then one pass per epoch). Every chunk is
    validated like an array given to ``fit`` (finite floats, one width); errors name the rows. With
    ``nonzero_rows`` (methods that encode directions) the stream yields only the rows that are not all zero,
    keeping their positions, and counts the others (``skipped_rows``); a stream with no such row is a
    ``ValueError``. Memory: one chunk of ``chunk_rows`` rows, plus what the caller keeps (a sample, a shuffle
    buffer of ``shuffle_rows`` rows).
    """

    def __init__(self, name: str, *, files: Sequence[RowSource] = (), batches: Callable[[], Iterable[Any]] | None = None,
                 nonzero_rows: bool = False, chunk_rows: int = CHUNK_ROWS, shuffle_rows: int | None = None) -> None:
        self.name, self._files, self._batches = name, list(files), batches
        self.nonzero_rows, self.chunk_rows, self.shuffle_rows = nonzero_rows, chunk_rows, shuffle_rows
        self.rows: int | None = sum(len(f) for f in self._files) if self._files else None
        """Rows in one pass (all-zero ones included); None for batches until a first pass has counted them."""
        self.skipped_rows = 0
        """All-zero rows a pass left out (``nonzero_rows``), counted by the first complete pass (0 until then)."""
        self.dim: int | None = None
        if self._files:
            widths = {f.path.name: (f.shape[1] if len(f.shape) == 2 else None) for f in self._files}
            if None in widths.values() or len(set(widths.values())) != 1:
                raise ValueError(f"files to stream must hold 2-D rows of one width; got {widths}")
            self.dim = next(iter(widths.values()))

    @classmethod
    def of(cls, x: Any, *, key: str | None = None, nonzero_rows: bool = False) -> RowStream | None:
        """The stream ``x`` describes, or None when ``x`` is not a stream (an array: validated by the caller)."""
        if isinstance(x, RowStream):
            copy = cls(x.name, files=x._files, batches=x._batches, nonzero_rows=nonzero_rows, chunk_rows=x.chunk_rows,
                       shuffle_rows=x.shuffle_rows)
            copy.rows, copy.dim, copy.skipped_rows = x.rows, x.dim, x.skipped_rows
            return copy
        if isinstance(x, (str, os.PathLike)):
            x = [x]
        if isinstance(x, (np.ndarray, torch.Tensor)) or not isinstance(x, Iterable) and not callable(x):
            return None
        if isinstance(x, (list, tuple)):
            if x and all(isinstance(item, (str, os.PathLike)) for item in x):
                files = [open_rows(path, key) for path in x]
                name = files[0].path.name if len(files) == 1 else f"{len(files)} files"
                return cls(name, files=files, nonzero_rows=nonzero_rows)
            if not x or not all(isinstance(item, (np.ndarray, torch.Tensor)) and item.ndim == 2 for item in x):
                return None  # not batches: the caller's array check says what is wrong
        if isinstance(x, Iterator):
            raise TypeError(
                "a one-shot iterator can be read only once, but fitting reads the rows several times (a sample, then "
                "one pass per epoch): pass a list of 2-D arrays, a callable returning a fresh iterator of them, or file paths"
            )
        batches = x if callable(x) and not isinstance(x, Iterable) else (lambda: iter(x))
        return cls(f"{type(x).__name__} of batches", batches=batches, nonzero_rows=nonzero_rows)

    @classmethod
    def through_ray(cls, paths: str | os.PathLike | Sequence[str | os.PathLike], *, key: str | None = None,
                    address: str | None = None, nonzero_rows: bool = False) -> RowStream:
        """The rows of ``.parquet`` or ``.npy`` files read through Ray Data (``ray.data.read_parquet`` /
        ``read_numpy``, order preserved): Ray's readers do the I/O and decoding in its workers, on this machine
        or on the cluster at ``address`` (default: start a local Ray). Needs ``pip install 'adaptemb[ray]'``."""
        files = [existing_file(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
        suffixes = {f.suffix.lower() for f in files}
        if not files or len(suffixes) != 1 or not suffixes <= {".parquet", ".npy"}:
            raise ValueError(f"Ray Data reads .parquet or .npy files of one kind; got {', '.join(f.name for f in files) or 'none'}")
        ray = start_ray(address)
        ray.data.DataContext.get_current().execution_options.preserve_order = True  # a seeded fit sees one order
        if suffixes == {".npy"}:
            dataset, column = ray.data.read_numpy([str(f) for f in files]), "data"
        else:
            import pyarrow.parquet as pq

            column = pick_name(files[0], vector_columns(pq.read_schema(files[0])), key, "vector column")
            dataset = ray.data.read_parquet([str(f) for f in files]).select_columns([column])  # read: that column only
        name = files[0].name if len(files) == 1 else f"{len(files)} files"
        stream = cls(f"{name} (Ray Data)", nonzero_rows=nonzero_rows)

        def batches() -> Iterator[np.ndarray]:
            for batch in dataset.iter_batches(batch_size=stream.chunk_rows, batch_format="pyarrow"):
                values = batch.column(column).combine_chunks()
                rows = values.to_numpy_ndarray() if column == "data" else list_column_rows(values, files[0])
                yield np.array(rows, copy=True)  # arrow's buffers are read-only; torch wants writable memory

        stream._batches = batches
        return stream

    @property
    def kept_rows(self) -> int:
        """Rows a pass yields: ``rows`` less the all-zero rows left out (``skipped_rows``, once counted)."""
        assert self.rows is not None, "a first pass counts the rows of Python batches"
        return self.rows - self.skipped_rows

    def chunks(self, rng: np.random.Generator | None = None) -> Iterator[tuple[np.ndarray, torch.Tensor]]:
        """One pass: (row positions, validated float32 rows) a chunk at a time; file chunks in a random order
        when ``rng`` is given (batches from Python always come in their own order). With ``nonzero_rows`` the
        all-zero rows are left out (a chunk may then be empty) and counted in ``skipped_rows``."""
        chunks = self._file_chunks(rng) if self._files else self._batch_chunks()
        if not self.nonzero_rows:
            yield from chunks
            return
        kept = skipped = 0
        for where, rows in chunks:
            zero = zero_rows(rows)
            if bool(zero.any()):
                skipped += int(zero.sum())
                where, rows = where[~zero.numpy()], rows[~zero]
            kept += len(rows)
            yield where, rows
        if not kept:
            raise all_zero_error(self.name, skipped, "this method")
        self.skipped_rows = skipped

    def _batch_chunks(self) -> Iterator[tuple[np.ndarray, torch.Tensor]]:
        assert self._batches is not None
        position = 0
        for batch in self._batches():
            rows = self._checked(batch, position)
            yield np.arange(position, position + len(rows)), rows
            position += len(rows)
        if position == 0:
            raise ValueError(f"{self.name} yielded no rows")
        self.rows = position

    def _file_chunks(self, rng: np.random.Generator | None) -> Iterator[tuple[np.ndarray, torch.Tensor]]:
        assert self.rows is not None
        if self.rows == 0:
            raise ValueError(f"{self.name} holds no rows")
        starts = np.arange(0, self.rows, self.chunk_rows)
        if rng is not None:
            starts = rng.permutation(starts)
        for start in starts.tolist():
            stop = min(start + self.chunk_rows, self.rows)
            parts = list(row_batches(self._files, start, stop, stop - start))
            yield np.arange(start, stop), self._checked(parts[0] if len(parts) == 1 else np.concatenate(parts), start)

    def _checked(self, batch: Any, start: int) -> torch.Tensor:
        name = f"rows {start}..{start + len(batch) - 1} of {self.name}" if hasattr(batch, "__len__") else self.name
        rows = as_matrix(batch, name=name, dim=self.dim)
        self.dim = rows.shape[1]
        return rows

    def sample(self, n: int, seed: int) -> tuple[np.ndarray, torch.Tensor]:
        """A uniform sample of ``min(n, rows)`` rows without replacement, in stream order, and their positions:
        one pass keeping the ``n`` rows of smallest seeded random key, in a buffer of ``n`` rows (no other copy)."""
        rng = np.random.default_rng(seed)
        keys, positions = np.empty(0), np.empty(0, dtype=np.int64)
        kept: torch.Tensor | None = None
        for where, rows in self.chunks():
            draw = rng.random(len(where))
            if kept is None:
                kept = torch.empty(n, rows.shape[1])
            if len(keys) == n:  # full: only rows whose key beats the largest kept one can enter
                fresh = draw < keys.max()
                where, rows, draw = where[fresh], rows[torch.from_numpy(fresh)], draw[fresh]
            room = min(n - len(keys), len(where))
            if room:  # fill the buffer first
                kept[len(keys) : len(keys) + room] = rows[:room]
                keys, positions = np.concatenate([keys, draw[:room]]), np.concatenate([positions, where[:room]])
                where, rows, draw = where[room:], rows[room:], draw[room:]
            if len(where):  # the n smallest keys of the kept and incoming rows; incoming ones take the freed slots
                chosen = np.argpartition(np.concatenate([keys, draw]), n - 1)[:n]
                incoming = chosen[chosen >= n] - n
                slots = np.setdiff1d(np.arange(n), chosen[chosen < n], assume_unique=True)
                kept[torch.from_numpy(slots)] = rows[torch.from_numpy(incoming)]
                keys[slots], positions[slots] = draw[incoming], where[incoming]
        assert kept is not None
        order = np.argsort(positions, kind="stable")
        return positions[order], kept[: len(keys)][torch.from_numpy(order)]

    def shuffled_batches(self, batch_size: int, rng: np.random.Generator,
                         skip: np.ndarray | None = None) -> Iterator[torch.Tensor]:
        """One pass in shuffled batches of ``batch_size`` rows (the last may be smaller), leaving out the rows at
        positions ``skip``: chunks in a random order (files), mixed in a buffer of ``shuffle_rows`` rows (default:
        ``SHUFFLE_BYTES`` of float32 rows), at least two batches."""
        buffer_rows = max(2 * batch_size, self.shuffle_rows or SHUFFLE_BYTES // (4 * (self.dim or 1024)))
        pending: list[torch.Tensor] = []
        count = 0
        for where, rows in self.chunks(rng):
            if skip is not None and len(skip):
                keep = ~np.isin(where, skip)
                rows = rows if keep.all() else rows[torch.from_numpy(keep)]
            pending.append(rows)
            count += len(rows)
            if count >= buffer_rows:
                mixed = _mixed(pending, rng)
                full = len(mixed) - len(mixed) % batch_size
                yield from mixed[:full].split(batch_size)
                pending, count = [mixed[full:]], len(mixed) - full
        if count:
            yield from _mixed(pending, rng).split(batch_size)


def _mixed(parts: list[torch.Tensor], rng: np.random.Generator) -> torch.Tensor:
    rows = torch.cat(parts)
    return rows[torch.from_numpy(rng.permutation(len(rows)))]


RAY_LOCAL_STARTS = 2
"""Tries at starting Ray on this machine: Ray gives its new local node 30 s to register and raises when it misses
that, which a busy machine can make it do (seen once in the test suite on 2 shared cores); the second try starts
afresh after ``ray.shutdown()``."""


def start_ray(address: str | None = None) -> Any:
    """The ``ray`` module, connected: to the cluster at ``address``, else to a Ray started on this machine
    (once per process; started again once where the local node timed out during startup). A clear error when Ray
    is not installed."""
    try:
        import ray
    except ModuleNotFoundError:
        raise ModuleNotFoundError("Ray Data needs ray: pip install 'adaptemb[ray]'") from None
    if not ray.is_initialized():
        quiet_ray_data()
        for attempt in range(1, RAY_LOCAL_STARTS + 1):
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
                break
            except Exception as err:  # Ray raises a bare Exception when its local node misses its startup wait
                if address is not None or "timed out during startup" not in str(err) or attempt == RAY_LOCAL_STARTS:
                    raise
                ray.shutdown()
    return ray


def quiet_ray_data() -> None:
    """Ray's notices and Ray Data's progress lines stay in Ray's log files (under the session folder) instead of
    the terminal: adaptemb reports rows and shards itself. Errors still print. ``ADAPTEMB_RAY_LOGS=1`` keeps
    Ray's own terminal output."""
    if os.environ.get("ADAPTEMB_RAY_LOGS", "") not in ("", "0"):
        return
    import ray.data  # noqa: F401  ray.data sets up its loggers when imported

    logging.getLogger("ray").setLevel(logging.ERROR)
    for handler in logging.getLogger("ray.data").handlers:
        if not isinstance(handler, logging.FileHandler) and "File" not in type(handler).__name__:
            handler.setLevel(logging.ERROR)
