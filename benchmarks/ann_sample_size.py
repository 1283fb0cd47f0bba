"""How the k-means sample's size moves the probes an approximate index needs for recall 0.95 against exact.

For each method and size in ``--rows``, and each k-means seed in ``--seeds``: ``comp.index(codes, ann=AnnConfig(
sample=S, seed=seed))`` for each ``S`` of ``--samples`` ("auto" is the default rule, 256 rows a cell). Recorded per
build: the fewest probes whose recall@10 against ``exact = comp.index(codes)`` reaches 0.95 on ``--queries`` held-out
queries (``ann_paired_scaling.operating_nprobe``), the rows a query scans there, the recall at fixed probe counts,
the calibration's own probe count for 0.95 and the build's seconds. No timing of searches: the probes and rows are
what the sample changes.

    python benchmarks/ann_sample_size.py --vectors /data/debian-corpus/static-256.npy \\
        --split /data/debian-corpus/split.json --methods svd+binary --rows 250000,990000 --samples 100000,auto
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
from ann_paired_scaling import operating_nprobe
from ann_recall_qps import RESULTS, TARGET, corpus_parser, corpus_parts, encoded, fitted, load_data, recall
from arguments import integers
from records import write_record

import adaptemb
from adaptemb.evaluate.machine import machine_info

FIXED_PROBES = (64, 96, 128, 160, 192)


def measured(compressor: adaptemb.Compressor, codes: adaptemb.Codes, queries: np.ndarray, exact_ids: np.ndarray,
             sample: int | str, seed: int) -> dict[str, Any]:
    start = time.perf_counter()
    ann = compressor.index(codes, ann=adaptemb.AnnConfig(sample=sample, seed=seed))
    build_s = time.perf_counter() - start
    probes, _ = operating_nprobe(ann, queries, exact_ids)
    sizes = np.diff(ann.store.main.offsets)
    routed = ann.router.route(ann.scorer.query_vectors(ann.encode_queries(queries)), probes)
    return {"sample": sample, "sample_rows": ann.config.sample_size(len(codes)), "seed": seed, "cells": ann.cells,
            "build_s": round(build_s, 1), "nprobe": probes, "rows_per_query": int(sizes[routed].sum(axis=1).mean()),
            "calibrated_nprobe": ann.calibration.nprobe_for(TARGET),
            "recall_at": {p: round(recall(ann.search(queries, 10, nprobe=p)[1], exact_ids), 4)
                          for p in FIXED_PROBES if p <= ann.cells}}


def main() -> None:
    parser = corpus_parser(__doc__.split("\n")[0], cache_help="compressors and codes, as ann_recall_qps.py keeps them")
    parser.add_argument("--samples", default="100000,auto", help="k-means sample sizes, or 'auto'")
    parser.add_argument("--seeds", type=integers, default="0,1,2,3")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    samples = [s if s == "auto" else int(s) for s in args.samples.split(",")]
    vectors, split = load_data(args)
    corpus, queries, fit_rows = corpus_parts(vectors, split, args.queries)
    args.cache.mkdir(parents=True, exist_ok=True)
    load_before = list(os.getloadavg())
    for method in args.methods.split(","):
        compressor = fitted(method, fit_rows, args.cache, args.split_key)
        sizes: dict[str, Any] = {}
        for rows in [min(r, len(corpus)) for r in args.rows]:
            codes = encoded(compressor, corpus, rows, args.cache, method, args.split_key)
            exact_ids = compressor.index(codes).search(queries, 10)[1]
            runs = []
            for seed in args.seeds:
                for sample in samples:
                    runs.append(measured(compressor, codes, queries, exact_ids, sample, seed))
                    print(f"{method} @ {rows:,}: {runs[-1]}", flush=True)
            sizes[str(rows)] = {"runs": runs, "mean": {
                str(s): {key: round(float(np.mean([r[key] for r in runs if r["sample"] == s])), 1)
                         for key in ("nprobe", "rows_per_query")} for s in samples}}
        record = {"benchmark": "ann_sample_size", "data": args.vectors.name, "method": method, "queries": args.queries,
                  "target_recall_vs_exact": TARGET, "sizes": sizes, "note": args.note, "load_before": load_before,
                  "load_after": list(os.getloadavg()), "machine": machine_info()}
        write_record(RESULTS / f"ann_sample_{args.split_key}_{method.replace('+', '_')}.json", record)


if __name__ == "__main__":
    main()
