"""rabitq's per-vector factors as float16 against float32 (issue 27): the quality cost at the same code, and what
the bytes saved buy in a composition at the same bytes.

Usage::

    python benchmarks/rabitq_factors.py [--data default | wordnet-examples-768] [--docs 5000] [--bytes 16,32,64]
                                        [--bits 1,2,3,4] [--seed 0] [--out benchmarks/results/rabitq_factors_DATA.json]

Every row is NDCG@10 over all queries, searched through the method's own index (``comp.index(codes).search``)
with raw float queries:

* plain ``rabitq`` at full d, ``k`` = each of ``--bits``, float32 and float16 factors (one fit each, the same
  centre: the only difference is the factors' precision);
* ``svd+rabitq`` at each ``--bytes`` B: float32 factors (the rank that fills B: 8 (B - 8) at 1 bit), float16
  factors at that same rank (B - 4 bytes: the cost of float16 alone) and float16 at the rank that fills B
  (8 (B - 4): what the 4 B saved buy).

Pairs of rows at the same rank also get the top-10 agreement (position by position) and the paired NDCG
difference with its standard error over the queries. The record holds the rows, the machine and the load
average before and after.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np

import adaptemb
from adaptemb.datasets import Dataset, load_dataset
from adaptemb.evaluate.machine import machine_info
from adaptemb.evaluate.metrics import ndcg_at_k

sys.path.insert(0, str(Path(__file__).parent))
from arguments import data_set_parser, integers
from records import write_record

DTYPES = ("float32", "float16")


def dataset(name: str, docs: int, seed: int) -> Dataset:
    if name == "wordnet-examples-768":
        from faiss_parity import subset
        from standin768 import wordnet_examples_768

        return subset(wordnet_examples_768(), docs, 1000, seed)
    return load_dataset(name)


def searched(comp: adaptemb.Compressor, codes: adaptemb.Codes, data: Dataset) -> dict[str, Any]:
    _, ids = comp.index(codes, device="cpu").search(data.queries, 10)
    return {"rank": codes.dim, "bytes_per_vector": codes.bytes_per_vector, "ids": ids,
            "per_query": ndcg_at_k(ids, data.qrels, 10)}


def plain_rows(data: Dataset, bits: list[int], seed: int) -> list[dict[str, Any]]:
    rows = []
    for dtype in DTYPES:
        comp = adaptemb.fit(data.corpus, "rabitq", factor_dtype=dtype, seed=seed)
        for k in bits:
            rows.append({"label": f"rabitq k={k} {dtype}", "method": "rabitq", "bits": k, "factor_dtype": dtype,
                         **searched(comp, comp.encode(data.corpus, k=k), data)})
    return rows


def composed_rows(data: Dataset, budgets: list[int], seed: int) -> list[dict[str, Any]]:
    """svd+rabitq: float32 at B; float16 at B - 4 (float32's rank at B) and at B (4 B more sign bits)."""
    wide = adaptemb.fit(data.corpus, "svd+rabitq", byte_budgets=budgets, quantizer={"factor_dtype": "float32"},
                        seed=seed)
    half = adaptemb.fit(data.corpus, "svd+rabitq", byte_budgets=sorted({b - d for b in budgets for d in (0, 4)}),
                        seed=seed)
    rows = []
    for nbytes in budgets:
        for label, comp, spent in (("float32", wide, nbytes), ("float16, same rank", half, nbytes - 4),
                                   ("float16, same bytes", half, nbytes)):
            rows.append({"label": f"svd+rabitq {nbytes} B {label}", "method": "svd+rabitq", "budget": nbytes,
                         "factor_dtype": label.split(",")[0], **searched(comp, comp.encode(data.corpus, bytes=spent), data)})
    return rows


def compare(base: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """``other`` against ``base``: NDCG difference (paired, with its standard error) and top-10 agreement."""
    diff = other["per_query"] - base["per_query"]
    return {"of": other["label"], "against": base["label"], "ndcg_difference": float(diff.mean()),
            "standard_error": float(diff.std(ddof=1) / np.sqrt(len(diff))),
            "top10_agreement": float((other["ids"] == base["ids"]).mean()) if other["rank"] == base["rank"] else None}


def comparisons(rows: list[dict[str, Any]], bits: list[int], budgets: list[int]) -> list[dict[str, Any]]:
    by_label = {row["label"]: row for row in rows}
    out = [compare(by_label[f"rabitq k={k} float32"], by_label[f"rabitq k={k} float16"]) for k in bits]
    for nbytes in budgets:
        base = by_label[f"svd+rabitq {nbytes} B float32"]
        out += [compare(base, by_label[f"svd+rabitq {nbytes} B float16, {what}"]) for what in ("same rank", "same bytes")]
    return out


def main() -> None:
    parser = data_set_parser(__doc__.split("\n")[0], bytes_default="16,32,64")
    parser.add_argument("--bits", type=integers, default="1,2,3,4")
    args = parser.parse_args()
    data = dataset(args.data, args.docs, args.seed)
    load_before, start = os.getloadavg(), time.perf_counter()
    rows = plain_rows(data, args.bits, args.seed) + composed_rows(data, args.bytes, args.seed)
    compared = comparisons(rows, args.bits, args.bytes)
    for row in rows:
        row["ndcg_at_10"] = float(row.pop("per_query").mean())
        del row["ids"]
        print(f"{row['label']:<38} rank {row['rank']:>4}  {row['bytes_per_vector']:>6.1f} B  {row['ndcg_at_10']:.4f}")
    for item in compared:
        agreement = "" if item["top10_agreement"] is None else f"  top-10 agreement {item['top10_agreement']:.3f}"
        print(f"{item['of']:<38} - float32: {item['ndcg_difference']:+.4f} (se {item['standard_error']:.4f}){agreement}")
    record = {
        "benchmark": "rabitq_factors", "dataset": data.name, "docs": len(data.corpus), "queries": len(data.queries),
        "dim": data.dim, "seed": args.seed, "bytes": args.bytes, "bits": args.bits, "faiss_version": faiss.__version__,
        "rows": rows, "comparisons": compared, "total_s": time.perf_counter() - start,
        "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
        "machine": machine_info(),
    }
    write_record(args.out or Path(__file__).parent / "results" / f"rabitq_factors_{data.name}.json", record)


if __name__ == "__main__":
    main()
