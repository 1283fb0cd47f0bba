"""Where an approximate index keeps its codes: segments of rows in cell order, tombstones, and the caller's ids.

The main segment holds the rows the index was built (or last compacted) with; rows added later go to a second
segment, kept in cell order too (each addition re-sorts that segment only). A removed row stays where it is with a
tombstone (``alive[i] = 0``) until ``compact`` rewrites one main segment of the live rows. A search scans both
segments with the same probes.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from adaptemb.ann.cells import CellLayout, id_array
from adaptemb.codes import Codes
from adaptemb.errors import InvalidConfigError


@dataclass(frozen=True)
class Segment:
    """Rows in cell order: cell ``c`` is rows ``offsets[c]:offsets[c + 1]``, row ``i`` the caller's id ``ids[i]``;
    ``alive`` (uint8, 1 = searchable) or None when no row was removed."""

    codes: Codes
    ids: np.ndarray
    offsets: np.ndarray
    alive: np.ndarray | None = None

    @classmethod
    def of(cls, codes: Codes, cells: np.ndarray, n_cells: int, ids: np.ndarray) -> Segment:
        """``codes`` (in any order) with their cell numbers and ids, put in cell order."""
        layout, order = CellLayout.of(cells, n_cells, ids)
        return cls(codes[order], layout.ids, layout.offsets)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def live(self) -> int:
        return len(self) if self.alive is None else int(np.count_nonzero(self.alive))

    def cells(self) -> np.ndarray:
        """The cell of each row, int32 (n,)."""
        return np.repeat(np.arange(len(self.offsets) - 1, dtype=np.int32), np.diff(self.offsets))

    def removing(self, rows: np.ndarray) -> Segment:
        """This segment with tombstones on ``rows``."""
        alive = np.ones(len(self), np.uint8) if self.alive is None else self.alive.copy()
        alive[rows] = 0
        return replace(self, alive=alive)

    def release_pages(self) -> None:
        """Drop this process' resident pages of the segment's memory-mapped arrays (``release_mapped``)."""
        release_mapped([*self.codes.to_arrays().values(), self.ids])

    @property
    def nbytes(self) -> int:
        tombstones = 0 if self.alive is None else self.alive.nbytes
        return int(self.codes.row_nbytes + self.ids.nbytes + self.offsets.nbytes + tombstones)


class CellStore:
    """The main segment, the added rows' segment (or None), and a lookup from caller ids to rows."""

    def __init__(self, main: Segment, added: Segment | None = None) -> None:
        self.main = main
        self.added = added
        self._lookup: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def segments(self) -> list[Segment]:
        return [self.main] if self.added is None else [self.main, self.added]

    def __len__(self) -> int:
        """Live rows."""
        return sum(segment.live for segment in self.segments)

    @property
    def n_cells(self) -> int:
        return len(self.main.offsets) - 1

    def locate(self, ids: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
        """(segment number, row) of each live caller id in ``ids``; an id not in the index is one clear error."""
        ids = as_ids(ids, what)
        sorted_ids, where = self._ids()
        slot = np.minimum(np.searchsorted(sorted_ids, ids), max(len(sorted_ids) - 1, 0))
        known = (sorted_ids[slot] == ids) if len(sorted_ids) else np.zeros(len(ids), bool)
        segment, row = where[0][slot], where[1][slot]
        for number, part in enumerate(self.segments):
            if part.alive is not None:
                here = known & (segment == number)
                known[here] = part.alive[row[here]] == 1
        if not known.all():
            missing = ids[~known]
            raise InvalidConfigError(f"{what} holds {len(missing)} id(s) not in the index, e.g. "
                                     f"{', '.join(map(str, missing[:5].tolist()))}; the index holds {len(self):,} "
                                     "live documents")
        return segment, row

    def _ids(self) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        if self._lookup is None:
            ids = np.concatenate([segment.ids.astype(np.int64) for segment in self.segments])
            segment = np.concatenate([np.full(len(s), i, np.int8) for i, s in enumerate(self.segments)])
            row = np.concatenate([np.arange(len(s), dtype=np.int64) for s in self.segments])
            order = np.argsort(ids, kind="stable")
            self._lookup = (ids[order], np.stack([segment[order].astype(np.int64), row[order]]))
        sorted_ids, where = self._lookup
        return sorted_ids, (where[0], where[1])

    def next_ids(self, count: int) -> np.ndarray:
        """``count`` new ids after the largest in use."""
        largest = max((int(segment.ids.max()) for segment in self.segments if len(segment)), default=-1)
        return np.arange(largest + 1, largest + 1 + count, dtype=np.int64)

    def add(self, codes: Codes, cells: np.ndarray, ids: np.ndarray) -> None:
        """Add rows (their cells and new, unused ids)."""
        ids = as_ids(ids, "ids")
        if len(np.unique(ids)) != len(ids):
            raise InvalidConfigError("ids of added rows must be unique")
        sorted_ids, _ = self._ids()
        taken = np.isin(ids, sorted_ids)
        if taken.any():
            raise InvalidConfigError(f"ids already in the index (removed ones stay reserved until compact()): "
                                     f"{', '.join(map(str, ids[taken][:5].tolist()))}")
        if self.added is not None:
            old = self.added
            keep = np.ones(len(old), bool) if old.alive is None else old.alive == 1
            codes = type(codes).concat([old.codes[np.flatnonzero(keep)], codes])
            cells = np.concatenate([old.cells()[keep], cells])
            ids = np.concatenate([old.ids[keep].astype(np.int64), ids])
        self.added = Segment.of(codes, cells, self.n_cells, ids)
        self._lookup = None

    def remove(self, ids: np.ndarray) -> None:
        """Tombstone the rows of ``ids``."""
        segment, row = self.locate(ids, "remove()")
        parts = self.segments
        for number, part in enumerate(parts):
            mine = row[segment == number]
            if len(mine):
                parts[number] = part.removing(mine)
        self.main, self.added = parts[0], parts[1] if len(parts) > 1 else None

    def compact(self) -> None:
        """One main segment of the live rows, in cell order; no tombstones."""
        codes, cells, ids = [], [], []
        for part in self.segments:
            keep = np.flatnonzero(part.alive) if part.alive is not None else slice(None)
            codes.append(part.codes[keep]), cells.append(part.cells()[keep]), ids.append(part.ids[keep].astype(np.int64))
        if not sum(len(c) for c in ids):
            raise InvalidConfigError("compact() would leave no documents; an index holds at least one")
        merged = type(self.main.codes).concat(codes)
        self.main, self.added = Segment.of(merged, np.concatenate(cells), self.n_cells, np.concatenate(ids)), None
        self._lookup = None

    def release_pages(self) -> None:
        for segment in self.segments:
            segment.release_pages()

    @property
    def nbytes(self) -> int:
        return sum(segment.nbytes for segment in self.segments)


def as_ids(ids: object, what: str) -> np.ndarray:
    """``ids`` as a 1-D int64 array of non-negative integers, or one clear error."""
    array = np.asarray(ids)
    if array.ndim == 0:
        array = array.reshape(1)
    if array.ndim != 1 or (len(array) and array.dtype.kind not in "iu"):
        raise InvalidConfigError(f"{what} must be a 1-D sequence of integer ids; got {array.dtype} of shape {array.shape}")
    array = array.astype(np.int64)
    if len(array) and array.min() < 0:
        raise InvalidConfigError(f"{what} holds negative ids; ids are integers >= 0")
    return array


def release_mapped(arrays: list[np.ndarray]) -> None:
    """Drop this process' resident pages of the read-only or shared file mappings under ``arrays`` (``numpy.memmap``
    arrays of mode ``"r"`` or ``"r+"`` and views of them; arrays in memory and copy-on-write maps are left alone):
    pages a scan read stop counting as the process' memory, and a later read maps them in again from the page cache
    (``madvise(MADV_DONTNEED)``; nothing is lost, as the pages are the file's)."""
    for array in arrays:
        base: Any = array
        while base is not None and not isinstance(base, np.memmap):
            base = getattr(base, "base", None)
        mapping = getattr(base, "_mmap", None)
        if base is not None and base.mode in ("r", "r+") and mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
            mapping.madvise(mmap.MADV_DONTNEED)


def keep_mask(segment: Segment, rows: np.ndarray | None) -> np.ndarray | None:
    """The searchable rows of ``segment`` (uint8): alive, and among ``rows`` when a filter gives them; None: all."""
    if rows is None:
        return segment.alive
    mask = np.zeros(len(segment), np.uint8)
    mask[rows] = 1
    return mask if segment.alive is None else mask & segment.alive


__all__ = ["CellStore", "Segment", "as_ids", "id_array", "keep_mask", "release_mapped"]
