"""Fit time of the learned sparse methods (csr, bsa) with their defaults, quiet and beside a CPU-bound process.

Usage::

    python benchmarks/fit_speed.py [--methods csr,bsa] [--data 768,384] [--conditions quiet,busy-auto,busy-fixed]
                                   [--out benchmarks/results]

Data (real text embeddings, see ``standin768.py``):

* ``768``: 5,000 rows of the 768-d stand-in (40,000 WordNet definitions, MiniLM layers 3 + 6), seeded sample;
* ``384``: 50,000 rows of 384-d all-MiniLM-L6-v2 embeddings: the last-layer half of those 40,000 definitions
  (re-normalised: exactly the model's sentence embedding) plus the 5,000 example-sentence and 5,000 lemma
  queries of the built-in ``wordnet-examples`` / ``wordnet-lemmas`` datasets.

Conditions: ``quiet`` (nothing else running); ``busy-auto`` (a second process spins one core for the whole fit;
adaptemb picks its threads as it does by default, see ``adaptemb.threads``); ``busy-fixed`` (the same, with the
thread count forced to every core, torch's own default). Each record holds the wall and process-CPU seconds,
the threads and matmul precision the fit used, epochs and batch size, the fit report's quality numbers, and the
machine (``adaptemb.evaluate.machine``) with its load average before and after. Results are appended to
``<out>/fit_speed.json``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

import adaptemb
from adaptemb.datasets import load_dataset
from adaptemb.evaluate.machine import machine_info
from adaptemb.threads import physical_cores

sys.path.insert(0, str(Path(__file__).parent))
from records import append_record  # sibling benchmark modules (benchmarks/ is on sys.path)
from standin768 import definitions_768


def rows_768(n: int = 5000, seed: int = 0) -> np.ndarray:
    data = definitions_768()
    return np.ascontiguousarray(data[np.random.default_rng(seed).permutation(len(data))[:n]])


def rows_384(n: int = 50_000) -> np.ndarray:
    last_layer = definitions_768()[:, 384:]
    last_layer = last_layer / np.linalg.norm(last_layer, axis=1, keepdims=True)
    extra = [load_dataset(name, progress=False).queries for name in ("wordnet-examples", "wordnet-lemmas")]
    rows = np.concatenate([last_layer, *extra]).astype(np.float32)
    if len(rows) < n:
        raise SystemExit(f"only {len(rows)} rows of 384-d data available; asked for {n}")
    return np.ascontiguousarray(rows[np.random.default_rng(0).permutation(len(rows))[:n]])


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def fit_once(method: str, x: np.ndarray, condition: str) -> dict[str, object]:
    spinner = None
    if condition.startswith("busy"):
        spinner = multiprocessing.Process(target=_spin, args=(3600.0,), daemon=True)
        spinner.start()
        time.sleep(2.0)  # let the spinner get going before the fit samples the machine
    adaptemb.set_threads(physical_cores() if condition == "busy-fixed" else None)
    before = machine_info()
    started, cpu_started = time.perf_counter(), time.process_time()
    try:
        compressor = adaptemb.fit(x, method=method, seed=0, progress=False)
    finally:
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
        adaptemb.set_threads(None)
        if spinner is not None:
            spinner.terminate()
            spinner.join()
    report = compressor.fit_report or {}
    extra = report.get("extra", {})
    quality = {key: report[key] for key in ("reconstruction_cosine_distance", "dead_fraction", "active_mean",
                                             "batch_size", "max_epochs") if key in report}
    if extra:
        quality.update({"dead_fraction": extra.get("dead_fraction"),
                        "recon_k_after": extra.get("losses_after", {}).get("recon_k")})
    return {
        "method": method, "rows": len(x), "dim": x.shape[1], "condition": condition,
        "fit_seconds": round(seconds, 1), "process_cpu_seconds": round(cpu_seconds, 1),
        "threads": report.get("threads"), "precision": report.get("precision"),
        "epochs_run": report.get("epochs"), "steps": report.get("steps"), **quality,
        "load_average_before": before["load_average"], "load_average_after": [round(v, 2) for v in os.getloadavg()],
        "machine": before,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", default="csr,bsa")
    parser.add_argument("--data", default="768,384", help="768 (5,000 rows) and/or 384 (50,000 rows)")
    parser.add_argument("--conditions", default="quiet,busy-auto,busy-fixed")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # one-time imports, not a fit cost
    for data in args.data.split(","):
        x = rows_768() if data == "768" else rows_384()
        for method in args.methods.split(","):
            for condition in args.conditions.split(","):
                append_record(args.out / "fit_speed.json", fit_once(method, x, condition))


if __name__ == "__main__":
    main()
