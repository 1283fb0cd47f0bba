"""BSA against its issue's bar, by amount of fit data: held-out reconstruction, natural count, dead features.

Usage::

    python benchmarks/bsa_bar.py --data wordnet-384 --rows 5000,15000,29663
    python benchmarks/bsa_bar.py --data wordnet-768 --rows 5000,15000 -p code_dropout=0 -p epochs=20

BSA is fitted with its defaults except ``h = 8 d``, ``k = 64`` (the bar's setting) and any ``-p NAME=VALUE``
overrides, on the first ``n`` rows of a seeded permutation; the last 3,000 rows of that permutation are
never fitted on and are where reconstruction and the natural count are measured. Dead features are
those that never fire (natural mode) on the fit rows, as the fit report counts them.

Data:

* ``wordnet-384``: the built-in ``wordnet-examples`` corpus (32,663 WordNet glosses, all-MiniLM-L6-v2).
* ``wordnet-768``: a 768-d real-text stand-in (no 768-d text model is installable offline): the mean-pooled
  hidden states of layers 3 and 6 of the bundled all-MiniLM-L6-v2, each L2-normalised, concatenated, for
  40,000 distinct WordNet definitions; built once (~15 min on 2 cores) and cached next to the built-in
  datasets.
* a ``.npy`` path: any (n, d) float32 embeddings.

Results go to ``<out>/bsa_bar_<data>.json`` (one record per run appended, with the machine).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

import adaptemb
from adaptemb.datasets import load_dataset
from adaptemb.evaluate.machine import machine_info

sys.path.insert(0, str(Path(__file__).parent))
from arguments import integers  # sibling benchmark modules (benchmarks/ is on sys.path)
from records import append_record
from standin768 import definitions_768

HELD_OUT = 3000


def load_rows(name: str) -> np.ndarray:
    if name == "wordnet-384":
        return np.asarray(load_dataset("wordnet-examples").corpus, dtype=np.float32)
    if name == "wordnet-768":
        return definitions_768()
    return np.load(name).astype(np.float32, copy=False)


@torch.no_grad()
def held_out_measures(compressor: adaptemb.Compressor, held: np.ndarray) -> dict[str, float]:
    """Natural-mode reconstruction cosine distance and active count on rows the fit never saw."""
    codes = compressor.encode(held)
    reconstruction = torch.as_tensor(np.asarray(compressor.decode(codes), dtype=np.float32))
    distance = adaptemb.cosine_distance(reconstruction, torch.from_numpy(held))
    counts = codes.active_counts()
    return {"reconstruction_cosine_distance": round(float(distance), 4),
            "active_mean": round(float(counts.mean()), 2), "active_std": round(float(counts.std()), 2)}


def run(rows: np.ndarray, n: int, overrides: dict[str, object], seed: int) -> dict[str, object]:
    order = np.random.default_rng(seed).permutation(len(rows))
    if n + HELD_OUT > len(rows):
        raise SystemExit(f"{n} fit rows + {HELD_OUT} held-out rows > {len(rows)} rows in the data")
    fit, held = rows[order[:n]], rows[order[-HELD_OUT:]]
    d = rows.shape[1]
    started = time.perf_counter()
    compressor = adaptemb.fit(fit, method="bsa", h=8 * d, k=64, seed=seed, progress=False, **overrides)
    seconds = time.perf_counter() - started
    report = compressor.fit_report
    return {"fit_rows": n, "dim": d, "h": 8 * d, "k": 64, "seed": seed, "overrides": overrides,
            "fit_seconds": round(seconds, 1), "epochs_run": report["epochs"],
            "dead_fraction": round(report["dead_fraction"], 5), **held_out_measures(compressor, held)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="wordnet-384", help="wordnet-384, wordnet-768 or an (n, d) .npy path")
    parser.add_argument("--rows", type=integers, default="5000,15000", help="comma-separated fit sizes")
    parser.add_argument("-p", "--param", action="append", default=[], help="BSA config override NAME=VALUE (value read as JSON when it parses)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    rows = load_rows(args.data)
    overrides = adaptemb.parse_params(args.param)
    if {"h", "k"} & overrides.keys():
        raise SystemExit("h and k are fixed by the bar (h = 8 d, k = 64); -p overrides any other BSA parameter")
    label = Path(args.data).stem if args.data.endswith(".npy") else args.data
    for n in args.rows:
        machine = machine_info()
        record = {**run(rows, n, overrides, args.seed), "data": label, "machine": machine}
        append_record(args.out / f"bsa_bar_{label}.json", record)


if __name__ == "__main__":
    main()
