"""The bench's faiss-backed rows against faiss run directly with the same factory string (issue 14's bar).

Usage::

    python benchmarks/faiss_parity.py [--docs 5000] [--queries 1000] [--seed 0]
                                      [--out benchmarks/results/faiss_parity.json]

Data: the 768-d real-text stand-in (``standin768.py``: WordNet definitions, example-sentence queries, one
relevant definition each). A seeded subset of ``--queries`` queries and ``--docs`` documents (every chosen
query's definition plus random other definitions) is searched; both sides fit on those documents.

Two sides, scored with the same ``evaluate_ranking`` (NDCG@10):

* the bench: ``run_bench`` (what ``adaptemb bench`` runs) with ``pq`` and ``opq`` at ``--bytes 32,64``,
  ``rabitq`` at k = 1, 2, 4 bits and ``sq`` at 4 and 8 bits, each searched through its own index;
* faiss directly: ``faiss.index_factory(768, spec, METRIC_INNER_PRODUCT)``, ``train``, ``add``, ``search``
  with faiss' defaults (PQ with its polysemous training, OPQ with 50 iterations, RaBitQ with 4-bit queries).

Bar: the pq rows at 32 and 64 B within 0.01 NDCG@10 of ``PQ32``/``PQ64``, and rabitq 1-bit within 0.01 of
``RaBitQ``. The record (appended to ``--out``) holds every row, the fit times of both sides, the machine and
the load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from adaptemb.datasets import Dataset
from adaptemb.evaluate.machine import machine_info
from adaptemb.evaluate.metrics import evaluate_ranking
from adaptemb.evaluate.runner import BenchConfig, run_bench

sys.path.insert(0, str(Path(__file__).parent))
from records import append_record  # sibling benchmark modules (benchmarks/ is on sys.path)
from standin768 import wordnet_examples_768

PLAN: list[tuple[str, dict[str, Any], list[tuple[Any, str]]]] = [
    # (method, bench config, [(bench budget, faiss factory string)])
    ("pq", {"bytes": [32, 64]}, [(32, "PQ32"), (64, "PQ64")]),
    ("opq", {"bytes": [32, 64]}, [(32, "OPQ32,PQ32"), (64, "OPQ64,PQ64")]),
    ("rabitq", {"budgets": [1, 2, 4]}, [(1, "RaBitQ"), (2, "RaBitQ2"), (4, "RaBitQ4")]),
    ("sq", {"budgets": [4, 8]}, [(4, "SQ4"), (8, "SQ8")]),
]
BAR = {"PQ32": 0.01, "PQ64": 0.01, "RaBitQ": 0.01}


def subset(data: Dataset, docs: int, queries: int, seed: int) -> Dataset:
    """``queries`` seeded queries and ``docs`` documents: their relevant rows plus random others."""
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(len(data.queries), queries, replace=False))
    qrels = data.qrels[chosen]
    gold = np.unique(qrels.indices)
    others = np.setdiff1d(np.arange(len(data.corpus)), gold)
    rows = np.sort(np.concatenate([gold, rng.choice(others, docs - len(gold), replace=False)]))
    return Dataset(f"{data.name}-{docs}", np.ascontiguousarray(data.corpus[rows], dtype=np.float32),
                   np.ascontiguousarray(data.queries[chosen], dtype=np.float32), qrels[:, rows],
                   description=f"{data.description}; {docs} documents, {queries} queries (seed {seed})")


def faiss_direct(spec: str, data: Dataset) -> dict[str, Any]:
    start = time.perf_counter()
    index = faiss.index_factory(data.dim, spec, faiss.METRIC_INNER_PRODUCT)
    index.train(data.corpus)
    fit_s = time.perf_counter() - start
    index.add(data.corpus)
    _, ids = index.search(data.queries, 10)
    return {"faiss_ndcg_at_10": evaluate_ranking(ids, data.qrels).as_dict()["ndcg_at_10"], "faiss_fit_s": fit_s,
            "faiss_bytes_per_vector": index.sa_code_size()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--methods", default=",".join(m for m, _, _ in PLAN))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "faiss_parity.json")
    args = parser.parse_args()
    data = subset(wordnet_examples_768(), args.docs, args.queries, args.seed)
    wanted = set(args.methods.split(","))
    rows, reference = [], None
    for method, budgets, pairs in PLAN:
        if method not in wanted:
            continue
        result = run_bench(data, BenchConfig(methods=[method], device="cpu", seed=args.seed, **budgets),
                           progress=lambda msg: print(f"… {msg}", flush=True))
        reference = result.rows[0]["ndcg_at_10"]
        bench = {r["k"]: r for r in result.rows if r["method"] == method}
        for budget, spec in pairs:
            key = budget if budget in bench else next(k for k, r in bench.items() if r["bytes_per_vector"] <= budget)
            row = bench[key]
            direct = faiss_direct(spec, data)
            entry = {"method": method, "k": row["k"], "factory": spec, "bytes_per_vector": row["bytes_per_vector"],
                     "bench_ndcg_at_10": row["ndcg_at_10"], **direct,
                     "difference": row["ndcg_at_10"] - direct["faiss_ndcg_at_10"], "bench_fit_s": row["fit_s"],
                     "bench_ms_per_query": row["latency_per_query_ms"], "backend": row["backend"]}
            if spec in BAR:
                entry["within_bar"] = abs(entry["difference"]) <= BAR[spec]
            print(entry, flush=True)
            rows.append(entry)
    append_record(args.out, {
        "benchmark": "faiss_parity", "dataset": data.name, "docs": len(data.corpus), "queries": len(data.queries),
        "dim": data.dim, "seed": args.seed, "float32_ndcg_at_10": reference, "rows": rows,
        "bar": {spec: f"|bench - faiss| <= {tol}" for spec, tol in BAR.items()},
        "bar_met": all(r.get("within_bar", True) for r in rows),
        "load_average_after": [round(v, 2) for v in os.getloadavg()], "machine": machine_info(),
    })


if __name__ == "__main__":
    main()
