"""Building an approximate index from the code shards ``adaptemb encode`` writes, in bounded memory, resumably.

``build_index_from_shards(shards, compressor, out, ann=...)`` makes the same index as
``compressor.index(read_code_shards(shards), ann=...)`` (the same sample, cells, assignment and calibration: the
steps of ``adaptemb.ann.build``), reading one shard at a time:

1. ``gathered``: one pass collects the cells' training sample and the calibration rows; the routing basis and the
   k-means centroids are trained on them (``router0.npz``);
2. ``sums``: one pass sums each cell's mapped rows (the routing centroids are the cells' means), checkpointed after
   every shard (``sums.npz``), then ``router.npz``;
3. ``assign/NNNNN.npy``: each shard's cell numbers;
4. ``rows/``: the codes' row columns and the ids as raw files in cell order; each shard's rows are written with
   ``os.pwrite`` at positions fixed by the cell counts (``filled.json`` lists the shards written), so a shard cut
   off half-written is simply written again;
5. the calibration (an exact scan of the rows, memory-mapped), then the index file, written a chunk at a time and
   renamed into place (``adaptemb.load_index`` opens it memory-mapped), and the work folder removed.

The work folder is ``<out>.building/``; every file in it is written atomically, and ``job.json`` records what is
built (the shards' job, the compressor, the settings), so running the same build again after it was killed resumes
at the first step or shard not finished, and a different build into the same place is refused.

Memory: none of it grows with the rows but the rows per cell of each shard (shards x cells int64; 4 MB at 10M rows
in shards of 65,536). One shard of codes at a time, mapped and assigned
``adaptemb.ann.cells.BLOCK_ROWS`` rows at a time; the sampled row numbers, drawn without a permutation of every row
(``adaptemb.ann.build.distinct_rows``); the k-means sample as codes (``AnnConfig.sample`` rows, mapped to the
routing space a part at a time: ``adaptemb.ann.cells.train_centroids``); the routing basis' Gram matrix, summed a
block of sample queries at a time; the centroids; the calibration queries (their cells read back from ``assign/``
one shard at a time, with no lookup of every id). The rows written in cell order are read memory-mapped a window at
a time: the calibration's exact scan releases each window's pages after it (``AnnIndex._exact_search``), and the
final copy reads the files through the page cache. ``benchmarks/ann_shard_build.py`` measures it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from adaptemb.ann import AnnConfig, AnnIndex
from adaptemb.ann.build import calibrate_on_rows, held_out_rows, sample_rows, trained_router
from adaptemb.ann.cells import Router
from adaptemb.ann.checks import check_own_codes
from adaptemb.ann.config import as_config
from adaptemb.ann.files import ann_contents, write_tensors_streamed
from adaptemb.ann.scorers import scorer_for
from adaptemb.ann.storage import open_codes
from adaptemb.ann.store import CellStore, Segment
from adaptemb.api import load
from adaptemb.codes import Codes
from adaptemb.errors import InvalidConfigError
from adaptemb.method import Compressor
from adaptemb.registry import get_index_registry
from adaptemb.serialization import atomic_write
from adaptemb.streaming import EncodeJob, finished_job, read_code_shard


def build_index_from_shards(shards: str | Path, compressor: Compressor | str | Path, out: str | Path, *,
                            ann: AnnConfig | str | dict = "auto") -> Path:
    """Build the approximate index of the codes under ``shards`` (a finished ``encode_files`` job of document codes
    of ``compressor``) into the file ``out``; resume a killed build of the same job (see the module docstring)."""
    model = load(compressor) if isinstance(compressor, (str, Path)) else compressor
    config = as_config(ann)
    if config.rerank is not None:
        raise InvalidConfigError("a build from shards takes no rerank store; build in memory with compressor.index()")
    folder, target = Path(shards), Path(out)
    job = finished_job(folder)
    if job.side != "doc":
        raise InvalidConfigError(f"{folder} holds query codes (side={job.side!r}); index document codes")
    work = Path(f"{target}.building")
    _claim(work, _identity(job, model, config))
    builder = _ShardBuild(folder, job, model, config, work)
    index = builder.run()
    tensors, metadata = ann_contents(index)
    write_tensors_streamed(target, tensors, metadata)
    del index, tensors
    shutil.rmtree(work)
    return target


def _identity(job: EncodeJob, model: Compressor, config: AnnConfig) -> dict[str, Any]:
    state = hashlib.sha256()
    for name, tensor in sorted(model.state_tensors().items()):
        state.update(name.encode() + tensor.detach().cpu().contiguous().numpy().tobytes())
    return {"shards": job.identity(), "kind": job.kind, "dim": job.dim, "compressor_sha256": state.hexdigest(),
            "config": config.saved()}


def _claim(work: Path, identity: dict[str, Any]) -> None:
    """Start ``work`` for this build, or resume it; a work folder of another build is an error."""
    record = work / "job.json"
    if record.is_file():
        if json.loads(record.read_text()) != json.loads(json.dumps(identity)):
            raise InvalidConfigError(f"{work} holds an unfinished build of other codes, compressor or settings; "
                                     "remove it to start this build")
        return
    work.mkdir(parents=True, exist_ok=True)
    _write_json(record, identity)


class _ShardBuild:
    """The steps of one build from shards (module docstring), each skipped when its files are there."""

    def __init__(self, folder: Path, job: EncodeJob, model: Compressor, config: AnnConfig, work: Path) -> None:
        self.folder, self.job, self.model, self.config, self.work = folder, job, model, config, work
        self.n = job.rows
        query_kind = model.query_kind or (job.kind if model.symmetric else None)
        if query_kind is None:
            raise InvalidConfigError(f"{model.name} declares no query kind: its codes have no approximate index")
        self.query_kind = query_kind
        backend = get_index_registry().for_kinds(self.query_kind, job.kind)
        self.scorer = scorer_for(self.query_kind, job.kind, model.score, backend)
        rng = np.random.default_rng(config.seed)
        self.train, self.pick = sample_rows(self.n, config, rng)
        self.held_out = held_out_rows(self.n, self.train, config.calibration_queries, rng)
        self.first = read_code_shard(folder, job, job.shards[0])[0]
        self.budget = model.query_budget(self.first)  # the budget of the codes (fixed-k codes: any shard's)
        self.held_docs: Codes | None = None
        self.id_dtype = np.int32 if self.n < 2**31 else np.int64  # as the in-memory build stores row numbers

    def shards(self) -> Any:
        """(shard number, codes, row ids) of each shard, read one at a time."""
        for number, shard in enumerate(self.job.shards):
            codes, ids = read_code_shard(self.folder, self.job, shard)
            yield number, codes, ids

    def run(self) -> AnnIndex:
        router = self._router()
        counts = self._assign(router)
        offsets = np.concatenate([[0], np.cumsum(counts.sum(axis=0))]).astype(np.int64)
        segment = self._fill(counts, offsets)
        index = AnnIndex(self.model, CellStore(segment), router, self.scorer, config=self.config,
                         query_kind=self.query_kind, budget=self.budget, rerank=None)
        held = self._held_docs()
        calibrate_on_rows(index, held, self.held_out, cells_of=self._cells_of)
        return index

    def _cells_of(self, ids: np.ndarray) -> np.ndarray:
        """The cell of each row id in ``ids`` (any shape; -1 stays -1), read from the shards' saved cells one shard
        at a time (no lookup of every row is built)."""
        flat = ids.ravel()
        cells = np.full(len(flat), -1, np.int64)
        starts = np.array([shard.start for shard in self.job.shards], np.int64)
        which = np.searchsorted(starts, flat, side="right") - 1
        for number in np.unique(which[flat >= 0]):
            mine = (which == number) & (flat >= 0)
            assigned = np.load(self.work / "assign" / f"{number:05d}.npy", mmap_mode="r")  # the rows asked for only
            cells[mine] = assigned[flat[mine] - starts[number]]
        return cells.reshape(ids.shape)

    # -- steps 1 and 2: the cells --------------------------------------------------------------

    def _router(self) -> Router:
        final = self.work / "router.npz"
        if final.is_file():
            return _read_router(final)
        first = self.work / "router0.npz"
        if first.is_file():
            router = _read_router(first)
        else:
            sample, self.held_docs = self._gather()
            check_own_codes(self.model, sample, self.budget, "the shards' codes")
            router = trained_router(self.model, sample, sample[self.pick], self.scorer, self.config, self.query_kind,
                                    self.budget, self.n)
            _write_router(first, router)
        router = router.with_means(*self._sums(router))
        _write_router(final, router)
        return router

    def _gather(self) -> tuple[Codes, Codes]:
        """The training sample's codes and the calibration rows' codes (rows in order)."""
        sample, held = [], []
        for _, codes, ids in self.shards():
            first, last = int(ids[0]), int(ids[-1]) + 1
            sample.append(codes[_within(self.train, first, last) - first])
            held.append(codes[_within(self.held_out, first, last) - first])
        return type(sample[0]).concat(sample), type(held[0]).concat(held)

    def _held_docs(self) -> Codes:
        if self.held_docs is None:
            self.held_docs = self._gather()[1]
        return self.held_docs

    def _sums(self, router: Router) -> tuple[np.ndarray, np.ndarray]:
        path = self.work / "sums.npz"
        sums, counts, done = np.zeros((router.cells, router.dims)), np.zeros(router.cells, np.int64), 0
        if path.is_file():
            with np.load(path) as saved:
                sums, counts, done = saved["sums"], saved["counts"], int(saved["shards"])
        for number, codes, _ in self.shards():
            if number < done:
                continue
            part_sums, part_counts = router.cell_sums(codes, router.assign(codes, self.scorer.doc_vectors),
                                                      self.scorer.doc_vectors)
            sums, counts = sums + part_sums, counts + part_counts
            atomic_write(path, lambda tmp, s=sums, c=counts, d=number + 1: _save_npz(tmp, sums=s, counts=c, shards=d))
        return sums, counts

    # -- steps 3 and 4: the rows in cell order ---------------------------------------------------

    def _assign(self, router: Router) -> np.ndarray:
        """Each shard's rows per cell, int64 (shards, cells); each shard's cells saved as it is assigned."""
        folder = self.work / "assign"
        folder.mkdir(exist_ok=True)
        counts = np.zeros((len(self.job.shards), router.cells), np.int64)
        for number, shard in enumerate(self.job.shards):
            path = folder / f"{number:05d}.npy"
            if not path.is_file():
                codes, _ = read_code_shard(self.folder, self.job, shard)
                cells = router.assign(codes, self.scorer.doc_vectors)
                atomic_write(path, lambda tmp, c=cells: _save_npy(tmp, c))
            counts[number] = np.bincount(np.load(path), minlength=router.cells)
        return counts

    def _fill(self, counts: np.ndarray, offsets: np.ndarray) -> Segment:
        rows = self.work / "rows"
        rows.mkdir(exist_ok=True)
        filled_path = self.work / "filled.json"
        filled = set(json.loads(filled_path.read_text())) if filled_path.is_file() else set()
        before = np.cumsum(counts, axis=0) - counts  # rows of each cell in earlier shards
        columns = _row_arrays(self.first)
        shared = {k: v for k, v in self.first.to_arrays().items() if k not in columns}
        layout = {name: (array.dtype, array.shape[1:]) for name, array in columns.items()}
        for number, shard in enumerate(self.job.shards):
            if number in filled:
                continue
            codes, ids = read_code_shard(self.folder, self.job, shard)
            columns = _row_arrays(codes)
            cells = np.load(self.work / "assign" / f"{number:05d}.npy")
            order = np.argsort(cells, kind="stable")
            starts = offsets[:-1] + before[number]
            columns["ids"] = np.asarray(ids, self.id_dtype)
            for name, array in columns.items():
                _scatter(rows / f"{name}.bin", array[order], cells[order], starts)
            filled.add(number)
            _write_json(filled_path, sorted(filled))
        mapped = {name: np.memmap(rows / f"{name}.bin", dtype=dtype, mode="r", shape=(self.n, *shape))
                  for name, (dtype, shape) in layout.items()}
        ids = np.memmap(rows / "ids.bin", dtype=self.id_dtype, mode="r", shape=(self.n,))
        return Segment(open_codes(self.job.kind, {**shared, **mapped}, self.job.dim), ids, offsets)


def _row_arrays(codes: Codes) -> dict[str, np.ndarray]:
    """The arrays of ``codes`` with one entry a row (fixed width); a kind with rows of varying length is refused."""
    arrays = {name: value for name, value in codes.to_arrays().items()
              if isinstance(value, np.ndarray) and value.ndim >= 1 and len(value) == len(codes)}
    if set(arrays) != {name for name, column in codes.row_columns().items() if column.offsets is None}:
        raise InvalidConfigError(f"{codes.kind} codes have rows of varying length; build their approximate index in "
                                 "memory with compressor.index(codes, ann=...)")
    return arrays


def _scatter(path: Path, rows: np.ndarray, cells: np.ndarray, starts: np.ndarray) -> None:
    """Write ``rows`` (sorted by ``cells``) into ``path`` at row ``starts[cell]`` onward, one write per cell."""
    row_bytes = rows[0].nbytes if len(rows) else 0
    bounds = np.flatnonzero(np.diff(cells)) + 1
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for run in np.split(np.arange(len(rows)), bounds):
            if len(run):
                data = np.ascontiguousarray(rows[run[0] : run[-1] + 1]).tobytes()
                os.pwrite(fd, data, int(starts[cells[run[0]]]) * row_bytes)
        os.fsync(fd)
    finally:
        os.close(fd)


def _within(rows: np.ndarray, first: int, last: int) -> np.ndarray:
    return rows[(rows >= first) & (rows < last)]


def _read_router(path: Path) -> Router:
    with np.load(path) as saved:
        basis = saved.get("basis")
        return Router(basis, saved["centroids"])


def _write_router(path: Path, router: Router) -> None:
    arrays = {"centroids": router.centroids, **({} if router.basis is None else {"basis": router.basis})}
    atomic_write(path, lambda tmp: _save_npz(tmp, **arrays))


def _save_npz(tmp: Path, **arrays: Any) -> None:
    with open(tmp, "wb") as handle:
        np.savez(handle, **arrays)


def _save_npy(tmp: Path, array: np.ndarray) -> None:
    with open(tmp, "wb") as handle:
        np.save(handle, array)


def _write_json(path: Path, value: Any) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(value)))
