"""``adaptemb bench --scale N --ann``: recall@10 against QPS of approximate indexes on the scale study's rows.

Each method's approximate index (``compressor.index(codes, ann="auto")``, over the same codes as its exact row) is
swept over ``nprobe``; beside it run faiss' approximate indexes on the float rows: IVF-RaBitQ (1 bit a dimension)
without and with a refine (SQ8 codes, 4 x the shortlist), IVF-PQ (d / 8 bytes) with the same refine, and HNSW32
(float rows) over ``efSearch``. Every point: recall@10 against the exact float top-10 (faiss ``IndexFlatIP``), QPS
of one batched search of every query (median of the rounds), and bytes per vector with the index's own overhead
(ids and cell offsets, centroids, graph links). ``recommend_ann`` picks per byte budget and target recall the
fastest point that reaches the recall within the bytes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import faiss
import numpy as np

from adaptemb.evaluate.latency import time_rounds
from adaptemb.evaluate.metrics import Row
from adaptemb.ranking import neighbour_recall_at_k

ANN_TARGETS = (0.9, 0.95)
"""Target recalls@10 (against the exact float top-10) the recommendation is made for."""
NPROBES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
EF_SEARCH = (16, 32, 64, 128, 256, 512)
REFINE_FACTOR = 4
FAISS_INDEXES = ("ivf-rabitq", "ivf-rabitq+refine", "ivf-pq+refine", "hnsw")


def _recall(ids: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean(neighbour_recall_at_k(ids, exact, 10)))


def batched_qps(search: Callable[[Any], Any], queries: Any, rounds: int) -> tuple[float, Any]:
    """(queries per second of one batched search, median of ``rounds`` timed after one untimed search; the untimed
    search's result)."""
    result = search(queries)
    times = time_rounds(lambda: search(queries), warmup=0, rounds=rounds)
    return len(queries) / max(float(np.median(times)), 1e-9), result


def method_curve(compressor: Any, k: int | None, codes: Any, queries: np.ndarray, exact: np.ndarray,
                 own_exact: np.ndarray | None, rounds: int) -> list[Row]:
    """The points of a method's approximate index over ``codes`` (``own_exact``: its exact index's top-10)."""
    start = time.perf_counter()
    ann = compressor.index(codes, ann="auto", k=k)
    build_s = time.perf_counter() - start
    query_codes = ann.encode_queries(queries)
    points = []
    for nprobe in [p for p in NPROBES if p <= ann.cells] + ([ann.cells] if ann.cells not in NPROBES else []):
        qps, (_, ids) = batched_qps(lambda q, p=nprobe: ann.search(q, 10, nprobe=p), query_codes, rounds)
        points.append({"series": f"{compressor.name} ann", "method": compressor.name, "k": k,
                       "setting": f"nprobe={nprobe}", "recall_at_10": _recall(ids, exact), "qps": qps,
                       "recall_vs_exact_codes": None if own_exact is None else _recall(ids, own_exact),
                       "bytes_per_vector": ann.bytes_per_vector, "build_s": build_s, "cells": ann.cells})
    return points


def faiss_curves(corpus: np.ndarray, queries: np.ndarray, exact: np.ndarray, names: Sequence[str], rounds: int,
                 seed: int) -> tuple[list[Row], list[str]]:
    """The points of faiss' approximate indexes ``names`` (``FAISS_INDEXES``) on the float rows, and notes."""
    n, d = corpus.shape
    nlist = max(1, 2 ** round(math.log2(max(4 * math.sqrt(n), 1))))
    nlist = min(nlist, max(1, n // 39))
    factories = {"ivf-rabitq": f"IVF{nlist},RaBitQ", "ivf-rabitq+refine": f"IVF{nlist},RaBitQ,Refine(SQ8)",
                 "ivf-pq+refine": f"IVF{nlist},PQ{_pq_m(d)}x8,Refine(SQ8)", "hnsw": "HNSW32"}
    sample = corpus[np.random.default_rng(seed).permutation(n)[: min(n, max(64 * nlist, 65536))]]
    points: list[Row] = []
    notes = []
    for name in names:
        start = time.perf_counter()
        index = faiss.index_factory(d, factories[name], faiss.METRIC_INNER_PRODUCT)
        if name != "hnsw":
            index.train(np.ascontiguousarray(sample))
        index.add(corpus)
        build_s = time.perf_counter() - start
        size = _faiss_bytes(index, name, n, d, nlist)
        for setting in _settings(index, name, nlist):
            qps, (_, ids) = batched_qps(lambda q, i=index: i.search(q, 10), queries, rounds)
            points.append({"series": f"faiss {name}", "method": f"faiss-{name}", "k": None, "setting": setting,
                           "recall_at_10": _recall(ids, exact), "qps": qps, "recall_vs_exact_codes": None,
                           "bytes_per_vector": size, "build_s": build_s, "cells": nlist if name != "hnsw" else None})
        notes.append(f"ann: faiss {name} is {factories[name]} (inner product), built in {build_s:.1f} s")
    return points, notes


def _settings(index: Any, name: str, nlist: int) -> Any:
    """Set each search setting of the sweep on ``index`` in turn, yielding its label."""
    if name == "hnsw":
        for ef in EF_SEARCH:
            index.hnsw.efSearch = ef
            yield f"efSearch={ef}"
        return
    ivf = faiss.extract_index_ivf(index)
    if "refine" in name:
        index.k_factor = REFINE_FACTOR
    for nprobe in [p for p in NPROBES if p <= nlist]:
        ivf.nprobe = nprobe
        yield f"nprobe={nprobe}"


def _faiss_bytes(index: Any, name: str, n: int, d: int, nlist: int) -> float:
    """Bytes per vector: the codes (and refine codes), 8 B of id, the centroids spread over the rows; HNSW: the
    float rows and 2 x 32 int32 links on level 0."""
    if name == "hnsw":
        return 4.0 * d + 2 * 32 * 4
    return float(index.sa_code_size()) + 8.0 + 4.0 * d * nlist / n


def _pq_m(d: int) -> int:
    m = max(1, d // 8)
    while d % m:
        m -= 1
    return m


def recommend_ann(points: list[Row], budgets: Sequence[float], targets: Sequence[float] = ANN_TARGETS) -> list[Row]:
    """Per byte budget and target recall: the fastest point within the bytes that reaches the recall, or None
    (with the best recall any point within the bytes reaches)."""
    out = []
    for budget in budgets:
        within = [p for p in points if p["bytes_per_vector"] <= budget]
        for target in targets:
            reached = [p for p in within if p["recall_at_10"] >= target]
            best = max(reached, key=lambda p: p["qps"], default=None)
            out.append({"budget_bytes": float(budget), "target_recall": target,
                        "best": None if best is None else {key: best[key] for key in (
                            "series", "k", "setting", "recall_at_10", "qps", "bytes_per_vector")},
                        "best_recall_within_bytes": max((p["recall_at_10"] for p in within), default=None)})
    return out


def recommendation_lines(recommendation: list[Row]) -> list[str]:
    """One line per (budget, target): what to use, or why nothing does."""
    lines = []
    for entry in recommendation:
        head = f"{entry['budget_bytes']:g} B, recall@10 >= {entry['target_recall']:g}: "
        best = entry["best"]
        if best is None:
            reach = entry["best_recall_within_bytes"]
            lines.append(head + ("no index fits the bytes" if reach is None else
                                 f"none reaches it (best within the bytes: {reach:.3f})"))
        else:
            k = "" if best["k"] is None else f" k={best['k']}"
            lines.append(head + f"{best['series']}{k} at {best['setting']}: recall {best['recall_at_10']:.3f}, "
                         f"{best['qps']:,.0f} QPS, {best['bytes_per_vector']:.1f} B/vector")
    return lines
