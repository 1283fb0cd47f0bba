"""Encoding files larger than memory: read rows batch by batch, write codes shard by shard, resume.

``encode_files(inputs, compressor, out)`` reads any file ``adaptemb.io.open_rows`` reads (``.npy``,
``.safetensors`` and ``*vecs`` at the rows' offset, ``.parquet`` row group by row group, batch by batch,
``.npz``), encodes ``batch_rows`` rows at a time and writes one parquet file per ``shard_rows`` rows,
atomically, plus ``manifest.json``. Memory stays at a few batches whatever the input size (a compressed
``.npz`` member is the exception: it is decompressed whole). Re-running the same job skips the shards
already written (checked against the manifest of the job: inputs, compressor, budget ``k`` or ``bytes``, side),
so a killed job resumes where it stopped and gives identical output.

Shard layout (one parquet file per shard): ``id`` (int64 row number across all inputs) and the row columns
the code kind gives (``Codes.row_columns()``; by default one per per-row array of ``Codes.to_arrays()``):
fixed-width rows as fixed-size lists (uint8 rows, packed bits, as fixed-size binary), variable-length rows
(ragged arrays split by the row ``counts``) as list columns, scalars as plain columns. Arrays shared by all
rows (``Codes.shared_arrays``) go in the manifest.
``read_code_shards(out)`` reads the codes back.
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from adaptemb._version import __version__
from adaptemb.api import load
from adaptemb.codes import Codes, RowColumn
from adaptemb.errors import CorruptFileError
from adaptemb.io import RowSource, open_rows
from adaptemb.method import Compressor
from adaptemb.progress import progress_bar
from adaptemb.rows import row_batches, start_ray
from adaptemb.serialization import atomic_write, existing_file
from adaptemb.threads import set_threads

Side = Literal["doc", "query"]
"""Which codes an encode run writes: document codes (``encode``) or query codes (``encode_queries``)."""
Engine = Literal["local", "ray"]
"""Who reads and encodes a stream of rows: this process, or Ray Data actors."""

SHARDS_FORMAT = "adaptemb.code-shards"
SHARDS_FORMAT_VERSION = "1"
MANIFEST = "manifest.json"


# -- the job --------------------------------------------------------------------------------------


@dataclass
class Shard:
    file: str
    start: int
    rows: int


@dataclass
class EncodeJob:
    """What a shard directory holds; two runs of one job (same fields) share their shards."""

    method: str
    compressor_sha256: str
    k: int | None
    side: str
    inputs: list[dict[str, Any]]
    rows: int
    shard_rows: int
    bytes: float | None = None
    """The byte budget the job was given (``k`` is then the budget it picked); None: ``k`` was given."""
    kind: str = ""
    dim: int = 0
    shards: list[Shard] = field(default_factory=list)
    shared: dict[str, Any] = field(default_factory=dict)
    complete: bool = False

    def identity(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in IDENTITY}


IDENTITY = ("method", "compressor_sha256", "k", "bytes", "side", "inputs", "rows", "shard_rows")
"""The fields of an ``EncodeJob`` that two runs of one job share."""


@dataclass(frozen=True)
class EncodeResult:
    """What ``encode_files`` did: rows encoded in this run, shards written and skipped, seconds, and the budget
    ``k`` the codes have (None: the method's default)."""

    out: Path
    rows: int
    shards_written: int
    shards_skipped: int
    seconds: float
    k: int | None = None

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("inf")


def encode_files(
    inputs: str | Path | Sequence[str | Path],
    compressor: Compressor | str | Path,
    out: str | Path,
    *,
    k: int | None = None,
    bytes: float | None = None,
    side: Side = "doc",
    key: str | None = None,
    shard_rows: int = 262_144,
    batch_rows: int = 16_384,
    progress: bool = True,
    engine: Engine = "local",
    ray_address: str | None = None,
) -> EncodeResult:
    """Encode the rows of ``inputs`` (files, in order) into parquet shards under ``out``; resume a killed run.

    ``compressor`` is a fitted compressor or the path of a saved one; ``side="query"`` writes
    ``encode_queries`` codes. ``bytes``: instead of ``k``, a byte budget per vector, resolved once to the budget
    ``compressor.encode(x, bytes=bytes)`` uses (recorded in the manifest: a resumed run must give the same;
    ``EncodeResult.k`` is the budget picked). Memory is bounded by ``batch_rows`` rows of input plus their codes.
    ``engine="ray"`` encodes the shards on a Ray cluster (``ray_address``; default: a local Ray started
    here) through Ray Data actors that each hold the compressor once; the shards are the same files.
    """
    if engine not in ("local", "ray"):
        raise ValueError(f"engine must be 'local' or 'ray'; got {engine!r}")
    if side not in ("doc", "query"):
        raise ValueError(f"side must be 'doc' or 'query'; got {side!r}")
    for name, value in (("shard_rows", shard_rows), ("batch_rows", batch_rows)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1; got {value!r}")
    model = load(compressor) if isinstance(compressor, (str, Path)) else compressor
    if bytes is not None:
        k = model.budget_within_bytes(bytes, k)  # encode(x, bytes=) resolves it this way: the same codes
    model.budgets().resolve(k, model.name)
    paths = [inputs] if isinstance(inputs, (str, Path)) else list(inputs)
    if not paths:
        raise ValueError("no input files given")
    sources = [open_rows(p, key) for p in paths]
    _check_widths(sources, model)
    job = _plan(sources, model, k, bytes, side, shard_rows)
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    job = _resume(target, job)
    if engine == "ray":
        return _run_ray(target, job, sources, model, k, side, batch_rows, key, ray_address)
    return _run(target, job, sources, model, k, side, batch_rows, progress)


def _check_widths(sources: list[RowSource], model: Compressor) -> None:
    for source in sources:
        if len(source.shape) != 2 or (len(source) and source.shape[1] != model.dim):
            raise ValueError(f"{source.path.name} holds rows of shape {source.shape[1:]}; the compressor was fitted on dimension {model.dim}")


def _plan(sources: list[RowSource], model: Compressor, k: int | None, nbytes: float | None, side: str,
          shard_rows: int) -> EncodeJob:
    state = hashlib.sha256()
    for name, tensor in sorted(model.state_tensors().items()):
        state.update(name.encode() + tensor.numpy().tobytes())
    state.update(model.config.model_dump_json().encode())
    inputs = [{"path": str(s.path.resolve()), "rows": len(s), "bytes": s.path.stat().st_size,
               "mtime_ns": s.path.stat().st_mtime_ns} for s in sources]
    rows = sum(len(s) for s in sources)
    job = EncodeJob(model.name, state.hexdigest(), k, side, inputs, rows, shard_rows, bytes=nbytes)
    job.shards = [Shard(f"part-{i:05d}.parquet", start, min(shard_rows, rows - start))
                  for i, start in enumerate(range(0, rows, shard_rows))]
    return job


def _resume(target: Path, job: EncodeJob) -> EncodeJob:
    """The job as ``target`` records it when it is the same job, else ``job`` (refusing to mix jobs)."""
    manifest = target / MANIFEST
    if not manifest.exists():
        if any(target.glob("part-*.parquet")):
            raise ValueError(f"{target} holds shards but no {MANIFEST}; give an empty or new folder")
        return job
    for stale in target.glob(".part-*.tmp"):  # a shard being written when the process was killed
        stale.unlink()
    recorded = read_manifest(target)
    if recorded.identity() != job.identity():
        raise ValueError(f"{target} holds the shards of another encode job ({_differences(recorded, job)}); give "
                         "an empty or new folder, or the job's own settings to resume it")
    return recorded


def _differences(recorded: EncodeJob, job: EncodeJob) -> str:
    """What differs between the job a folder holds and this one, e.g. ``bytes 16 there, 32 here``."""
    shown = ("method", "k", "bytes", "side", "rows", "shard_rows")  # the others are long: named only
    there, here = recorded.identity(), job.identity()
    return "; ".join(f"{name} {there[name]} there, {here[name]} here" if name in shown else f"other {name}"
                     for name in IDENTITY if there[name] != here[name])


def _run(target: Path, job: EncodeJob, sources: list[RowSource], model: Compressor, k: int | None,
         side: str, batch_rows: int, progress: bool) -> EncodeResult:
    started, written, skipped, encoded = time.perf_counter(), 0, 0, 0
    done = {s.file for s in job.shards if (target / s.file).exists()} if job.kind else set()
    with progress_bar(total=job.rows, desc=f"encode {model.name}", unit="rows", unit_scale=True, enabled=progress) as bar:
        for shard in job.shards:
            if shard.file in done:
                skipped += 1
                bar.update(shard.rows)
                continue
            codes = _encode_rows(sources, model, k, side, shard, batch_rows, bar)
            if not job.kind:
                job.kind, job.dim = codes.kind, codes.dim
                job.shared = {name: _encode_array(codes.to_arrays()[name]) for name in codes.shared_arrays}
                _write_manifest(target, job)  # before the first shard: a killed run can resume
            _write_shard(target / shard.file, codes, shard.start)
            written += 1
            encoded += shard.rows
    job.complete = True
    _write_manifest(target, job)
    return EncodeResult(target, encoded, written, skipped, time.perf_counter() - started, k)


def _run_ray(target: Path, job: EncodeJob, sources: list[RowSource], model: Compressor, k: int | None, side: str,
             batch_rows: int, key: str | None, address: str | None) -> EncodeResult:
    """The shards not yet written, one Ray Data row each, encoded and written by a pool of actors."""
    started = time.perf_counter()
    ray = start_ray(address)
    if not job.kind:  # learn the codes' kind and shared tables from one row, as the first local shard does
        probe = model.encode(sources[0].rows(0, 1), k=k) if side == "doc" else model.encode_queries(sources[0].rows(0, 1), k=k)
        job.kind, job.dim = probe.kind, probe.dim
        job.shared = {name: _encode_array(probe.to_arrays()[name]) for name in probe.shared_arrays}
        _write_manifest(target, job)
    todo = [shard for shard in job.shards if not (target / shard.file).exists()]
    if todo:
        actors = max(1, min(len(todo), int(ray.cluster_resources().get("CPU", 1))))
        settings = {"model": model, "paths": [str(s.path) for s in sources], "key": key, "k": k, "side": side,
                    "batch_rows": batch_rows, "target": str(target)}
        with warnings.catch_warnings():
            # max_restarts=0 (a failed job is resumed by a rerun, not by restarting actors whose constructor
            # arguments may be gone) is Ray Data's documented way, which Ray 2.60 reports as a deprecated kwarg
            warnings.filterwarnings("ignore", message=".*ray_remote_args.*is deprecated")
            ray.data.from_items([asdict(shard) for shard in todo]).map_batches(
                _ShardEncoder, fn_constructor_kwargs=settings, batch_size=1, num_cpus=1, max_restarts=0,
                compute=ray.data.ActorPoolStrategy(size=actors),
            ).materialize()
    job.complete = True
    _write_manifest(target, job)
    rows = sum(shard.rows for shard in todo)
    return EncodeResult(target, rows, len(todo), len(job.shards) - len(todo), time.perf_counter() - started, k)


class _ShardEncoder:
    """A Ray Data actor: holds the compressor and the input readers once, encodes and writes whole shards."""

    def __init__(self, model: Compressor, paths: list[str], key: str | None, k: int | None, side: str,
                 batch_rows: int, target: str) -> None:
        set_threads(1)  # one core per actor: Ray schedules one actor per CPU
        self.model, self.sources = model, [open_rows(p, key) for p in paths]
        self.k, self.side, self.batch_rows, self.target = k, side, batch_rows, Path(target)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for file, start, rows in zip(batch["file"], batch["start"], batch["rows"]):
            shard = Shard(str(file), int(start), int(rows))
            codes = _encode_rows(self.sources, self.model, self.k, self.side, shard, self.batch_rows, _NoProgress())
            _write_shard(self.target / shard.file, codes, shard.start)
        return {"file": batch["file"]}


class _NoProgress:
    def update(self, count: int) -> None:
        """Nothing: actors report through Ray."""


def _encode_rows(sources: list[RowSource], model: Compressor, k: int | None, side: str, shard: Shard,
                 batch_rows: int, bar: Any) -> Codes:
    parts = []
    for rows in row_batches(sources, shard.start, shard.start + shard.rows, batch_rows):
        parts.append(model.encode(rows, k=k) if side == "doc" else model.encode_queries(rows, k=k))
        bar.update(len(rows))
    return parts[0] if len(parts) == 1 else type(parts[0]).concat(parts)


# -- shard files ------------------------------------------------------------------------------------


def _write_shard(path: Path, codes: Codes, start: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {"id": pa.array(np.arange(start, start + len(codes), dtype=np.int64))}
    columns.update(_row_columns(codes))
    table = pa.table(columns)
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def _row_columns(codes: Codes) -> dict[str, Any]:
    """The kind's row columns (``Codes.row_columns``) as arrow arrays: variable-length runs as list columns, uint8
    rows (packed bits) as fixed-size binary, other rows as fixed-size lists, scalars as plain columns."""
    import pyarrow as pa

    columns: dict[str, Any] = {}
    for name, column in codes.row_columns().items():
        values = column.values
        if column.offsets is not None:
            columns[name] = pa.ListArray.from_arrays(pa.array(column.offsets.astype(np.int32)), pa.array(values))
        elif values.ndim == 2 and values.dtype == np.uint8:
            buffer = pa.py_buffer(np.ascontiguousarray(values).tobytes())
            columns[name] = pa.FixedSizeBinaryArray.from_buffers(pa.binary(values.shape[1]), len(values), [None, buffer])
        elif values.ndim == 2:
            columns[name] = pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(values).reshape(-1)), values.shape[1])
        else:
            columns[name] = pa.array(values)
    return columns


def _read_shard(path: Path) -> dict[str, RowColumn]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as handle:  # one file: not read_table's dataset layer (about 35 MB more resident)
        table = handle.read()
    columns: dict[str, RowColumn] = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if pa.types.is_fixed_size_binary(column.type):
            raw = np.frombuffer(column.buffers()[1], dtype=np.uint8)
            width = column.type.byte_width
            columns[name] = RowColumn(raw[column.offset * width : (column.offset + len(column)) * width].reshape(len(column), width))
        elif pa.types.is_fixed_size_list(column.type):
            columns[name] = RowColumn(column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), column.type.list_size))
        elif pa.types.is_list(column.type):
            offsets = column.offsets.to_numpy().astype(np.int64)
            columns[name] = RowColumn(column.flatten().to_numpy(zero_copy_only=False), offsets - offsets[0])
        else:
            columns[name] = RowColumn(column.to_numpy(zero_copy_only=False))
    return columns


def read_code_shards(out: str | Path, *, ids: bool = False) -> Codes | tuple[Codes, np.ndarray]:
    """The codes a finished ``encode_files`` run wrote under ``out``, in row order (and the row ids)."""
    folder = Path(out)
    job = finished_job(folder)
    parts, row_ids = zip(*(read_code_shard(folder, job, shard) for shard in job.shards))
    codes = parts[0] if len(parts) == 1 else type(parts[0]).concat(list(parts))
    return (codes, np.concatenate(row_ids)) if ids else codes


def finished_job(folder: str | Path) -> EncodeJob:
    """The encode job of ``folder``; an unfinished one is an error that says to run it again."""
    job = read_manifest(folder)
    if not job.complete:
        raise ValueError(f"{folder} holds an unfinished encode job; run the same encode again to finish it")
    return job


def read_code_shard(folder: str | Path, job: EncodeJob, shard: Shard) -> tuple[Codes, np.ndarray]:
    """One shard of a finished encode job under ``folder``: its codes and their row ids."""
    path = Path(folder) / shard.file
    try:
        columns = _read_shard(path)
    except (OSError, ValueError) as err:
        raise CorruptFileError(f"{path} is not a readable code shard: {err}") from None
    shared = {name: _decode_array(spec) for name, spec in job.shared.items()}
    row_ids = columns.pop("id").values
    return Codes.for_kind(job.kind).from_row_columns(columns, shared, job.dim), row_ids


# -- the manifest -----------------------------------------------------------------------------------


def _write_manifest(target: Path, job: EncodeJob) -> None:
    body = {"format": SHARDS_FORMAT, "format_version": SHARDS_FORMAT_VERSION, "adaptemb_version": __version__, **asdict(job)}
    atomic_write(target / MANIFEST, lambda tmp: tmp.write_text(json.dumps(body, indent=1) + "\n"))


def read_manifest(folder: str | Path) -> EncodeJob:
    """The encode job recorded in ``folder/manifest.json``."""
    path = existing_file(Path(folder) / MANIFEST)
    try:
        body = json.loads(path.read_text())
        if body.get("format") != SHARDS_FORMAT or body.get("format_version") != SHARDS_FORMAT_VERSION:
            raise ValueError(f"not an {SHARDS_FORMAT} manifest of version {SHARDS_FORMAT_VERSION}")
        body = {k: v for k, v in body.items() if k not in ("format", "format_version", "adaptemb_version")}
        body["shards"] = [Shard(**s) for s in body["shards"]]
        return EncodeJob(**body)
    except (ValueError, TypeError, KeyError) as err:
        raise CorruptFileError(f"{path} is not a readable encode manifest: {err}") from None


def _encode_array(array: np.ndarray) -> dict[str, Any]:
    return {"dtype": str(array.dtype), "shape": list(array.shape), "values": array.reshape(-1).tolist()}


def _decode_array(spec: dict[str, Any]) -> np.ndarray:
    return np.asarray(spec["values"], dtype=spec["dtype"]).reshape(spec["shape"])
