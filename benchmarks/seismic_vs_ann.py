"""Seismic (pyseismic-lsr) over csr's codes beside adaptemb's own approximate index: recall@10 against QPS.

The Seismic recipe for learned sparse vectors (Bruch et al., SIGIR 2024): each posting list pruned to its largest
entries (``n_postings`` a component on average), its documents clustered into blocks with a summary vector each, a
block skipped when its summary scores below ``heap_factor`` times the current k-th score, the survivors rescored
exactly from a forward index; a query walks the lists of its ``query_cut`` largest components.

Its input is csr's codes at 16 B: the dequantised document rows (``PackedSparseCodes.to_csr()``: 14 non-negative
entries over 1,024 components, float16 codebook values), given by component id
(``SeismicDataset.add_documents_by_id``), and csr's query vectors (``ProjectedQueries.to_dense()``: 1,024
components, dense, about 94 % of them negative), whose inner product with a row is csr's exact score. Two forms:

* ``signed``: both as they are. Seismic's block summaries bound a block's scores only for non-negative query
  weights, so with these queries its recall stops near 0.3 however much it scans (shown at two points);
* ``shifted``: both made non-negative without changing any query's ranking: every query component plus
  ``c = -min(q)``, one more component ``c``; every document one more component ``S - sum(d)`` (``S``: the largest
  row sum), so a document scores ``q.d + c * S``.

Seismic's brute-force search of each form must find the exact index's top-10 (recorded; Seismic stores values as
float16, so the shifted form's extra component is rounded). Measured on ``--queries`` held-out queries (one batched
call each, ``--threads`` threads): ``exact = comp.index(codes)`` (QPS, the reference top-10);
``comp.index(codes, ann="auto")`` (build seconds, bytes per vector, QPS and recall@10 against exact per nprobe);
``seismic.SeismicIndex.build_from_dataset`` per ``n_postings`` of ``GRID`` (build seconds, the saved index's bytes,
QPS and recall per ``query_cut`` and ``heap_factor``); and which reaches ``--target`` recall at the higher QPS.

    python benchmarks/seismic_vs_ann.py --vectors /data/debian-corpus/static-256.npy \\
        --split /data/debian-corpus/split.json --cache /tmp/ann-bench-cache --rows 250000
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from ann_recall_qps import encoded, fitted, load_data, recall
from records import write_record

import adaptemb
from adaptemb.evaluate.ann_curves import batched_qps
from adaptemb.evaluate.machine import machine_info

RESULTS = Path(__file__).parent / "results"
NPROBES = (4, 8, 16, 24, 32, 48, 64, 96, 128)
GRID = {"signed": ((3500,), (16, 64), (1.0,)), "shifted": ((500, 1500, 3500), (2, 4, 8, 16), (0.7, 0.9))}
"""Per input form: Seismic's ``n_postings`` (3,500: about every posting at 250k rows of 14 entries over 1,024
components), ``query_cut`` and ``heap_factor`` values swept (the signed form only to show where its recall stops)."""


def shifted_docs(matrix: sp.csr_matrix) -> sp.csr_matrix:
    """The non-negative form's documents: each row with one more component, ``S - sum(row)`` (``S``: the largest
    row sum), so that a query shifted by ``c`` (``shifted_queries``) scores ``q.d + c * S``: the same order."""
    mass = np.asarray(matrix.sum(axis=1)).ravel()
    extra = sp.csr_matrix((mass.max() - mass).reshape(-1, 1).astype(np.float32))
    out = sp.hstack([matrix, extra], format="csr", dtype=np.float32)
    out.eliminate_zeros()
    return out


def shifted_queries(vectors: np.ndarray) -> np.ndarray:
    """The non-negative form's queries: each row plus ``c = max(0, -min(row))`` on every component, and ``c`` as
    the extra component."""
    shift = np.maximum(0, -vectors.min(axis=1, keepdims=True))
    return np.hstack([vectors + shift, shift]).astype(np.float32)


def seismic_dataset(matrix: sp.csr_matrix) -> Any:
    """A ``SeismicDataset`` of the CSR rows, by component id; document ids are the row numbers."""
    import seismic

    matrix = matrix.copy()
    matrix.sort_indices()
    dataset = seismic.SeismicDataset(dim=matrix.shape[1])
    added = dataset.add_documents_by_id([str(i) for i in range(matrix.shape[0])], matrix.indices.astype(np.int64),
                                        matrix.data.astype(np.float32), matrix.indptr.astype(np.int64))
    if added != matrix.shape[0]:
        raise ValueError(f"Seismic took {added} of {matrix.shape[0]} rows (a row without entries is skipped)")
    return dataset


def seismic_queries(vectors: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """(query ids, components as Seismic's strings, values) of dense query rows: every component given."""
    import seismic

    names = np.array([str(j) for j in range(vectors.shape[1])], dtype=seismic.get_seismic_string())
    ids = np.array([str(i) for i in range(len(vectors))], dtype=seismic.get_seismic_string())
    return ids, [names] * len(vectors), [np.ascontiguousarray(row, np.float32) for row in vectors]


def result_ids(results: list[list[tuple[str, float, str]]], k: int) -> np.ndarray:
    """(queries, k) document ids of a batch search; each result list is placed by the query id its tuples carry
    (the lists do not come back in query order when searched in parallel)."""
    out = np.full((len(results), k), -1, np.int64)
    for found in results:
        if found:
            ids = [int(doc) for _, _, doc in found[:k]]
            out[int(found[0][0]), : len(ids)] = ids
    return out


def saved_bytes(index: Any) -> int:
    """Bytes of the files ``index.save`` writes."""
    with tempfile.TemporaryDirectory() as folder:
        index.save(os.path.join(folder, "seismic"))
        return sum(path.stat().st_size for path in Path(folder).rglob("*") if path.is_file())


def sweep_seismic(dataset: Any, query_vectors: np.ndarray, exact_ids: np.ndarray, args: argparse.Namespace,
                  n_postings: int, form: str) -> dict[str, Any]:
    """Seismic's index of ``dataset`` (``n_postings`` postings per component on average): its build, bytes, and
    recall against ``exact_ids`` / QPS per (query_cut, heap_factor)."""
    import seismic

    start = time.perf_counter()
    index = seismic.SeismicIndex.build_from_dataset(dataset, n_postings=n_postings, num_threads=args.threads)
    build_s = time.perf_counter() - start
    ids, components, values = seismic_queries(query_vectors)
    points = []
    _, cuts, heaps = GRID[form]
    for cut in cuts:
        for heap in heaps:
            qps, found = batched_qps(lambda _, c=cut, h=heap: index.batch_search(
                ids, components, values, k=10, query_cut=c, heap_factor=h, num_threads=args.threads), ids, args.rounds)
            points.append({"query_cut": cut, "heap_factor": heap, "qps": round(qps, 1),
                           "recall_vs_exact": round(recall(result_ids(found, 10), exact_ids), 4)})
            print(f"  seismic n_postings={n_postings} {points[-1]}", flush=True)
    size = saved_bytes(index)
    return {"n_postings": n_postings, "build_s": round(build_s, 1), "index_bytes": size,
            "bytes_per_vector": round(size / args.rows, 2), "points": points}


def sweep_ann(compressor: Any, codes: Any, query_codes: Any, exact_ids: np.ndarray, rounds: int) -> dict[str, Any]:
    """adaptemb's approximate index (``ann="auto"``): build, bytes, recall against exact / QPS per nprobe."""
    start = time.perf_counter()
    ann = compressor.index(codes, ann="auto")
    build_s = time.perf_counter() - start
    points = []
    for nprobe in [p for p in NPROBES if p <= ann.cells]:
        qps, (_, ids) = batched_qps(lambda q, p=nprobe: ann.search(q, 10, nprobe=p), query_codes, rounds)
        points.append({"nprobe": nprobe, "qps": round(qps, 1), "recall_vs_exact": round(recall(ids, exact_ids), 4)})
        print(f"  ann {points[-1]}", flush=True)
    return {"build_s": round(build_s, 1), "cells": ann.cells, "bytes_per_vector": round(ann.bytes_per_vector, 2),
            "points": points}


def seismic_input(codes: Any, query_codes: Any, form: str) -> tuple[sp.csr_matrix, np.ndarray]:
    """(document rows, query rows) given to Seismic: ``signed``: the dequantised csr rows and csr's query vectors as
    they are; ``shifted``: both made non-negative without changing any query's ranking (``shifted_docs``)."""
    matrix = codes.to_csr()
    vectors = np.asarray(query_codes.to_dense(), np.float32)
    return (matrix, vectors) if form == "signed" else (shifted_docs(matrix), shifted_queries(vectors))


def best_at(points: list[dict[str, Any]], target: float) -> dict[str, Any] | None:
    """The fastest point reaching ``target`` recall against exact (None: none does)."""
    reached = [p for p in points if p["recall_vs_exact"] >= target]
    return max(reached, key=lambda p: p["qps"]) if reached else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vectors", type=Path, required=True)
    parser.add_argument("--split", type=Path, required=True)
    parser.add_argument("--split-key", default="static-256")
    parser.add_argument("--cache", type=Path, required=True, help="fitted compressors and codes (ann_recall_qps.py's)")
    parser.add_argument("--fit-rows", type=int, default=100_000)
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    load_before = list(os.getloadavg())
    adaptemb.set_threads(args.threads)
    vectors, split = load_data(args)
    fit = slice(*split["fit_sample"])
    compressor = fitted("csr", np.ascontiguousarray(vectors[fit], np.float32), args.cache, args.split_key)
    corpus = vectors[slice(*split["corpus"])]
    codes = encoded(compressor, corpus, args.rows, args.cache, "csr", args.split_key)
    raw = np.ascontiguousarray(vectors[split["queries"][0] : split["queries"][0] + args.queries], np.float32)
    exact = compressor.index(codes)
    query_codes = exact.encode_queries(raw)
    exact_qps, (_, exact_ids) = batched_qps(lambda q: exact.search(q, 10), query_codes, args.rounds)
    ours = sweep_ann(compressor, codes, query_codes, exact_ids, args.rounds)
    theirs = []
    for form in ("signed", "shifted"):
        matrix, query_vectors = seismic_input(codes, query_codes, form)
        dataset = seismic_dataset(matrix)
        brute = dataset.batch_search(*seismic_queries(query_vectors), k=10, num_threads=args.threads)
        conversion = recall(result_ids(brute, 10), exact_ids)
        print(f"{form}: Seismic's brute force finds {conversion:.4f} of exact's top-10", flush=True)
        theirs += [{"form": form, "brute_force_recall_vs_exact": round(conversion, 4),
                    **sweep_seismic(dataset, query_vectors, exact_ids, args, n, form)} for n in GRID[form][0]]
    ours_best = best_at(ours["points"], args.target)
    seismic_best = max((dict(best_at(run["points"], args.target) or {}, form=run["form"], n_postings=run["n_postings"])
                        for run in theirs),
                       key=lambda p: p.get("qps", 0))
    winner = ("adaptemb" if ours_best and ours_best["qps"] >= seismic_best.get("qps", 0) else
              "seismic" if seismic_best.get("qps") else "neither")
    record = {"benchmark": "seismic_vs_ann", "rows": args.rows, "queries": args.queries, "bytes": 16,
              "threads": args.threads, "exact_qps": round(exact_qps, 1),
              "adaptemb_ann": ours, "seismic": theirs,
              "target": args.target, "adaptemb_best": ours_best, "seismic_best": seismic_best, "winner": winner,
              "seismic_version": _seismic_version(), "load_before": load_before, "load_after": list(os.getloadavg()),
              "machine": machine_info()}
    write_record(RESULTS / f"seismic_vs_ann_{args.split_key}_csr_{args.rows}.json", record)


def _seismic_version() -> str:
    from importlib.metadata import version

    return version("pyseismic-lsr")


if __name__ == "__main__":
    main()
