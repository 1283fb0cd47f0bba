"""csr's value bits: what real queries prefer at each k against what the fit's held-out proxy picks.

Usage::

    python benchmarks/csr_value_bits.py [--data default | wordnet-examples-768] [--bytes 10,12,16,24,32,48,64]
                                        [--out benchmarks/results/csr_value_bits_DATA.json]

One ``adaptemb.fit(C, "csr")`` (defaults); then for every (k, value bits) of its choice table with k <= 64: the codes
``encode(C, k=k)`` with the config's ``value_bits`` set to b, searched by ``index(codes).search(Q, 10)`` with raw
float queries (NDCG@10 over all queries), and three doc-as-query proxies on 1,000 corpus rows as queries (self
left out): recall@10 of the exact cosine top-10 (what the fit's choice table measures, on its own held-out
slice), whether the exact nearest row is in the top 10, and its reciprocal rank. Per byte budget: the (k, b) that
``encode(C, bytes=B)`` chooses, the best by real queries (the oracle) and the best by each proxy, with the real
NDCG@10 of each. The machine and its load go into the record.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

import adaptemb
from adaptemb import ranking
from adaptemb.evaluate.machine import machine_info
from adaptemb.ranking import neighbour_recall_at_k

sys.path.insert(0, str(Path(__file__).parent))
from arguments import data_set_parser
from compose_frontier import dataset, per_query_ndcg
from records import data_fields, write_record

MAX_K = 64
PROBE_ROWS = 1000
PROXIES = ("recall@10", "nearest_in_top10", "nearest_rr")


def without_self(ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The first 10 of each probe row's 11 ranked ids that are not the row itself."""
    return np.array([[i for i in ranked if i != own][:10] for ranked, own in zip(ids, rows, strict=True)])


def probe_truth(corpus: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Each probe row's exact cosine top-10 among the other corpus rows."""
    unit = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
    return without_self(ranking.exact_top_k(unit[rows], unit, 11), rows)


def proxies(ids: np.ndarray, rows: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """The doc-as-query proxies of one code's top-11 ids for the probe rows (self left out)."""
    found = without_self(ids, rows)
    recall = neighbour_recall_at_k(found, truth, 10).mean()
    nearest = [list(got).index(want[0]) if want[0] in got else None for want, got in zip(truth, found, strict=True)]
    return {"recall@10": float(recall), "nearest_in_top10": float(np.mean([p is not None for p in nearest])),
            "nearest_rr": float(np.mean([0.0 if p is None else 1.0 / (1 + p) for p in nearest]))}


def measure(comp: adaptemb.Compressor, data: Any, k: int, bits: int, rows: np.ndarray, truth: np.ndarray) -> dict[str, Any]:
    comp.config = comp.config.model_copy(update={"value_bits": bits})
    codes = comp.encode(data.corpus, k=k)
    assert codes.value_bits == bits
    index = comp.index(codes)
    ndcg = float(per_query_ndcg(index.search(data.queries, 10)[1], data).mean())
    return {"k": k, "value_bits": bits, "bytes_per_vector": codes.bytes_per_vector, "ndcg_at_10": ndcg,
            **proxies(index.search(data.corpus[rows], 11)[1], rows, truth)}


def best(points: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The point with the highest ``key`` (the fewer value bits on a tie)."""
    return max(points, key=lambda p: (p[key], -p["value_bits"]))


def main() -> None:
    parser = data_set_parser(__doc__.split("\n\n")[0], bytes_default="10,12,16,24,32,48,64")
    args = parser.parse_args()
    data = dataset(args.data, args.docs, 0)
    load_before = list(os.getloadavg())
    comp = adaptemb.fit(data.corpus, "csr", progress=False)
    table = comp.fit_report["extra"]["value_choices"]
    rows = np.random.default_rng(0).choice(len(data.corpus), PROBE_ROWS, replace=False)
    truth = probe_truth(data.corpus, rows)
    points = []
    for entry in table:
        if entry["k"] <= MAX_K:
            points.append({**measure(comp, data, int(entry["k"]), int(entry["value_bits"]), rows, truth),
                           "fit_proxy_recall@10": entry["recall@10"]})
            print(points[-1], flush=True)
    comp.config = comp.config.model_copy(update={"value_bits": None})
    budgets = []
    for nbytes in args.bytes:
        fits = [p for p in points if p["bytes_per_vector"] <= nbytes]
        codes = comp.encode(data.corpus, bytes=nbytes)
        chosen = next(p for p in fits if (p["k"], p["value_bits"]) == (codes.k, codes.value_bits))
        picks = {"chosen": chosen, "oracle": best(fits, "ndcg_at_10"),
                 **{f"by_{name}": best(fits, name) for name in PROXIES}}
        budgets.append({"bytes": nbytes, **{name: {"k": p["k"], "value_bits": p["value_bits"], "ndcg_at_10": p["ndcg_at_10"]}
                                           for name, p in picks.items()}})
        print(budgets[-1], flush=True)
    name = data.name if args.data == "default" else f"{args.data}-{args.docs}"
    record = {**data_fields("csr_value_bits", data), "dataset": name, "points": points, "budgets": budgets,
              "load_before": load_before, "load_after": list(os.getloadavg()), "machine": machine_info()}
    write_record(args.out or Path(__file__).parent / "results" / f"csr_value_bits_{args.data}.json", record)


if __name__ == "__main__":
    main()
