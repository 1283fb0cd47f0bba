"""Streaming encode at scale: rows/s and peak RSS of ``adaptemb encode`` (local engine) from parquet.

Usage::

    python benchmarks/streaming_encode.py [--rows 1000000] [--method csr] [--k 32] [--engine local|ray]
                                          [--work /tmp/adaptemb-stream] [--check-rows 20000] [--out benchmarks/results]

Input: ``rows`` float32 rows of the 768-d real-text stand-in (``standin768.py``: the 40,000 WordNet
definitions, then noise-perturbed copies, as ``adaptemb bench --scale`` builds them), written to one parquet
file in row groups of 65,536 rows without ever holding the whole matrix. The compressor (defaults of
``method``) is fitted on 5,000 of the definitions. The encode runs in a child process (``adaptemb encode``,
the command a user runs). Peak memory is the largest sum, sampled every 0.2 s, of the resident set of
that process and all its descendants (with Ray: the raylet, GCS and every worker), as RSS (shared pages
counted once per process, which overstates) and as PSS (shared pages divided among the processes that
map them: the memory the job takes from the machine), and the child's own ``ru_maxrss``. Then the shards
are checked against in-memory ``encode`` of the same rows on the first and last ``check_rows`` rows.
A record (rows/s, peak RSS, bytes on disk, the check, the compressor's hash, the machine and its load) is
appended to ``<out>/streaming_encode.json``. The compressor is fitted once per work folder and reused, so
runs of both engines encode with the same model (a fit's last bits depend on the thread count). The
memory sampler itself costs CPU: with Ray's dozen processes it took about 0.7 of a core in the 10M run.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from records import append_record
from standin768 import definitions_768

import adaptemb
from adaptemb.evaluate.machine import machine_info
from adaptemb.evaluate.scale import scaled_corpus

ROW_GROUP = 65_536


def write_parquet(path: Path, base: np.ndarray, rows: int) -> None:
    """``rows`` rows (``base`` then its noise-perturbed copies) into ``path``, one row group at a time."""
    d = base.shape[1]
    with pq.ParquetWriter(path, pa.schema([("emb", pa.list_(pa.float32(), d))])) as writer:
        for start in range(0, rows, ROW_GROUP):
            stop = min(start + ROW_GROUP, rows)
            if stop <= len(base):
                block = base[start:stop]
            else:  # copies drawn with a per-block seed, so the file never needs the whole matrix
                block = scaled_corpus(base, len(base) + stop - max(start, len(base)), noise=0.5, seed=start)[len(base):]
                if start < len(base):
                    block = np.concatenate([base[start:], block])
            writer.write_table(pa.table({"emb": pa.FixedSizeListArray.from_arrays(pa.array(block.reshape(-1)), d)}))


def read_rows(path: Path, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of a file ``write_parquet`` wrote, read with pyarrow from the row groups holding them."""
    first, last = start // ROW_GROUP, (stop - 1) // ROW_GROUP
    table = pq.ParquetFile(path).read_row_groups(range(first, last + 1)).slice(start - first * ROW_GROUP, stop - start)
    return table.column("emb").combine_chunks().flatten().to_numpy().reshape(stop - start, -1)


def tree_rss(root: int, field: str = "Rss") -> int:
    """Resident bytes (``Rss``, or ``Pss``: shared pages divided among their users) of process ``root`` and all
    its descendants, from /proc/<pid>/smaps_rollup."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry.name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, changed = {root}, True
    while changed:
        grown = tree | {pid for pid, parent in parents.items() if parent in tree}
        changed, tree = grown != tree, grown
    total = 0
    for pid in tree:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith(f"{field}:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def source_file(work: Path, base: np.ndarray, rows: int) -> Path:
    """``<work>/rows-<rows>.parquet``, written from ``base`` (and its noise-perturbed copies) when missing."""
    source = work / f"rows-{rows}.parquet"
    if not source.exists():
        started = time.perf_counter()
        write_parquet(source, base, rows)
        print(f"wrote {source} ({source.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - started:.0f} s", flush=True)
    return source


def run_sampled(command: list[str], **popen: Any) -> tuple[float, int, int]:
    """Run ``command`` as a child process; (wall seconds, peak RSS, peak PSS of its whole process tree), the
    tree sampled every 0.2 s. Exits with the child's failure."""
    started = time.perf_counter()
    child = subprocess.Popen(command, **popen)
    peak_rss = peak_pss = 0
    while child.poll() is None:
        peak_rss, peak_pss = max(peak_rss, tree_rss(child.pid)), max(peak_pss, tree_rss(child.pid, "Pss"))
        time.sleep(0.2)
    if child.returncode:
        raise SystemExit(f"{' '.join(command[1:4])} failed with exit code {child.returncode}")
    return time.perf_counter() - started, peak_rss, peak_pss


def stream_arguments(doc: str | None) -> argparse.ArgumentParser:
    """The options both streaming benchmarks take: rows, method, budget, engine, work and results folders."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--method", default="csr")
    parser.add_argument("--k", type=int, default=32, help="budget the codes are written or scored at")
    parser.add_argument("--engine", choices=["local", "ray"], default="local")
    parser.add_argument("--work", type=Path, default=Path("/tmp/adaptemb-stream"))
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    return parser


def stream_source(args: argparse.Namespace) -> tuple[np.ndarray, Path]:
    """The 768-d stand-in rows and the parquet file of ``args.rows`` rows made from them in ``args.work``."""
    args.work.mkdir(parents=True, exist_ok=True)
    base = definitions_768()
    return base, source_file(args.work, base, args.rows)


def main() -> None:
    parser = stream_arguments(__doc__)
    parser.add_argument("--check-rows", type=int, default=20_000)
    args = parser.parse_args()

    base, source = stream_source(args)
    model = args.work / f"{args.method}.safetensors"
    if not model.exists():  # one model per work folder: both engines' shards can then be compared file by file
        fit_rows = base[np.random.default_rng(0).choice(len(base), 5_000, replace=False)]
        adaptemb.fit(fit_rows, args.method).save(model)
    out = args.work / f"codes-{args.engine}"
    shutil.rmtree(out, ignore_errors=True)

    load_before = os.getloadavg()
    command = [sys.executable, "-m", "adaptemb", "encode", "-i", str(source), "--compressor", str(model),
               "-o", str(out), "--k", str(args.k), "--engine", args.engine]
    seconds, peak_tree, peak_tree_pss = run_sampled(command)
    peak_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024

    compressor = adaptemb.load(model)
    codes = adaptemb.read_code_shards(out)
    identical = True
    for start in (0, max(args.rows - args.check_rows, 0)):
        stop = min(start + args.check_rows, args.rows)
        expected = compressor.encode(read_rows(source, start, stop), k=args.k).to_arrays()
        got = codes[start:stop].to_arrays()
        identical &= all(np.array_equal(expected[name], got[name]) for name in expected)
    append_record(args.out / "streaming_encode.json", {
        "engine": args.engine, "compressor_sha256": hashlib.sha256(model.read_bytes()).hexdigest(),
        "peak_tree_rss_bytes": peak_tree, "peak_tree_pss_bytes": peak_tree_pss, "method": args.method, "k": args.k, "rows": args.rows, "dim": int(base.shape[1]),
        "input_bytes": source.stat().st_size, "codes_bytes": sum(p.stat().st_size for p in out.iterdir()),
        "seconds": round(seconds, 1), "rows_per_second": round(args.rows / seconds),
        "peak_rss_bytes": peak_rss, "identical_to_in_memory_encode_on_rows": 2 * args.check_rows if identical else 0,
        "identical": bool(identical), "load_before": load_before, "load_after": os.getloadavg(),
        "machine": machine_info(),
    })


if __name__ == "__main__":
    main()
