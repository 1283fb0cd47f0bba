"""Two cell counts of one method's approximate index at one size, searched alternately: which one is faster at 0.95?

Opens the indexes ``ann_paired_scaling.py`` left in ``--cache`` (``{key}_{method}_{rows}_{auto|cells}{count}``:
build them first with ``--cells``), finds each one's fewest probes reaching recall@10 0.95 against the exact index
on the first ``--check-queries`` queries, then times ``--rounds`` rounds of one batched search of ``--queries``
queries per index, alternating, so that a shared machine's drift falls on both. QPS are medians over the rounds.

    python benchmarks/ann_cells_paired.py --vectors /data/debian-corpus/static-256.npy \\
        --split /data/debian-corpus/split.json --cache /tmp/ann-cache --methods csr --rows 990000 \\
        --indexes auto1024,cells2048
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from ann_paired_scaling import operating_nprobe
from ann_recall_qps import RESULTS, corpus_parser, corpus_parts, encoded, fitted, load_data, timed
from records import write_record

import adaptemb
from adaptemb.evaluate.machine import machine_info


def measure(method: str, rows: int, names: list[str], args: Any, vectors: np.ndarray,
            split: dict[str, Any]) -> dict[str, Any]:
    corpus, queries, fit_rows = corpus_parts(vectors, split, args.queries)
    compressor = fitted(method, fit_rows, args.cache, args.split_key)
    codes = encoded(compressor, corpus, rows, args.cache, method, args.split_key)
    check = queries[: args.check_queries]
    exact_ids = compressor.index(codes, device="cpu").search(check, 10)[1]
    stem = f"{args.split_key}_{method.replace('+', '_')}_{rows}"
    indexes = {name: adaptemb.load_index(args.cache / f"{stem}_{name}.ann.safetensors") for name in names}
    points = {name: operating_nprobe(ann, check, exact_ids) for name, ann in indexes.items()}
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.rounds):
        for name, ann in indexes.items():
            ann.search(queries[:50], 10, nprobe=points[name][0])  # the warm-up of a memory-mapped index
            times[name].append(timed(ann.search, queries, nprobe=points[name][0]))
    out = {name: {"cells": indexes[name].cells, "nprobe": points[name][0], "recall_vs_exact": round(points[name][1], 4),
                  "qps": round(len(queries) / float(np.median(times[name])), 1),
                  "times": [round(t, 3) for t in times[name]]} for name in names}
    first = out[names[0]]["qps"]
    for name in names:
        out[name]["qps_over_first"] = round(out[name]["qps"] / first, 3)
    print(f"{method} @ {rows:,}: " + ", ".join(f"{n} {o['cells']} cells, {o['nprobe']} probes, {o['qps']} QPS "
                                                f"({o['qps_over_first']}x)" for n, o in out.items()), flush=True)
    return out


def main() -> None:
    parser = corpus_parser(__doc__.split("\n")[0], cache_help="fitted compressors, codes, indexes")
    parser.add_argument("--indexes", required=True, help="comma list of index name parts, e.g. auto1024,cells2048")
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--check-queries", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    adaptemb.set_threads(args.threads)
    vectors, split = load_data(args)
    names = args.indexes.split(",")
    for method in args.methods.split(","):
        for rows in args.rows:
            load_before = list(os.getloadavg())
            record = {"benchmark": "ann_cells_paired", "data": args.vectors.name, "method": method, "rows": rows,
                      "queries": args.queries, "check_queries": args.check_queries, "threads": args.threads,
                      "rounds": args.rounds, "indexes": measure(method, rows, names, args, vectors, split),
                      "note": args.note, "load_before": load_before, "load_after": list(os.getloadavg()),
                      "machine": machine_info()}
            write_record(RESULTS / f"ann_cells_paired_{args.split_key}_{method.replace('+', '_')}_{rows}.json", record)


if __name__ == "__main__":
    main()
