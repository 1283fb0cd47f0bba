"""CSR fit time on random embeddings: 5k×768, 100k×768 and 1.28M×2048, on CPU and (when present) CUDA.

Usage::

    python benchmarks/csr_fit_time.py [--device cpu|cuda|auto] [--sizes 5000x768 100000x768 1280000x2048]
                                      [--cpu-budget 300] [--epochs N] [--max-rows N] [--append]
                                      [--out benchmarks/results]

Every run is the default ``adaptemb.fit(X, method="csr", k=32, seed=0)`` (h = 4·d) on unit-norm
Gaussian rows, progress off; the one-time torch import cost is paid before timing. On CPU a size
whose estimated fit time (measured seconds per row on the previous size, scaled by rows·d) exceeds
``--cpu-budget`` seconds is trained on a row subset instead and marked ``"capped"`` with the rows
used and the extrapolated full time. Results go to ``<out>/csr_fit_time_<device>.json`` with the
machine (CPU model, cores, load average, torch version, GPU name). ``process_cpu_seconds`` (CPU time
of this process) is reported next to wall time because a shared machine inflates the wall time;
with ``OMP_NUM_THREADS=1`` it is the single-core work of the fit.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

import adaptemb
from adaptemb.evaluate.machine import machine_info


def machine(device: str) -> dict[str, object]:
    """What the numbers were measured on: the library's machine description plus the fit device."""
    return {**machine_info(), "device": device}


def random_rows(n: int, d: int, seed: int = 0) -> np.ndarray:
    """Unit-norm Gaussian rows, generated in blocks (float32)."""
    rng = np.random.default_rng(seed)
    x = np.empty((n, d), dtype=np.float32)
    for start in range(0, n, 65536):
        block = rng.standard_normal((min(65536, n - start), d), dtype=np.float32)
        x[start : start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return x


def fit_once(n: int, d: int, device: str, epochs: int | None) -> dict[str, object]:
    x = random_rows(n, d)
    params: dict[str, object] = {"progress": False, "device": device}
    if epochs is not None:
        params["epochs"] = epochs
    started, cpu_started = time.perf_counter(), time.process_time()
    compressor = adaptemb.fit(x, method="csr", k=32, seed=0, **params)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    report = compressor.fit_report or {}
    return {
        "rows": n, "dim": d, "hidden": 4 * d, "fit_seconds": round(seconds, 2),
        "process_cpu_seconds": round(cpu_seconds, 2),
        "train_seconds": round(float(report.get("seconds", 0.0)), 2), "epochs": report.get("epochs"),
        "steps": report.get("steps"), "dead_fraction": report.get("extra", {}).get("dead_fraction"),
        "load_average_after": [round(v, 2) for v in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--sizes", nargs="+", default=["5000x768", "100000x768", "1280000x2048"])
    parser.add_argument("--cpu-budget", type=float, default=300.0, help="seconds one CPU fit may take")
    parser.add_argument("--epochs", type=int, default=None, help="override the default epochs")
    parser.add_argument("--max-rows", type=int, default=None, help="CPU: train on at most this many rows")
    parser.add_argument("--append", action="store_true", help="keep earlier results of other sizes in the file")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device
    device = "cpu" if device == "auto" else device
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # one-time torch._dynamo import, not a fit cost
    results, seconds_per_unit = [], None
    for size in args.sizes:
        n, d = (int(v) for v in size.lower().split("x"))
        rows = n
        if device == "cpu" and seconds_per_unit is not None:
            rows = min(n, max(5000, int(args.cpu_budget / (seconds_per_unit * d))))
        if device == "cpu" and args.max_rows is not None:
            rows = min(rows, args.max_rows)
        result = fit_once(rows, d, device, args.epochs)
        seconds_per_unit = float(result["fit_seconds"]) / (rows * d)
        if rows < n:
            result.update(capped=True, requested_rows=n,
                          extrapolated_fit_seconds=round(seconds_per_unit * n * d, 1))
        results.append(result)
        print(json.dumps(result), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"csr_fit_time_{device}.json"
    if args.append and path.exists():
        done = {(r.get("requested_rows", r["rows"]), r["dim"]) for r in results}
        earlier = json.loads(path.read_text())["results"]
        results = [r for r in earlier if (r.get("requested_rows", r["rows"]), r["dim"]) not in done] + results
    path.write_text(json.dumps({"machine": machine(device), "results": results}, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
