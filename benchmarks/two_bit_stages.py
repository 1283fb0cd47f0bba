"""1 bit on 8·B rotated dims against 2 bits on 4·B, and what ``bits_per_dim="auto"`` keeps: the measurement behind
the composition's 2-bit stages (issue 29: "2 bits on 4·B dimensions only where it measures better").

Usage::

    python benchmarks/two_bit_stages.py [--data default | wordnet-examples-768] [--docs 5000] [--bytes 8,16,32]
                                        [--seeds 3] [--method svd+binary | cllr+binary]
                                        [--out benchmarks/results/two_bit_stages_DATA[_METHOD].json]

For each seed s and each of ``bits_per_dim`` = 1, 2 and auto: ``adaptemb.fit(C, METHOD, bits_per_dim=...,
byte_budgets=--bytes, seed=s)`` (cllr+binary: without pairs, ``rank=d``), ``encode(C, bytes=B)``,
``index(codes).search(Q, 10)`` with raw float queries: NDCG@10 per budget, the fit seconds, and auto's choice
with the held-out recall@10 of both candidates (the fit's own measurement), beside the machine and its load.
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

SETTINGS = (1, 2, "auto")


def setting_row(data: Any, method: str, bits: int | str, budgets: list[int], seed: int) -> dict[str, Any]:
    """NDCG@10 at each budget of ``method`` fitted with ``bits_per_dim=bits``, the fit seconds and auto's choice."""
    extra = {"projection": {"rank": data.dim, "progress": False}} if method.startswith("cllr") else {}
    start = time.perf_counter()
    compressor = adaptemb.fit(data.corpus, method=method, bits_per_dim=bits, byte_budgets=budgets, seed=seed, **extra)
    fit_s = time.perf_counter() - start
    ndcg, widths = {}, {}
    for budget, codes, per_query in budget_searches(compressor, data, budgets):
        ndcg[str(budget)] = round(float(per_query.mean()), 4)
        widths[str(budget)] = {"width": codes.dim, "bits_per_dim": compressor.fit_report["bits_per_dim"][codes.dim],
                               "bytes_per_vector": codes.bytes_per_vector}
    choice = {str(width): {"bits": c["bits"], "recall_at_10": {str(b): round(r, 4) for b, r in c["recall_at_10"].items()}}
              for width, c in compressor.fit_report.get("bits_choice", {}).items()}
    return {"bits_per_dim": bits, "seed": seed, "fit_s": round(fit_s, 2), "ndcg_at_10": ndcg, "codes": widths,
            "choice": choice}


def summary(rows: list[dict[str, Any]], budgets: list[int]) -> dict[str, Any]:
    """Per budget: the mean NDCG@10 of each setting over seeds, and 2 bits minus 1 bit per seed."""
    out: dict[str, Any] = {}
    for budget in budgets:
        key = str(budget)
        by_setting = {str(bits): [r["ndcg_at_10"][key] for r in rows if r["bits_per_dim"] == bits] for bits in SETTINGS}
        diffs = np.array(by_setting["2"]) - np.array(by_setting["1"])
        out[key] = {**{f"mean_{bits}": round(float(np.mean(v)), 4) for bits, v in by_setting.items()},
                    "two_minus_one": [round(float(d), 4) for d in diffs], "auto_equals_best": bool(
                        np.allclose(by_setting["auto"], np.maximum(by_setting["1"], by_setting["2"])))}
    return out


def main() -> None:
    args = sweep_parser(__doc__.split("\n\n")[0], bytes_default="8,16,32", seeds=3).parse_args()
    data = dataset(args.data, args.docs, 0)
    load_before = list(os.getloadavg())
    rows = []
    for seed in range(args.seeds):
        for bits in SETTINGS:
            rows.append(setting_row(data, args.method, bits, args.bytes, seed))
            print(rows[-1], flush=True)
    write_sweep_record("two_bit_stages", data, args, rows, summary(rows, args.bytes), load_before)


if __name__ == "__main__":
    main()
