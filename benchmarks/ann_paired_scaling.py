"""The approximate index's speed-up over exact and its QPS fall from the smallest to the largest size, timed in
paired rounds so that a shared machine's load falls on every size and index alike.

For each method (csr 16 B, svd+binary 32 B; compressors, codes and faiss data as ``ann_recall_qps.py`` caches
them) and each size in ``--rows``: ``exact = comp.index(codes)`` and ``ann = comp.index(codes, ann="auto")``
(built once, then reopened from ``--cache`` with ``adaptemb.load_index``; the file name carries the cell count
the auto rule gave). The operating point is the fewest probes of a sweep whose recall@10 against ``exact``
reaches 0.95 on the first ``--check-queries`` queries (bisected between the sweep's points). Then ``--rounds``
rounds alternate, per round and size, one batched ANN search of all ``--queries`` queries at that point and one
exact search of the first ``--exact-queries`` (exact QPS is linear in a batch, so a smaller batch times it in less
time). QPS are medians over the rounds; the
speed-up is ANN QPS over exact QPS, and the fall is the smallest size's QPS over the largest's.

    python benchmarks/ann_paired_scaling.py --vectors /data/debian-corpus/static-256.npy \\
        --split /data/debian-corpus/split.json --cache /tmp/ann-cache
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from ann_recall_qps import (
    BUDGETS,
    NPROBES,
    RESULTS,
    TARGET,
    corpus_parser,
    corpus_parts,
    encoded,
    fitted,
    load_data,
    recall,
    timed,
)
from arguments import integers
from records import write_record

import adaptemb
from adaptemb.evaluate.machine import machine_info


def reopened_ann(compressor: adaptemb.Compressor, codes: adaptemb.Codes, cache: Path,
                 name: str, cells: int | None = None) -> tuple[Any, float | None]:
    """``compressor.index(codes, ann="auto")`` (or with ``cells`` cells), kept in ``cache`` under ``name`` plus its
    cell count (a rerun reopens it: build seconds None)."""
    config = adaptemb.AnnConfig() if cells is None else adaptemb.AnnConfig(cells=cells)
    resolved = config.resolved(len(codes), 1).cells
    path = cache / f"{name}_{'auto' if cells is None else 'cells'}{resolved}.ann.safetensors"
    if path.is_file():
        return adaptemb.load_index(path), None
    start = time.perf_counter()
    ann = compressor.index(codes, ann=config)
    build_s = time.perf_counter() - start
    ann.save(path)
    return ann, build_s


def operating_nprobe(ann: Any, queries: np.ndarray, exact_ids: np.ndarray) -> tuple[int, float]:
    """The fewest probes reaching ``TARGET`` recall against exact: the first of ``NPROBES`` (or all cells) that
    does, then bisected down to the previous one (recall rises with the probes), and that recall."""
    def reached(nprobe: int) -> float:
        return recall(ann.search(queries, 10, nprobe=nprobe)[1], exact_ids)

    low = 0
    for nprobe in [p for p in NPROBES if p < ann.cells] + [ann.cells]:
        found = reached(nprobe)
        if found >= TARGET:
            break
        low = nprobe
    while nprobe - low > 1:
        middle = (low + nprobe) // 2
        if (at_middle := reached(middle)) >= TARGET:
            nprobe, found = middle, at_middle
        else:
            low = middle
    return nprobe, found


def measure_method(method: str, args: argparse.Namespace, vectors: np.ndarray, split: dict[str, Any]) -> dict[str, Any]:
    corpus, queries, fit_rows = corpus_parts(vectors, split, args.queries)
    check = queries[: args.check_queries]
    timed_exact = queries[: args.exact_queries]
    compressor = fitted(method, fit_rows, args.cache, args.split_key)
    sizes = {}
    all_rows = sorted({min(r, len(corpus)) for r in args.rows})
    cells = args.cells or [None] * len(all_rows)
    if len(cells) != len(all_rows):
        raise SystemExit(f"--cells needs one count per size ({len(all_rows)}); got {len(cells)}")
    for rows, size_cells in zip(all_rows, cells):
        codes = encoded(compressor, corpus, rows, args.cache, method, args.split_key)
        name = f"{args.split_key}_{method.replace('+', '_')}_{rows}"
        ann, build_s = reopened_ann(compressor, codes, args.cache, name, size_cells)
        exact = compressor.index(codes, device="cpu")
        exact_ids = exact.search(check, 10)[1]
        nprobe, found = operating_nprobe(ann, check, exact_ids)
        calibrated = ann.calibration.nprobe_for(TARGET)
        print(f"{method} @ {rows:,}: {ann.cells} cells, nprobe {nprobe} (calibrated {calibrated}), recall {found:.4f}",
              flush=True)
        sizes[rows] = {"ann": ann, "exact": exact, "nprobe": nprobe, "record": {
            "cells": ann.cells, "routing_dims": ann.router.dims, "build_s": None if build_s is None else round(build_s, 1),
            "bytes_per_vector": round(ann.bytes_per_vector, 2), "nprobe": nprobe, "calibrated_nprobe": calibrated,
            "recall_vs_exact": round(found, 4), "ann_times": [], "exact_times": []}}
    for _ in range(args.rounds):  # paired rounds: every size's ANN and exact search once a round
        for size in sizes.values():
            ann, nprobe = size["ann"], size["nprobe"]
            ann.search(queries[:50], 10, nprobe=nprobe)  # the warm-up of a reopened (memory-mapped) index
            size["record"]["ann_times"].append(timed(ann.search, queries, nprobe=nprobe))
            size["record"]["exact_times"].append(timed(size["exact"].search, timed_exact))
    return summary(method, sizes, len(queries), len(timed_exact))


def summary(method: str, sizes: dict[int, dict[str, Any]], n_queries: int, n_check: int) -> dict[str, Any]:
    out: dict[str, Any] = {"method": method, "budget_bytes": BUDGETS[method], "sizes": {}}
    for rows, size in sizes.items():
        record = size["record"]
        record["ann_qps"] = round(n_queries / float(np.median(record["ann_times"])), 1)
        record["exact_qps"] = round(n_check / float(np.median(record["exact_times"])), 1)
        record["speedup_over_exact"] = round(record["ann_qps"] / record["exact_qps"], 2)
        record["ann_times"] = [round(t, 3) for t in record["ann_times"]]
        record["exact_times"] = [round(t, 3) for t in record["exact_times"]]
        out["sizes"][str(rows)] = record
    small, large = (out["sizes"][str(rows)] for rows in (min(sizes), max(sizes)))
    out["ann_qps_fall"] = round(small["ann_qps"] / large["ann_qps"], 2)
    out["exact_qps_fall"] = round(small["exact_qps"] / large["exact_qps"], 2)
    print(f"{method}: " + ", ".join(f"{rows}: {r['speedup_over_exact']}x exact ({r['ann_qps']} QPS)"
                                    for rows, r in out["sizes"].items())
          + f"; ANN QPS fall {out['ann_qps_fall']}x, exact {out['exact_qps_fall']}x", flush=True)
    return out


def main() -> None:
    parser = corpus_parser(__doc__.split("\n")[0], cache_help="fitted compressors, codes, indexes")
    parser.add_argument("--queries", type=int, default=2000, help="queries of each timed ANN search")
    parser.add_argument("--check-queries", type=int, default=1000, help="queries of the recall check")
    parser.add_argument("--exact-queries", type=int, default=500, help="queries of each timed exact search")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--note", default="", help="recorded as is (e.g. what else ran on the machine)")
    parser.add_argument("--cells", type=integers, help="cells per size, in the order of the sizes (default: auto); "
                        "the record's name then ends in _cells<counts>")
    args = parser.parse_args()
    adaptemb.set_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    args.cache.mkdir(parents=True, exist_ok=True)
    vectors, split = load_data(args)
    for method in args.methods.split(","):
        load_before = list(os.getloadavg())
        record = {"benchmark": "ann_paired_scaling", "data": args.vectors.name, "queries": args.queries,
                  "check_queries": args.check_queries, "exact_queries": args.exact_queries, "threads": args.threads,
                  "rounds": args.rounds,
                  **measure_method(method, args, vectors, split), "note": args.note, "load_before": load_before,
                  "load_after": list(os.getloadavg()), "machine": machine_info()}
        suffix = "" if not args.cells else "_cells" + "_".join(map(str, args.cells))
        write_record(RESULTS / f"ann_paired_{args.split_key}_{method.replace('+', '_')}{suffix}.json", record)


if __name__ == "__main__":
    main()
