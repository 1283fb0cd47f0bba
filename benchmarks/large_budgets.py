"""Our codes against faiss' at 64, 96 and 128 B per vector (issue 46: "every budget filled up to 128 B").

Usage::

    python benchmarks/large_budgets.py [--data default | wordnet-examples-768] [--docs 5000] [--bytes 64,96,128]
                                       [--out benchmarks/results/large_budgets_DATA.json]

Every row is NDCG@10 over every query of the data set, searched through the code's own index with raw float
queries (``benchmarks/compose_frontier.py``'s rows):

* ours (our own quantisers): ``svd+binary`` as shipped (``rotation="auto"``, ``bits_per_dim="auto"``: 2 bits past
  the full rank, 3 past twice it), with ``bits_per_dim=2`` (2 bits on half the width wherever that half is a rank)
  under ITQ-20 and the seeded random rotation, and with ITQ at every width; each fitted once with
  ``byte_budgets=--bytes``, ``encode(x, bytes=B)``;
* faiss directly (``index_factory``, train, add, search): ``PQ{B}`` (8-bit sub-quantisers), the
  ``PCAR..,SQtqmse1/2`` and ``PCA..,RaBitQ`` codes of ``compose_frontier.faiss_specs``. OPQ is left out (minutes of
  fit per budget on 2 cores): its rows are read from the bench record ``--opq-record`` (``adaptemb bench --bytes
  64,96,128`` on the same documents and queries) and quoted beside.

Per budget: the best row of ours and of faiss (each at most B bytes), the gap, and its 95% paired bootstrap
interval over queries (fresh faiss rows only; ``--faiss-from`` quotes an earlier record's faiss rows instead of
refitting them); the bar is gap >= -0.003.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

import adaptemb

sys.path.insert(0, str(Path(__file__).parent))
from arguments import data_set_parser
from compose_frontier import budget_searches, dataset, faiss_row, faiss_specs
from records import data_fields, write_record
from rotation_default import paired_interval

OURS = [("svd+binary (shipped)", {}),
        ("svd+binary itq-tail 1-bit", {"rotation": "itq-tail", "bits_per_dim": 1}),
        ("svd+binary 2-bit itq", {"bits_per_dim": 2, "rotation": "itq"}),
        ("svd+binary 2-bit random", {"bits_per_dim": 2, "rotation": "random"}),
        ("svd+binary itq", {"rotation": "itq"})]


def our_rows(data: Any, budgets: list[int]) -> list[dict[str, Any]]:
    rows = []
    for label, params in OURS:
        fitted = adaptemb.fit(data.corpus, "svd+binary", byte_budgets=budgets, **params)
        for nbytes, codes, per_query in budget_searches(fitted, data, budgets):
            bits = fitted.fit_report["bits_per_dim"][codes.dim]
            rows.append({"label": f"{label} k={codes.dim} ({bits} bit)", "budget": nbytes,
                         "bytes_per_vector": codes.bytes_per_vector, "per_query": per_query})
            print(rows[-1]["label"], nbytes, round(float(np.nanmean(per_query)), 4), flush=True)
    return rows


def faiss_rows(data: Any, budgets: list[int]) -> list[dict[str, Any]]:
    specs = sorted({f"PQ{nbytes}" for nbytes in budgets} | {s for b in budgets for s in faiss_specs(b, data.dim)})
    rows = []
    for spec in specs:
        row = faiss_row(spec, data)
        rows.append(row)
        print(row["label"], row["bytes_per_vector"], round(float(np.nanmean(row["per_query"])), 4), flush=True)
    return rows


def quoted_faiss_rows(path: Path, data: Any) -> list[dict[str, Any]]:
    """The faiss rows of an earlier record of this script, their per-query NDCG stood in by the mean (so the gap's
    interval is not measured: reported as None)."""
    rows = json.loads(path.read_text())["rows"]
    return [r | {"per_query": np.full(len(data.queries), r["ndcg_at_10"]), "quoted": True}
            for r in rows if r["label"].startswith("faiss")]


def recorded_opq(path: Path | None) -> dict[int, float]:
    """opq's NDCG@10 per bytes per vector in a bench record (``results.json``), if given."""
    if path is None or not path.is_file():
        return {}
    rows = json.loads(path.read_text())["rows"]
    return {int(r["bytes_per_vector"]): r["ndcg_at_10"] for r in rows if r["method"] == "opq"}


def compare(ours: list[dict[str, Any]], theirs: list[dict[str, Any]], opq: dict[int, float],
            budgets: list[int]) -> dict[str, Any]:
    out = {}
    for nbytes in budgets:
        mine = max((r for r in ours if r["bytes_per_vector"] <= nbytes), key=lambda r: np.nanmean(r["per_query"]))
        best = max((r for r in theirs if r["bytes_per_vector"] <= nbytes), key=lambda r: np.nanmean(r["per_query"]))
        gap = float(np.nanmean(mine["per_query"]) - np.nanmean(best["per_query"]))
        keep = ~np.isnan(mine["per_query"]) & ~np.isnan(best["per_query"])
        opq_best = max((v for b, v in opq.items() if b <= nbytes), default=None)
        out[str(nbytes)] = {"ours": mine["label"], "ours_ndcg": round(float(np.nanmean(mine["per_query"])), 4),
                            "faiss_fresh": best["label"], "faiss_ndcg": round(float(np.nanmean(best["per_query"])), 4),
                            "gap": round(gap, 4), "gap_interval": None if best.get("quoted") else [
                                round(v, 4) for v in paired_interval(mine["per_query"][keep], best["per_query"][keep])],
                            "opq_recorded": opq_best,
                            "gap_to_opq_recorded": None if opq_best is None else round(
                                float(np.nanmean(mine["per_query"])) - opq_best, 4)}
        print(nbytes, out[str(nbytes)], flush=True)
    return out


def main() -> None:
    parser = data_set_parser(__doc__.split("\n\n")[0], bytes_default="64,96,128")
    parser.add_argument("--opq-record", type=Path, default=None, help="a bench results.json with opq rows")
    parser.add_argument("--faiss-from", type=Path, default=None,
                        help="this script's earlier record: its faiss rows are quoted (no per-query interval)")
    args = parser.parse_args()
    data = dataset(args.data, args.docs, 0)
    load_before = list(os.getloadavg())
    ours = our_rows(data, args.bytes)
    theirs = faiss_rows(data, args.bytes) if args.faiss_from is None else quoted_faiss_rows(args.faiss_from, data)
    result = compare(ours, theirs, recorded_opq(args.opq_record), args.bytes)
    rows = [{k: v for k, v in r.items() if k != "per_query"} | {"ndcg_at_10": round(float(np.nanmean(r["per_query"])), 4)}
            for r in ours + theirs]
    from adaptemb.evaluate.machine import machine_info

    name = data.name if args.data == "default" else f"{args.data}-{args.docs}"
    write_record(args.out or Path(__file__).parent / "results" / f"large_budgets_{args.data}.json",
                 {**data_fields("large_budgets", data), "dataset": name, "bytes": args.bytes, "rows": rows,
                  "comparison": result, "opq_record": str(args.opq_record), "load_before": load_before,
                  "load_after": list(os.getloadavg()), "machine": machine_info()})


if __name__ == "__main__":
    main()
