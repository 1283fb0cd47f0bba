"""cllr's learned rank h before sign bits: the default 256 against the full dimension d (METHODS.md's H x H), for
cllr+binary fitted without pairs.

Usage::

    python benchmarks/cllr_rank.py [--data default | wordnet-examples-768] [--docs 5000] [--bytes 16,32]
                                   [--seeds 2] [--pairs 0 | 500]
                                   [--out benchmarks/results/cllr_rank[_pairs500]_DATA_cllr_binary.json]

For each seed s and rank h in (256, d): ``adaptemb.fit(C, "cllr+binary", projection={"rank": h},
byte_budgets=--bytes, seed=s)``, ``encode(C, bytes=B)``, ``index(codes).search(Q, 10)`` with raw float queries:
NDCG@10 per budget and the fit seconds, beside the machine and its load. With ``--pairs N``: fitted with N seeded
(query, relevant document) pairs as well, NDCG@10 on the other queries only.
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
from compose_frontier import budget_searches, dataset
from records import write_sweep_record


def rank_row(data: Any, method: str, rank: int, budgets: list[int], seed: int, pairs: Any, held: np.ndarray) -> dict[str, Any]:
    """NDCG@10 at each budget (over the ``held`` queries) of ``method`` with cllr's rank ``rank`` (fitted with
    ``pairs`` where not None), and the fit seconds."""
    start = time.perf_counter()
    supervision = {} if pairs is None else {"pairs": pairs}
    compressor = adaptemb.fit(data.corpus, method=method, projection={"rank": rank, "progress": False},
                              byte_budgets=budgets, seed=seed, **supervision)
    fit_s = time.perf_counter() - start
    ndcg = {str(budget): round(float(per_query[held].mean()), 4)
            for budget, _, per_query in budget_searches(compressor, data, budgets)}
    return {"rank": rank, "seed": seed, "fit_s": round(fit_s, 2), "ndcg_at_10": ndcg}


def summary(rows: list[dict[str, Any]], budgets: list[int], ranks: tuple[int, int]) -> dict[str, Any]:
    """Per budget: the mean NDCG@10 of each rank over seeds, and full rank minus 256 per seed."""
    out: dict[str, Any] = {}
    for budget in budgets:
        by_rank = {rank: [r["ndcg_at_10"][str(budget)] for r in rows if r["rank"] == rank] for rank in ranks}
        diffs = np.array(by_rank[ranks[1]]) - np.array(by_rank[ranks[0]])
        out[str(budget)] = {**{f"mean_rank_{rank}": round(float(np.mean(v)), 4) for rank, v in by_rank.items()},
                            "full_minus_256": [round(float(d), 4) for d in diffs]}
    return out


def main() -> None:
    parser = sweep_parser(__doc__.split("\n\n")[0], bytes_default="16,32", seeds=2, method="cllr+binary")
    parser.add_argument("--pairs", type=int, default=0, help="labelled pairs to fit with (0: none)")
    args = parser.parse_args()
    data = dataset(args.data, args.docs, 0)
    order = np.random.default_rng(0).permutation(len(data.queries))
    paired, held = order[: args.pairs], np.sort(order[args.pairs :])
    first_relevant = data.qrels[paired].indices[data.qrels[paired].indptr[:-1]]
    pairs = (data.queries[paired], data.corpus[first_relevant]) if args.pairs else None
    load_before = list(os.getloadavg())
    ranks = (256, data.dim)
    rows = []
    for seed in range(args.seeds):
        for rank in ranks:
            rows.append(rank_row(data, args.method, rank, args.bytes, seed, pairs, held))
            print(rows[-1], flush=True)
    benchmark = f"cllr_rank_pairs{args.pairs}" if args.pairs else "cllr_rank"
    write_sweep_record(benchmark, data, args, rows, summary(rows, args.bytes, ranks), load_before,
                       pairs=args.pairs, evaluated_queries=len(held))


if __name__ == "__main__":
    main()
