"""opq's fit time and NDCG@10 per byte budget: the training before and after sampling the rotation's rows.

Usage::

    python benchmarks/opq_fit_speed.py [--data default] [--bytes 16,32,64,128] [--seeds 0,1,2]
                                       [--variant NAME=JSON ...] [--docs 10000]
                                       [--out benchmarks/results/opq_fit_speed.json]

Each variant is a set of ``opq`` parameters; ``before`` (the training before this benchmark: the rotation on
every row, 40 k-means iterations in its first alternation) and ``defaults`` (opq's current defaults) always
run, ``--variant`` adds others (e.g. ``--variant 'rows24={"opq_rows_per_centroid": 24}'``); a variant with the
config of another runs once (``same_config`` in the record says which). Every variant runs
``run_bench`` (what ``adaptemb bench`` runs) with ``opq`` at ``--bytes`` for each seed, so each row's NDCG@10 and
fit seconds are the bench's own. Seeds matter: k-means from another seed moves opq's NDCG@10 by up to about
0.006 at 16 B on the default data, so the record compares means over ``--seeds``.

Data: a built-in dataset name or file (``--data``), or ``wordnet-examples-768`` (``standin768.py``'s 768-d
stand-in; a seeded subset of ``--docs`` documents and 1,000 queries, as ``faiss_parity.py`` takes it).

The record (appended to ``--out``) holds per variant, seed and budget the NDCG@10 and fit seconds, the
process CPU seconds of each run, the load average before and after it, the resolved opq config and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import adaptemb
from adaptemb.datasets import Dataset, load_dataset
from adaptemb.evaluate.machine import machine_info
from adaptemb.evaluate.runner import BenchConfig, run_bench

sys.path.insert(0, str(Path(__file__).parent))
from arguments import integers  # sibling benchmark modules (benchmarks/ is on sys.path)
from records import append_record

BEFORE = {"opq_rows_per_centroid": None, "opq_first_pq_iterations": 40, "train_iterations": 4, "budget_start_iterations": None}
"""opq's training before this benchmark's change: the rotation on every row (8,000 here; faiss' own cap is
65,536), faiss' 40 first-alternation k-means iterations, the final codebooks left at faiss' OPQ loop's 4, and every
budget's rotation trained from a random start (the bench's refits now start from the first fit's, ``budget_start``)."""


FIT_REPORT = ("threads", "rotation_train_rows", "rotation_s", "codebooks_s", "rotation_start")
"""What each row keeps of opq's fit report: faiss threads, rows the rotation trained on, seconds of each phase."""


def dataset(name: str, docs: int, seed: int) -> Dataset:
    if name == "wordnet-examples-768":
        from faiss_parity import subset
        from standin768 import wordnet_examples_768

        return subset(wordnet_examples_768(), docs, 1000, seed)
    return load_dataset(name)


def run_variant(data: Dataset, params: dict[str, Any], budgets: list[int], seed: int) -> dict[str, Any]:
    """One ``run_bench`` of opq at ``budgets`` with ``params``: per budget NDCG@10 and fit seconds."""
    load_before = os.getloadavg()
    cpu, wall = time.process_time(), time.perf_counter()
    result = run_bench(data, BenchConfig(methods=["opq"], bytes=budgets, seed=seed, device="cpu", rounds=1, warmup=0,
                                         fit_progress=False, method_params={"opq": params}))
    rows = [r for r in result.rows if r["method"] == "opq"]
    return {
        "seed": seed,
        "rows": [{"k": r["k"], "bytes_per_vector": r["bytes_per_vector"], "ndcg_at_10": r["ndcg_at_10"],
                  "recall_at_10": r["recall_at_10"], "fit_s": r["fit_s"],
                  **{key: (r["fit_report"] or {}).get(key) for key in FIT_REPORT}} for r in rows],
        "fit_s_total": sum(r["fit_s"] for r in rows),
        "run_cpu_s": time.process_time() - cpu,
        "run_wall_s": time.perf_counter() - wall,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def summarise(variants: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per variant and budget: mean and spread of NDCG@10 over the seeds, mean fit seconds, and the change of the
    mean against ``before``."""
    out: dict[str, Any] = {}
    for name, runs in variants.items():
        per_k: dict[int, dict[str, list[float]]] = {}
        for run in runs:
            for row in run["rows"]:
                slot = per_k.setdefault(row["k"], {"ndcg": [], "fit_s": []})
                slot["ndcg"].append(row["ndcg_at_10"])
                slot["fit_s"].append(row["fit_s"])
        out[name] = {str(k): {"ndcg_mean": float(np.mean(v["ndcg"])), "ndcg_min": min(v["ndcg"]), "ndcg_max": max(v["ndcg"]),
                              "fit_s_mean": float(np.mean(v["fit_s"]))} for k, v in sorted(per_k.items())}
        out[name]["fit_s_total_mean"] = float(np.mean([run["fit_s_total"] for run in runs]))
    if "before" in out:
        for name, summary in out.items():
            for k, cell in summary.items():
                if isinstance(cell, dict) and k in out["before"]:
                    cell["ndcg_change_vs_before"] = cell["ndcg_mean"] - out["before"][k]["ndcg_mean"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="default")
    parser.add_argument("--bytes", type=integers, default="16,32,64,128")
    parser.add_argument("--seeds", type=integers, default="0,1,2")
    parser.add_argument("--docs", type=int, default=10_000, help="documents of the 768-d subset")
    parser.add_argument("--variant", action="append", default=[], help="NAME=JSON opq parameters (repeatable)")
    parser.add_argument("--skip-before", action="store_true", help="leave out the 'before' variant")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "opq_fit_speed.json")
    args = parser.parse_args()
    budgets, seeds = args.bytes, args.seeds
    plan: dict[str, dict[str, Any]] = {} if args.skip_before else {"before": dict(BEFORE)}
    for item in args.variant:
        name, _, params = item.partition("=")
        plan[name] = json.loads(params)
    plan["defaults"] = {}
    resolved: dict[str, dict[str, Any]] = {}
    same: dict[str, str] = {}
    for name, params in list(plan.items()):  # a variant whose config another one already has runs once
        config = adaptemb.get_compressor("opq", **params).config.model_dump()
        if config in resolved.values():
            same[name] = next(n for n, c in resolved.items() if c == config)
            print(f"{name}: the same config as {same[name]}; runs once, as {same[name]}")
            del plan[name]
        else:
            resolved[name] = config
    data = dataset(args.data, args.docs, 0)
    print(f"{data.name}: {len(data.corpus):,} x {data.dim}, {len(data.queries):,} queries", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {}
    for seed in seeds:  # seeds outermost: every variant sees the machine at about the same time
        for name, params in plan.items():
            run = run_variant(data, params, budgets, seed)
            runs.setdefault(name, []).append(run)
            print(json.dumps({"variant": name, **{k: v for k, v in run.items() if k != "rows"},
                              "ndcg": [round(r["ndcg_at_10"], 4) for r in run["rows"]],
                              "fit_s": [round(r["fit_s"], 1) for r in run["rows"]]}), flush=True)
    append_record(args.out, {
        "benchmark": "opq_fit_speed", "dataset": data.name, "corpus": len(data.corpus), "dim": data.dim,
        "queries": len(data.queries), "bytes": budgets, "seeds": seeds, "variants": plan, "configs": resolved,
        "same_config": same, "summary": summarise(runs), "runs": runs, "machine": machine_info(),
    })


if __name__ == "__main__":
    main()
