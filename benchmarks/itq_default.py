"""ITQ against the random rotation before sign bits, over seeds: the measurement behind ``rotation="auto"`` = ITQ.

Usage::

    python benchmarks/itq_default.py [--data default | wordnet-examples-768] [--docs 5000] [--bytes 16,32]
                                     [--seeds 5] [--method svd+binary | cllr+binary]
                                     [--out benchmarks/results/itq_default_DATA[_METHOD].json]

For each seed s: ``adaptemb.fit(C, METHOD, rotation=R, byte_budgets=--bytes, seed=s)`` (cllr+binary: without
pairs, ``rank=d``) with R = ``random``
and ``auto`` (ITQ from the seed's random rotation), ``encode(C, bytes=B)``, ``index(codes).search(Q, 10)`` with
raw float queries: NDCG@10 per seed and budget, the paired difference ITQ - random, and the fit seconds; beside
them faiss' ``PCAR{8B},SQtqmse1`` and ``PCA{8B-64},RaBitQ`` (issue 29's bar) once, and the machine with its load.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import adaptemb

sys.path.insert(0, str(Path(__file__).parent))
from arguments import sweep_parser
from compose_frontier import budget_searches, dataset, faiss_row, faiss_specs
from records import write_sweep_record

ROTATIONS = ("random", "auto")


def rotation_rows(data: Any, method: str, rotation: str, budgets: list[int], seed: int) -> dict[str, Any]:
    """NDCG@10 at each budget of ``method`` fitted with ``rotation`` and ``seed``, and the fit seconds."""
    extra = {"projection": {"rank": data.dim, "progress": False}} if method.startswith("cllr") else {}
    start = time.perf_counter()
    compressor = adaptemb.fit(data.corpus, method=method, rotation=rotation, byte_budgets=budgets, seed=seed, **extra)
    fit_s = time.perf_counter() - start
    ndcg = {str(budget): float(per_query.mean()) for budget, _, per_query in budget_searches(compressor, data, budgets)}
    return {"rotation": compressor.fit_report["rotation"], "seed": seed, "fit_s": round(fit_s, 2), "ndcg_at_10": ndcg}


def summary(rows: list[dict[str, Any]], budgets: list[int]) -> dict[str, Any]:
    """Per budget: mean and std of each rotation over seeds, and the paired ITQ - random differences."""
    out: dict[str, Any] = {}
    for budget in budgets:
        key = str(budget)
        by_kind = {kind: [r["ndcg_at_10"][key] for r in rows if r["rotation"] == kind] for kind in ("random", "itq")}
        diffs = np.array(by_kind["itq"]) - np.array(by_kind["random"])
        out[key] = {**{f"{kind}_mean": float(np.mean(v)) for kind, v in by_kind.items()},
                    **{f"{kind}_std": float(np.std(v)) for kind, v in by_kind.items()},
                    "itq_minus_random": [float(d) for d in diffs], "itq_minus_random_mean": float(diffs.mean()),
                    "itq_wins": int((diffs > 0).sum())}
    return out


def main() -> None:
    args = sweep_parser(__doc__.split("\n\n")[0], bytes_default="16,32", seeds=5).parse_args()
    data = dataset(args.data, args.docs, 0)
    load_before = list(os.getloadavg())
    faiss_rows = []
    for budget in args.bytes:
        for spec in faiss_specs(budget, data.dim):
            if "SQtqmse2" not in spec:
                row = faiss_row(spec, data)
                faiss_rows.append({"budget": budget, "label": row["label"], "ndcg_at_10": float(row["per_query"].mean())})
                print(faiss_rows[-1], flush=True)
    rows = []
    for seed in range(args.seeds):
        for rotation in ROTATIONS:
            rows.append(rotation_rows(data, args.method, rotation, args.bytes, seed))
            print(rows[-1], flush=True)
    write_sweep_record("itq_default", data, args, rows, summary(rows, args.bytes), load_before, faiss=faiss_rows)


if __name__ == "__main__":
    main()
