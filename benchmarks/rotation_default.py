"""Which rotation before sign bits is the default without a query sample (issue 46): none, random, ITQ, ITQ-20.

Usage::

    python benchmarks/rotation_default.py [--data default | wordnet-examples-768] [--docs 5000]
                                          [--bytes 8,16,24,32,48,64,96] [--seeds 3] [--sample 500]
                                          [--out benchmarks/results/rotation_default_DATA[_sampleN].json]

Each candidate is ``adaptemb.fit(C, "svd+binary", rotation=R, bits_per_dim=1, itq_iterations=I, byte_budgets=B,
seed=s)`` through the public path (``encode(C, bytes=B)``, ``index(codes).search(Q, 10)``, raw float queries),
evaluated with every query of the data set (real queries, none of which chose anything): ``none``; ``random`` at
seeds 0 .. --seeds-1 (their spread is the draw's noise); ``itq`` (50 iterations) and ``itq20`` (20), seed 0;
``itq-tail`` (the leading directions unrotated, ITQ-20 on the rest) at seeds 0 .. --seeds-1; and
the shipped default (``rotation="auto"``, ``bits_per_dim="auto"``) for reference. Per budget: each candidate's
NDCG@10, its paired difference from the best candidate with a 95% bootstrap interval over queries (2,000
resamples), and the fit's process CPU seconds (the machine is shared: CPU time, not wall time, compares fits).

``--sample N``: a seeded N of the queries become the fit's sample (never evaluated) and the others are evaluated;
the candidates are then none, random (seed 0), ITQ-20, itq-tail, the default (``rotation="auto"``, ``bits_per_dim="auto"``)
and the default fitted with ``queries=sample`` (each width's rotation and bits chosen by the sample).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import adaptemb
from adaptemb.datasets import Dataset

sys.path.insert(0, str(Path(__file__).parent))
from arguments import sweep_parser
from compose_frontier import budget_searches, dataset
from records import write_sweep_record

BOOTSTRAP = 2000


def candidates(seeds: int) -> list[tuple[str, dict[str, Any]]]:
    """(label, fit parameters) of every candidate."""
    one_bit = {"bits_per_dim": 1}
    rows = [("none", {"rotation": "none", **one_bit})]
    rows += [(f"random-s{seed}", {"rotation": "random", "seed": seed, **one_bit}) for seed in range(seeds)]
    rows += [("itq", {"rotation": "itq", **one_bit}), ("itq20", {"rotation": "itq", "itq_iterations": 20, **one_bit})]
    rows += [(f"itq-tail-s{seed}", {"rotation": "itq-tail", "seed": seed, **one_bit}) for seed in range(seeds)]
    rows += [("shipped-auto", {})]  # the default of the code that runs (ITQ-50 everywhere and the bits proxy before issue 46)
    return rows


def sample_candidates() -> list[tuple[str, dict[str, Any]]]:
    """The candidates of a run with a query sample (``queries`` stands for the sample)."""
    return [("none", {"rotation": "none", "bits_per_dim": 1}), ("random-s0", {"rotation": "random", "bits_per_dim": 1}),
            ("itq20", {"rotation": "itq", "itq_iterations": 20, "bits_per_dim": 1}),
            ("itq-tail", {"rotation": "itq-tail", "bits_per_dim": 1}), ("default", {}),
            ("default+queries", {"queries": "sample"})]


def split_queries(data: Any, count: int) -> tuple[Any, np.ndarray]:
    """The data set evaluated on all but a seeded ``count`` of its queries, and those queries (the sample)."""
    order = np.random.default_rng(46).permutation(len(data.queries))
    sample, kept = np.sort(order[:count]), np.sort(order[count:])
    evaluated = Dataset(f"{data.name}", data.corpus, np.ascontiguousarray(data.queries[kept]), data.qrels[kept],
                        description=f"{data.description}; {len(kept)} queries evaluated, {count} the fit sample")
    return evaluated, np.ascontiguousarray(data.queries[sample])


def measure(data: Any, method: str, label: str, params: dict[str, Any], budgets: list[int]) -> dict[str, Any]:
    """One candidate's per-query NDCG@10 per budget and its fit's CPU and wall seconds."""
    cpu, wall = time.process_time(), time.perf_counter()
    compressor = adaptemb.fit(data.corpus, method, byte_budgets=budgets, **params)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    per_query = {str(b): q for b, _, q in budget_searches(compressor, data, budgets)}
    report = compressor.fit_report
    return {"label": label, "params": params, "fit_cpu_s": round(cpu, 2), "fit_wall_s": round(wall, 2),
            "rotations": {str(k): v for k, v in report["rotations"].items()},
            "bits_per_dim": {str(k): v for k, v in report["bits_per_dim"].items()},
            "ndcg_at_10": {b: float(q.mean()) for b, q in per_query.items()}, "per_query": per_query}


def paired_interval(a: np.ndarray, b: np.ndarray, seed: int = 0) -> list[float]:
    """95% bootstrap interval over queries of mean(a - b)."""
    diff = a - b
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (BOOTSTRAP, len(diff)))].mean(axis=1)
    return [float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))]


def summary(rows: list[dict[str, Any]], budgets: list[int]) -> dict[str, Any]:
    """Per budget: the best candidate, and each one's difference from it with its interval and whether the
    interval holds 0 (within noise)."""
    out: dict[str, Any] = {}
    for budget in map(str, budgets):
        best = max(rows, key=lambda row: row["ndcg_at_10"][budget])
        out[budget] = {"best": best["label"], "candidates": {}}
        for row in rows:
            low, high = paired_interval(row["per_query"][budget], best["per_query"][budget])
            out[budget]["candidates"][row["label"]] = {
                "ndcg_at_10": round(row["ndcg_at_10"][budget], 4),
                "minus_best": round(row["ndcg_at_10"][budget] - best["ndcg_at_10"][budget], 4),
                "interval": [round(low, 4), round(high, 4)], "within_noise": bool(high >= 0)}
    return out


def main() -> None:
    parser = sweep_parser(__doc__.split("\n\n")[0], bytes_default="8,16,24,32,48,64,96", seeds=3)
    parser.add_argument("--sample", type=int, default=0, help="queries held out as the fit's sample (0: none)")
    parser.add_argument("--labels", default=None, help="only these candidates (comma list of labels)")
    args = parser.parse_args()
    data = dataset(args.data, args.docs, 0)
    sample = None
    if args.sample:
        data, sample = split_queries(data, args.sample)
        args.out = args.out or Path(__file__).parent / "results" / f"rotation_default_{args.data}_sample{args.sample}.json"
    load_before = list(os.getloadavg())
    rows = []
    chosen = candidates(args.seeds) if sample is None else sample_candidates()
    for label, params in [c for c in chosen if args.labels is None or c[0] in args.labels.split(",")]:
        params = {**params, "queries": sample} if "queries" in params else params
        rows.append(measure(data, args.method, label, params, args.bytes))
        rows[-1]["params"] = {k: (f"{len(v)} sample queries" if k == "queries" else v) for k, v in params.items()}
        print({key: value for key, value in rows[-1].items() if key != "per_query"}, flush=True)
    result = summary(rows, args.bytes)
    for row in rows:
        row.pop("per_query")
    write_sweep_record("rotation_default", data, args, rows, result, load_before)


if __name__ == "__main__":
    main()
