"""The rotation before sign bits at large projection ranks: quality of random, Hadamard and ITQ, and their cost.

Usage::

    python benchmarks/large_rank_rotation.py quality [--data default | wordnet-examples-768] [--bytes 24,48,64,96]
                                                     [--seeds 3] [--out benchmarks/results/large_rank_rotation_DATA.json]
    python benchmarks/large_rank_rotation.py cost [--dim 3072] [--rows 20000]
                                                  [--out benchmarks/results/large_rank_rotation_cost.json]

``quality``: for each seed, ``adaptemb.fit(C, "svd+binary", rotation=R, byte_budgets=--bytes, seed=s)`` with R =
``random`` (a dense Haar matrix), ``hadamard`` (``HadamardRotation``) and ``itq``; ``encode(C, bytes=B)``,
``index(codes).search(Q, 10)`` with raw float queries; NDCG@10 per seed and budget and the paired differences
hadamard - random and itq - random (the evidence for ``rotation="auto"``'s ``ITQ_MAX_RANK``).

``cost`` (no quality: there is no real embedding this wide offline): on Gaussian rows of ``--dim`` dims with a
decaying spectrum, per rank, the seconds to draw the dense random matrix (QR), one ITQ round on ``ITQ_SAMPLE_ROWS``
rows (a full ITQ runs up to ``itq_iterations`` = 50 rounds; the total is that multiple, not run), the rotation's
bytes in the file (dense r^2 float32 against Hadamard's rounds x r int8) and rotate time per 1,000 rows; then the
default ``svd+binary`` fit (``rotation="auto"``: ITQ up to ``ITQ_MAX_RANK``, Hadamard above) on ``--rows`` rows:
wall seconds and file size, beside ``rotation="random"``'s file size. With the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import adaptemb
from adaptemb import ITQ_MAX_RANK, ITQ_SAMPLE_ROWS, hadamard_rotation, itq_rotation, random_rotation
from adaptemb.evaluate.machine import machine_info

sys.path.insert(0, str(Path(__file__).parent))
from arguments import integers
from compose_frontier import dataset
from itq_default import rotation_rows
from records import data_fields, write_record

KINDS = ("random", "hadamard", "itq")


def quality(args: argparse.Namespace) -> None:
    data = dataset(args.data, args.docs, 0)
    load_before = list(os.getloadavg())
    rows = []
    for seed in range(args.seeds):
        for kind in KINDS:
            rows.append(rotation_rows(data, "svd+binary", kind, args.bytes, seed))
            print(rows[-1], flush=True)
    summary = {}
    for budget in map(str, args.bytes):
        by_kind = {kind: np.array([r["ndcg_at_10"][budget] for r in rows if r["rotation"] == kind]) for kind in KINDS}
        summary[budget] = {
            "rank": 8 * int(budget),
            **{f"{kind}_mean": float(values.mean()) for kind, values in by_kind.items()},
            **{f"{kind}_minus_random": [float(d) for d in by_kind[kind] - by_kind["random"]] for kind in KINDS[1:]},
            **{f"{kind}_minus_random_mean": float((by_kind[kind] - by_kind["random"]).mean()) for kind in KINDS[1:]},
        }
        print(budget, summary[budget], flush=True)
    name = data.name if args.data == "default" else f"{args.data}-{args.docs}"
    record = {**data_fields("large_rank_rotation", data), "dataset": name, "bytes": args.bytes, "seeds": args.seeds,
              "rows": rows, "summary": summary, "load_before": load_before, "load_after": list(os.getloadavg()),
              "machine": machine_info()}
    write_record(args.out or Path(__file__).parent / "results" / f"large_rank_rotation_{args.data}.json", record)


def decaying_rows(rows: int, dim: int, seed: int = 0) -> np.ndarray:
    """Gaussian rows whose per-dimension scale falls from 3 to 0.1, rotated so no axis is special."""
    rng = np.random.default_rng(seed)
    scaled = rng.standard_normal((rows, dim)).astype(np.float32) * np.linspace(3.0, 0.1, dim, dtype=np.float32)
    return scaled @ random_rotation(dim, seed).astype(np.float32)


def seconds(step: Any, repeats: int = 1) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - start) / repeats


def rank_costs(rows: np.ndarray, rank: int) -> dict[str, Any]:
    """Costs of each rotation at ``rank`` on the first ``rank`` coordinates of ``rows``."""
    sample = torch.from_numpy(np.ascontiguousarray(rows[:ITQ_SAMPLE_ROWS, :rank]))
    centred = (sample - sample.mean(dim=0)).numpy()
    dense_s = seconds(lambda: random_rotation(rank, 0))
    start = random_rotation(rank, 0)
    itq_round_s = seconds(lambda: itq_rotation(centred, start, 1), repeats=2)
    hadamard = hadamard_rotation(rank, 0, torch.zeros(rank))
    dense = torch.from_numpy(start).float()
    block = sample[:10_000]
    hadamard.rotate(block)
    out = {
        "rank": rank,
        "random_matrix_s": round(dense_s, 3),
        "itq_round_s": round(itq_round_s, 3),
        "itq_50_rounds_s_extrapolated": round(50 * itq_round_s, 1),
        "dense_bytes": 4 * rank * rank,
        "hadamard_bytes": hadamard.signs.numel(),
        "rotate_ms_per_1000_dense": round(1e6 * seconds(lambda: block @ dense, repeats=3) / len(block), 2),
        "rotate_ms_per_1000_hadamard": round(1e6 * seconds(lambda: hadamard.rotate(block), repeats=3) / len(block), 2),
    }
    print(out, flush=True)
    return out


def fitted_file(rows: np.ndarray, **params: Any) -> dict[str, Any]:
    start = time.perf_counter()
    fitted = adaptemb.fit(rows, "svd+binary", **params)
    fit_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as folder:
        size = fitted.save(Path(folder) / "c.safetensors").stat().st_size
    out = {"params": params, "fit_s": round(fit_s, 1), "file_bytes": size, "ranks": fitted.fit_report["ranks"],
           "rotations": {str(r): k for r, k in fitted.fit_report["rotations"].items()}}
    print(out, flush=True)
    return out


def cost(args: argparse.Namespace) -> None:
    load_before = list(os.getloadavg())
    rows = decaying_rows(args.rows, args.dim)
    ranks = [r for r in (256, 512, 768, 1024, 1536, 2048, 3072) if r <= args.dim]
    record = {"benchmark": "large_rank_rotation_cost", "dim": args.dim, "rows": args.rows,
              "itq_max_rank": ITQ_MAX_RANK, "itq_sample_rows": ITQ_SAMPLE_ROWS,
              "per_rank": [rank_costs(rows, rank) for rank in ranks],
              "default_fit": fitted_file(rows), "random_fit": fitted_file(rows, rotation="random"),
              "load_before": load_before, "load_after": list(os.getloadavg()), "machine": machine_info()}
    write_record(args.out or Path(__file__).parent / "results" / "large_rank_rotation_cost.json", record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    measure = commands.add_parser("quality")
    measure.add_argument("--data", default="default", help="default, or wordnet-examples-768 (the 768-d stand-in)")
    measure.add_argument("--docs", type=int, default=5000, help="documents of the 768-d subset")
    measure.add_argument("--bytes", type=integers, default="24,48,64,96", help="byte budgets per vector")
    measure.add_argument("--seeds", type=int, default=3)
    measure.add_argument("--out", type=Path, default=None)
    timing = commands.add_parser("cost")
    timing.add_argument("--dim", type=int, default=3072)
    timing.add_argument("--rows", type=int, default=20_000)
    timing.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    quality(args) if args.command == "quality" else cost(args)


if __name__ == "__main__":
    main()
