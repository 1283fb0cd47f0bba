"""Approximate search over adaptemb's codes: recall@10 against QPS, beside the exact index and faiss' IVF-PQ.

For each method (csr at 16 B, svd+binary at 32 B, fitted on the first ``--fit-rows`` rows of the corpus) and each
size in ``--rows`` (the first N corpus rows, encoded with the fitted compressor):

* ``exact = comp.index(codes)``: its QPS on the held-out queries (one batched call, ``--threads`` threads) and
  its top-10, the reference of "recall against exact";
* ``ann = comp.index(codes, ann="auto")``: build seconds, bytes per vector (codes, ids, cell offsets, centroids
  and routing basis, calibration), then for each ``nprobe`` of a sweep its QPS, recall@10 against ``exact`` and
  against the exact float top-10 (faiss ``IndexFlatIP`` on the float rows); the operating point (the fewest probes
  reaching 0.95 against exact) and its speed-up over exact; ``search(q, 10, recall=0.95)``, with the calibration
  from build and after ``tune`` on the first half of the queries (measured on the second half); ``save`` then
  ``adaptemb.load_index``: the seconds to open and whether the top-10 is the same;
* faiss ``IVF4096,PQ{B}x8`` (inner product, trained on the same fit rows): QPS and recall@10 against the float top-10
  per ``nprobe``, and its best recall at no less than the approximate index's QPS at the operating point.

Each record goes to ``benchmarks/results/ann_<method>_<rows>.json`` with the machine and the load before and after.
The data are a float32 ``.npy`` of embeddings and a JSON split (``corpus``, ``queries``, ``fit_sample`` row ranges)
as ``benchmarks``' Debian corpus writes them (``--vectors``, ``--split``); fitted compressors and codes are kept in
``--cache`` so a rerun skips the fit and the encode. ``--open-rows 10000000`` also times opening an index of 10M
rows (the largest size's codes repeated, in the cells trained on them): ``ann_open_<method>_<rows>.json``.

    python benchmarks/ann_recall_qps.py --vectors /data/debian-corpus/static-256.npy \\
        --split /data/debian-corpus/split.json --cache /tmp/ann-cache
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from arguments import integers
from records import write_record

import adaptemb
from adaptemb.evaluate.ann_curves import batched_qps
from adaptemb.evaluate.machine import machine_info

RESULTS = Path(__file__).parent / "results"
BUDGETS = {"csr": 16, "svd+binary": 32}
NPROBES = (4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512)
FAISS_NPROBES = (1, 2, 4, 8, 16, 32, 64, 128)
TARGET = 0.95


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean share of each query's ``truth`` top-10 found in its ``found`` row."""
    return float(np.mean([len(set(a.tolist()) & set(b.tolist())) / len(b) for a, b in zip(found, truth)]))


def corpus_parser(description: str, *, cache_help: str) -> argparse.ArgumentParser:
    """The parser of a run over the Debian corpus' rows: ``--vectors``, ``--split`` (``--split-key``), ``--methods``,
    ``--rows``, ``--threads`` and ``--cache``; each script adds its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--vectors", type=Path, required=True, help="float32 .npy of embeddings")
    parser.add_argument("--split", type=Path, required=True, help="JSON: corpus / queries / fit_sample row ranges")
    parser.add_argument("--split-key", default="static-256")
    parser.add_argument("--methods", default="csr,svd+binary")
    parser.add_argument("--rows", type=integers, default="250000,1000000", help="corpus sizes (capped at the corpus)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=Path("ann-bench-cache"), help=cache_help)
    return parser


def corpus_parts(vectors: np.ndarray, split: dict[str, Any], queries: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the corpus rows, memory-mapped; the first ``queries`` query rows; the fit sample), per the ``split``."""
    corpus = vectors[split["corpus"][0] : split["corpus"][1]]
    held = np.ascontiguousarray(vectors[split["queries"][0] : split["queries"][0] + queries], np.float32)
    fit_rows = np.ascontiguousarray(vectors[split["fit_sample"][0] : split["fit_sample"][1]], np.float32)
    return corpus, held, fit_rows


def timed(search: Any, queries: Any, **options: Any) -> float:
    """Seconds of one ``search(queries, 10, **options)``."""
    start = time.perf_counter()
    search(queries, 10, **options)
    return time.perf_counter() - start


def load_data(args: argparse.Namespace) -> tuple[np.ndarray, dict[str, Any]]:
    vectors = np.load(args.vectors, mmap_mode="r")
    split = json.loads(args.split.read_text())
    entry = split[args.split_key] if args.split_key in split else next(iter(split.values()))
    return vectors, entry


def fitted(method: str, fit_rows: np.ndarray, cache: Path, key: str) -> adaptemb.Compressor:
    """The method fitted on ``fit_rows`` of data ``key`` (read from ``cache`` when it was fitted before)."""
    path = cache / f"{key}_{method.replace('+', '_')}_{len(fit_rows)}.safetensors"
    if path.is_file():
        return adaptemb.load(path)
    start = time.perf_counter()
    compressor = adaptemb.fit(fit_rows, method, **({"progress": False} if method == "csr" else {}))
    print(f"{method}: fitted on {len(fit_rows):,} rows in {time.perf_counter() - start:.0f} s", flush=True)
    compressor.save(path)
    return compressor


def encoded(compressor: adaptemb.Compressor, corpus: np.ndarray, rows: int, cache: Path, name: str,
            key: str) -> adaptemb.Codes:
    path = cache / f"{key}_{name.replace('+', '_')}_{rows}.codes.npz"
    if path.is_file():
        return adaptemb.load_codes(path)
    parts = [compressor.encode(np.ascontiguousarray(corpus[s : min(s + 65536, rows)], np.float32), bytes=BUDGETS[name])
             for s in range(0, rows, 65536)]
    codes = type(parts[0]).concat(parts)
    adaptemb.save_codes(codes, path)
    return codes


def float_truth(corpus: np.ndarray, rows: int, queries: np.ndarray) -> np.ndarray:
    flat = faiss.IndexFlatIP(corpus.shape[1])
    for start in range(0, rows, 65536):
        flat.add(np.ascontiguousarray(corpus[start : min(start + 65536, rows)], np.float32))
    return flat.search(queries, 10)[1]


def sweep_ann(ann: Any, queries: Any, exact_ids: np.ndarray, truth: np.ndarray, rounds: int) -> list[dict[str, Any]]:
    points = []
    for nprobe in [p for p in NPROBES if p <= ann.cells]:
        qps, (_, ids) = batched_qps(lambda q, p=nprobe: ann.search(q, 10, nprobe=p), queries, rounds)
        points.append({"nprobe": nprobe, "qps": round(qps, 1), "recall_vs_exact": round(recall(ids, exact_ids), 4),
                       "recall_vs_float": round(recall(ids, truth), 4),
                       "calibrated_recall": round(ann.calibration.recall_at(nprobe), 4)})
        print(f"  ann nprobe {nprobe}: {points[-1]}", flush=True)
    return points


def knob(ann: Any, queries: Any, exact_ids: np.ndarray, rounds: int) -> dict[str, Any]:
    """``recall=TARGET`` from the build calibration, then tuned on the first half of the queries (the second half
    measured)."""
    qps, (_, ids) = batched_qps(lambda q: ann.search(q, 10, recall=TARGET), queries, rounds)
    half = len(queries) // 2
    build_nprobe = ann.calibration.nprobe_for(TARGET)
    ann.tune(queries[:half])
    _, tuned_ids = ann.search(queries[half:], 10, recall=TARGET)
    return {"target": TARGET, "build_calibration": {"nprobe": build_nprobe, "qps": round(qps, 1),
                                                   "recall_vs_exact": round(recall(ids, exact_ids), 4)},
            "tuned_on_first_half": {"nprobe": ann.calibration.nprobe_for(TARGET),
                                    "recall_vs_exact_second_half": round(recall(tuned_ids, exact_ids[half:]), 4)}}


def reopened(ann: Any, queries: Any, path: Path) -> dict[str, Any]:
    ann.save(path)
    os.sync()
    start = time.perf_counter()
    loaded = adaptemb.load_index(path)
    open_s = time.perf_counter() - start
    same = np.array_equal(loaded.search(queries, 10, nprobe=64)[1], ann.search(queries, 10, nprobe=64)[1])
    size = path.stat().st_size
    path.unlink()
    return {"open_s": round(open_s, 3), "same_top10": bool(same), "file_bytes": size}


def open_time(compressor: adaptemb.Compressor, codes: adaptemb.Codes, rows: int, queries: np.ndarray,
              cache: Path) -> dict[str, Any]:
    """Seconds ``adaptemb.load_index`` takes to open an index of ``rows`` documents (``codes`` repeated; the cells
    trained on ``codes``), and whether the reopened index gives the same top-10."""
    small = compressor.index(codes, ann=adaptemb.AnnConfig(calibration_queries=0))
    big_codes = type(codes).concat([codes] * -(-rows // len(codes)))[:rows]
    start = time.perf_counter()
    big = small.rebuilt(big_codes)
    rebuild_s = time.perf_counter() - start
    path = big.save(cache / "ann-open.safetensors")
    os.sync()
    start = time.perf_counter()
    loaded = adaptemb.load_index(path)
    open_s = time.perf_counter() - start
    same = np.array_equal(loaded.search(queries[:200], 10, nprobe=16)[1], big.search(queries[:200], 10, nprobe=16)[1])
    size = path.stat().st_size
    path.unlink()
    return {"rows": rows, "open_s": round(open_s, 3), "same_top10": bool(same), "file_bytes": size,
            "cells_assigned_s": round(rebuild_s, 1)}


def trained_ivfpq(fit_rows: np.ndarray, budget: int, cache: Path, key: str) -> tuple[Any, float]:
    """faiss ``IVF4096,PQ{budget}x8`` trained on ``fit_rows`` (read from ``cache`` when trained before; every size
    adds its rows to the same trained index), and the seconds the training took (None: read from the cache)."""
    path = cache / f"{key}_ivf4096_pq{budget}_{len(fit_rows)}.faiss"
    if path.is_file():
        return faiss.read_index(str(path)), None
    index = faiss.index_factory(fit_rows.shape[1], f"IVF4096,PQ{budget}x8", faiss.METRIC_INNER_PRODUCT)
    start = time.perf_counter()
    index.train(np.ascontiguousarray(fit_rows, np.float32))
    train_s = time.perf_counter() - start
    faiss.write_index(index, str(path))
    return index, train_s


def faiss_ivfpq(fit_rows: np.ndarray, corpus: np.ndarray, rows: int, queries: np.ndarray, budget: int,
                truth: np.ndarray, args: argparse.Namespace) -> dict[str, Any]:
    d, rounds = corpus.shape[1], args.rounds
    index, train_s = trained_ivfpq(fit_rows, budget, args.cache, args.split_key)
    start = time.perf_counter()
    for first in range(0, rows, 65536):
        index.add(np.ascontiguousarray(corpus[first : min(first + 65536, rows)], np.float32))
    add_s = time.perf_counter() - start
    points = []
    for nprobe in FAISS_NPROBES:
        index.nprobe = nprobe
        qps, (_, ids) = batched_qps(lambda q: index.search(q, 10), queries, rounds)
        points.append({"nprobe": nprobe, "qps": round(qps, 1), "recall_vs_float": round(recall(ids, truth), 4)})
        print(f"  faiss IVF4096,PQ{budget}x8 nprobe {nprobe}: {points[-1]}", flush=True)
    return {"factory": f"IVF4096,PQ{budget}x8", "add_s": round(add_s, 1),
            "train_s": None if train_s is None else round(train_s, 1),
            "bytes_per_vector": round(budget + 8 + 4096 * d * 4 / rows, 2), "points": points}


def operating_point(points: list[dict[str, Any]], exact_qps: float) -> dict[str, Any] | None:
    reached = [p for p in points if p["recall_vs_exact"] >= TARGET]
    if not reached:
        return None
    best = max(reached, key=lambda p: p["qps"])
    return {**best, "speedup_over_exact": round(best["qps"] / exact_qps, 2)}


def paired_speedup(exact: Any, ann: Any, queries: np.ndarray, nprobe: int, rounds: int) -> dict[str, Any]:
    """The operating point's speed-up over exact timed back to back: the two searches alternate ``rounds`` times
    (the shared machine's load falls on both alike); QPS are medians."""
    exact_times, ann_times = [], []
    for _ in range(rounds):
        exact_times.append(timed(exact.search, queries))
        ann_times.append(timed(ann.search, queries, nprobe=nprobe))
    exact_qps, ann_qps = len(queries) / np.median(exact_times), len(queries) / np.median(ann_times)
    return {"exact_qps": round(float(exact_qps), 1), "ann_qps": round(float(ann_qps), 1),
            "speedup": round(float(ann_qps / exact_qps), 2), "rounds": rounds}


def measure(method: str, compressor: adaptemb.Compressor, codes: adaptemb.Codes, data: dict[str, Any],
            args: argparse.Namespace) -> dict[str, Any]:
    queries, truth = data["queries"], data["truth"]
    exact = compressor.index(codes, device="cpu")
    exact_qps, (_, exact_ids) = batched_qps(lambda q: exact.search(q, 10), queries, args.rounds)
    start = time.perf_counter()
    ann = compressor.index(codes, ann="auto")
    build_s = time.perf_counter() - start
    print(f"{method} @ {len(codes):,}: exact {exact_qps:.0f} QPS; ann built in {build_s:.0f} s, {ann}", flush=True)
    points = sweep_ann(ann, queries, exact_ids, truth, args.rounds)
    point = operating_point(points, exact_qps)
    if point is not None:
        point["paired"] = paired_speedup(exact, ann, queries, point["nprobe"], args.rounds + 2)
    record = {"exact": {"qps": round(exact_qps, 1), "backend": exact.backend, "recall_vs_float": round(recall(exact_ids, truth), 4)},
              "ann": {"build_s": round(build_s, 1), "cells": ann.cells, "routing_dims": ann.router.dims,
                      "bytes_per_vector": round(ann.bytes_per_vector, 2), "code_bytes": codes.bytes_per_vector,
                      "backend": ann.backend, "calibration": ann.calibration.summary(), "points": points,
                      "operating_point": point}}
    record["ann"]["recall_knob"] = knob(ann, queries, exact_ids, args.rounds)
    record["ann"]["save_load"] = reopened(ann, queries, args.cache / "ann-bench.safetensors")
    pq = faiss_ivfpq(data["fit_rows"], data["corpus"], len(codes), queries, BUDGETS[method], truth, args)
    if point is not None:
        fast = [p for p in pq["points"] if p["qps"] >= point["qps"]]
        pq["best_recall_at_ann_qps"] = max((p["recall_vs_float"] for p in fast), default=None)
    record["faiss_ivfpq"] = pq
    return record


def main() -> None:
    parser = corpus_parser(__doc__.split("\n")[0], cache_help="fitted compressors and codes")
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--open-rows", type=int, default=0, help="also time opening an index of this many rows (the "
                        "last size's codes repeated); 0: skip")
    args = parser.parse_args()
    adaptemb.set_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    args.cache.mkdir(parents=True, exist_ok=True)
    vectors, split = load_data(args)
    corpus, queries, fit_rows = corpus_parts(vectors, split, args.queries)
    for rows in args.rows:
        rows = min(rows, len(corpus))
        truth = float_truth(corpus, rows, queries)
        for method in args.methods.split(","):
            load_before = list(os.getloadavg())
            compressor = fitted(method, fit_rows, args.cache, args.split_key)
            codes = encoded(compressor, corpus, rows, args.cache, method, args.split_key)
            data = {"queries": queries, "truth": truth, "corpus": corpus, "fit_rows": fit_rows}
            record = {"benchmark": "ann_recall_qps", "method": method, "budget_bytes": BUDGETS[method], "rows": rows,
                      "queries": len(queries), "dim": int(vectors.shape[1]), "threads": args.threads,
                      "data": str(args.vectors.name), "fit_rows": len(fit_rows),
                      **measure(method, compressor, codes, data, args),
                      "load_before": load_before, "load_after": list(os.getloadavg()), "machine": machine_info()}
            write_record(record_path(args.split_key, method, rows), record)
            if args.open_rows and rows == min(max(args.rows), len(corpus)):
                opened = open_time(compressor, codes, args.open_rows, queries, args.cache)
                write_record(RESULTS / f"ann_open_{args.split_key}_{method.replace('+', '_')}_{args.open_rows}.json",
                             {"benchmark": "ann_recall_qps/open", "method": method, **opened, "machine": machine_info()})
    sizes = sorted({min(rows, len(corpus)) for rows in args.rows})
    if len(sizes) > 1:
        write_record(RESULTS / f"ann_scaling_{args.split_key}.json", scaling(args.split_key, args.methods, sizes))


def record_path(key: str, method: str, rows: int) -> Path:
    return RESULTS / f"ann_{key}_{method.replace('+', '_')}_{rows}.json"


def scaling(key: str, methods: str, sizes: list[int]) -> dict[str, Any]:
    """How the QPS at recall 0.95 against exact falls from the smallest to the largest size, beside the exact scan's
    (read back from this run's records); the entries of methods this run did not measure are kept from the file."""
    path = RESULTS / f"ann_scaling_{key}.json"
    earlier = json.loads(path.read_text()) if path.is_file() else {}
    out: dict[str, Any] = {"benchmark": "ann_recall_qps/scaling", "data": key, "rows": [sizes[0], sizes[-1]]}
    if earlier.get("rows") == out["rows"]:
        out.update({name: entry for name, entry in earlier.items() if isinstance(entry, dict) and name != "machine"})
    for method in methods.split(","):
        small, large = (json.loads(record_path(key, method, rows).read_text()) for rows in (sizes[0], sizes[-1]))
        points = [record["ann"]["operating_point"] for record in (small, large)]
        out[method] = {"exact_qps_fall": round(small["exact"]["qps"] / large["exact"]["qps"], 2),
                       "ann_qps_fall_at_0.95": None if None in points else round(points[0]["qps"] / points[1]["qps"], 2),
                       "load": [small["load_before"], large["load_after"]]}
    return out


if __name__ == "__main__":
    main()
