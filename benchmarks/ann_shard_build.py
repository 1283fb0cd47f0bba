"""Building an approximate index from encode's code shards: memory, time, resume, beside the in-memory build.

Encodes the first ``--rows`` rows of a float32 ``.npy`` with a saved compressor into code shards
(``adaptemb.encode_files``; kept in ``--work`` for reruns), then in a fresh child process each:

* ``adaptemb.build_index_from_shards``: its seconds and its peak resident memory (``VmHWM``) above the process's
  memory once the library and the compressor are loaded, against the codes' bytes plus the centroids' (the bar:
  at most 1.2 x that); then the same build killed (SIGKILL) once its rows are half written and run again: the
  seconds the rerun takes and whether the file is byte for byte the uninterrupted one;
* the same build run a second time in one process, its peak reset (``/proc/self/clear_refs``) before it: the
  build's own memory, without the libraries' one-time costs that the first build pays (pyarrow's readers and
  allocator, numba's compiler and the compiled scan kernels, torch's and faiss' workspaces);
* the in-memory build, ``compressor.index(read_code_shards(...), ann=...)``: seconds and peak memory alike.

``sample_bytes`` is the k-means sample as mapped to the routing space (``AnnConfig.sample`` rows x routing dims x
4 bytes): a fixed part of the peak in records before ``train_centroids`` read the sample a part at a time (the
build now holds the sample as codes); ``--cells`` / ``--routing-dims`` fix the settings so that two sizes differ
in their rows alone (the slope of the peak per row; ``docs/guide.md``, "Building from encoded shards").

    python benchmarks/ann_shard_build.py --vectors /data/debian-corpus/static-256.npy \\
        --compressor /tmp/ann-bench-cache/static-256_csr_100000.safetensors --bytes 16 --rows 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from records import write_record

import adaptemb
from adaptemb.evaluate.machine import machine_info

RESULTS = Path(__file__).parent / "results"
CHILD = """
import json, sys, time
import numpy as np
import adaptemb

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

mode, shards, compressor, out, ann = sys.argv[1:6]
ann = json.loads(ann)
model = adaptemb.load(compressor)
adaptemb.index_build  # the library loaded
if mode == "warm":  # the same build first (libraries' lazy parts, compiled kernels), then the peak reset
    adaptemb.build_index_from_shards(shards, model, out + ".first", ann=ann)
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
base = status("VmRSS")
start = time.perf_counter()
if mode in ("shards", "warm"):
    adaptemb.build_index_from_shards(shards, model, out, ann=ann)
else:
    index = model.index(adaptemb.read_code_shards(shards), ann=ann)
    index.save(out)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "base_rss": base, "peak_rss": status("VmHWM")}))
"""


def child(mode: str, shards: Path, compressor: Path, out: Path, ann: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, mode, str(shards), str(compressor), str(out), json.dumps(ann)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def killed_then_resumed(shards: Path, compressor: Path, out: Path, whole: Path, ann: dict) -> dict:
    """Kill a build once half its shards are written, run it again; the rerun's seconds and whether it is equal."""
    work = Path(f"{out}.building")
    total = len(adaptemb.streaming.read_manifest(shards).shards)
    process = subprocess.Popen([sys.executable, "-c", CHILD, "shards", str(shards), str(compressor), str(out),
                                json.dumps(ann)],
                               stdout=subprocess.DEVNULL)
    filled = work / "filled.json"
    while process.poll() is None and not (filled.is_file() and len(json.loads(filled.read_text() or "[]")) >= total // 2):
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed = process.returncode == -signal.SIGKILL
    rerun = child("shards", shards, compressor, out, ann)
    same = out.read_bytes() == whole.read_bytes()
    return {"killed_mid_fill": killed, "rerun_s": round(rerun["seconds"], 1), "same_bytes": same}


def encoded_shards(args: argparse.Namespace, rows: int) -> Path:
    """The code shards of the first ``rows`` rows (encoded once; kept in ``--work``)."""
    rows_file = args.work / f"rows_{rows}.npy"
    if not rows_file.is_file():
        import numpy as np

        np.save(rows_file, np.load(args.vectors, mmap_mode="r")[:rows])
    shards = args.work / f"codes_{rows}"
    adaptemb.encode_files(rows_file, args.compressor, shards, bytes=args.bytes, shard_rows=args.shard_rows, progress=False)
    return shards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vectors", type=Path, required=True)
    parser.add_argument("--compressor", type=Path, required=True)
    parser.add_argument("--bytes", type=float, required=True)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--shard-rows", type=int, default=65_536)
    parser.add_argument("--work", type=Path, default=Path("ann-shard-build"))
    parser.add_argument("--cells", type=int, help="fixed cells (default: auto), e.g. to compare sizes at one setting")
    parser.add_argument("--routing-dims", type=int, help="fixed routing dimensions (default: auto)")
    args = parser.parse_args()
    ann = {key: value for key, value in (("cells", args.cells), ("routing_dims", args.routing_dims)) if value}
    load_before = list(os.getloadavg())
    args.work.mkdir(parents=True, exist_ok=True)
    shards = encoded_shards(args, args.rows)
    second = child("warm", shards, args.compressor, args.work / "second.safetensors", ann)
    codes = adaptemb.read_code_shards(shards)
    code_bytes = codes.row_nbytes
    del codes
    streamed = child("shards", shards, args.compressor, args.work / "streamed.safetensors", ann)
    index = adaptemb.load_index(args.work / "streamed.safetensors")
    routing_bytes = index.router.nbytes
    resumed = killed_then_resumed(shards, args.compressor, args.work / "resumed.safetensors",
                                  args.work / "streamed.safetensors", ann)
    in_memory = child("memory", shards, args.compressor, args.work / "memory.safetensors", ann)
    bound = code_bytes + routing_bytes
    record = {
        "benchmark": "ann_shard_build", "rows": args.rows, "shard_rows": args.shard_rows, "bytes": args.bytes,
        "compressor": args.compressor.name, "code_bytes": code_bytes, "centroid_and_basis_bytes": routing_bytes,
        "cells": index.cells, "routing_dims": index.router.dims, "ann": ann,
        "sample_bytes": index.config.resolved(args.rows, 1).sample * index.router.dims * 4,
        "from_shards": {"seconds": round(streamed["seconds"], 1), "peak_extra_bytes": streamed["peak_rss"] - streamed["base_rss"],
                        "peak_over_codes_plus_centroids": round((streamed["peak_rss"] - streamed["base_rss"]) / bound, 3)},
        "from_shards_second_build": {"peak_extra_bytes": second["peak_rss"] - second["base_rss"],
                                     "peak_over_codes_plus_centroids": round((second["peak_rss"] - second["base_rss"]) / bound, 3)},
        "killed_and_resumed": resumed,
        "in_memory": {"seconds": round(in_memory["seconds"], 1), "peak_extra_bytes": in_memory["peak_rss"] - in_memory["base_rss"],
                      "peak_over_codes_plus_centroids": round((in_memory["peak_rss"] - in_memory["base_rss"]) / bound, 3)},
        "load_before": load_before, "load_after": list(os.getloadavg()), "machine": machine_info(),
    }
    fixed = "".join(f"_{key}{value}" for key, value in ann.items())
    write_record(RESULTS / f"ann_shard_build_{args.compressor.stem}_{args.rows}{fixed}.json", record)


if __name__ == "__main__":
    main()
