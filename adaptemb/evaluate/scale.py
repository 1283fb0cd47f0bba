"""The scale study of ``adaptemb bench --scale N``: every method searched through its own index at N rows.

The N rows are the dataset's corpus (first, so its relevance judgements still hold) followed by
noise-perturbed copies of corpus rows: ``x + noise * |x| * g / sqrt(d)`` with ``g`` standard normal, kept at
the source row's norm. Each method then encodes all N rows with its fitted encoder, so posting lists get the
feature frequencies real embeddings produce (not uniform random ones); the copies are distractors that no
query counts as relevant. Beside the methods run faiss on the float vectors: ``IndexFlatIP`` (exact, and the
reference for neighbour recall), HNSW and IVF-PQ. Per row: NDCG@10 and recall@10 against the judgements,
recall@10 against exact float search, encode and build seconds, search latency (the latency protocol), the
search structure's bytes where the backend reports them, and the peak memory growth while building and
searching (RSS sampled every 5 ms). With ``check_queries``, each method's index is also checked against
brute force through its own ``score()`` (the share of queries whose top-10 agree, ties aside).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import faiss
import numpy as np
import scipy.sparse as sp

from adaptemb.datasets import Dataset
from adaptemb.evaluate.ann_curves import FAISS_INDEXES, faiss_curves, method_curve
from adaptemb.evaluate.latency import time_search, timed
from adaptemb.evaluate.memory import PeakMemory
from adaptemb.evaluate.metrics import (
    PER_QUERY_NDCG,
    Row,
    evaluate_ranking,
    judged_ndcg_at_10,
    same_top_k,
)
from adaptemb.index import ScoreIndex
from adaptemb.method import Compressor
from adaptemb.progress import progress_bar
from adaptemb.ranking import neighbour_recall_at_k

BASELINES = ("flat", "hnsw", "ivfpq")
_ENCODE_BLOCK = 65536


@dataclass
class ScaleConfig:
    """What the scale study runs: ``rows`` in all, each method at ``budgets``: ``(None,)`` (the default), the budgets
    of its rows in the bench's main table (``adaptemb.evaluate.runner``; with byte budgets, the same bytes per
    vector); a tuple of ``k``, each method at those of them it supports."""

    rows: int
    noise: float = 0.75
    budgets: tuple[int | None, ...] = (None,)
    baselines: tuple[str, ...] = BASELINES
    batch_size: int = 512
    warmup: int = 1
    rounds: int = 3
    device: str = "cpu"
    seed: int = 0
    hnsw_m: int = 32
    hnsw_ef_search: int = 128
    ivf_nprobe: int = 16
    check_queries: int = 0
    """Also check on this many queries that each index returns the top-10 of the method's ``score()``."""
    ann: bool = False
    """Also sweep each method's approximate index and faiss' (``adaptemb.evaluate.ann_curves``)."""
    progress: bool = True


def scaled_corpus(corpus: np.ndarray, rows: int, *, noise: float, seed: int = 0) -> np.ndarray:
    """``rows`` float32 rows: ``corpus`` first, then noise-perturbed copies of randomly drawn corpus rows."""
    n, d = corpus.shape
    if rows < n:
        raise ValueError(f"--scale {rows:,} is smaller than the corpus ({n:,} rows); give at least {n:,}")
    if noise < 0:
        raise ValueError(f"noise must be >= 0; got {noise}")
    out = np.empty((rows, d), dtype=np.float32)
    out[:n] = corpus
    rng = np.random.default_rng(seed)
    for start in range(n, rows, _ENCODE_BLOCK):
        stop = min(start + _ENCODE_BLOCK, rows)
        source = corpus[rng.integers(0, n, size=stop - start)].astype(np.float32)
        norms = np.linalg.norm(source, axis=1, keepdims=True)
        copies = source + rng.standard_normal(source.shape, dtype=np.float32) * (noise / math.sqrt(d)) * norms
        copies *= norms / np.maximum(np.linalg.norm(copies, axis=1, keepdims=True), 1e-12)
        out[start:stop] = copies
    return out


def run_scale(data: Dataset, fitted: Sequence[tuple[Compressor, int | None]], config: ScaleConfig,
              notes: list[str], ann_points: list[Row] | None = None) -> list[Row]:
    """Rows for the faiss baselines and each (fitted compressor, budget) at ``config.rows`` rows; with
    ``config.ann``, the points of every approximate index go to ``ann_points``."""
    unknown = sorted(set(config.baselines) - set(BASELINES))
    if unknown:
        raise ValueError(f"unknown scale baseline(s) {', '.join(unknown)}; use any of {', '.join(BASELINES)}")
    corpus = scaled_corpus(np.asarray(data.corpus, dtype=np.float32), config.rows, noise=config.noise, seed=config.seed)
    queries = np.ascontiguousarray(data.queries, dtype=np.float32)
    qrels = sp.csr_matrix((data.qrels.data, data.qrels.indices, data.qrels.indptr), shape=(len(queries), config.rows))
    study = _Study(config, corpus, queries, qrels, notes)
    steps = ["flat", *(b for b in config.baselines if b != "flat"), *fitted]
    rows = []
    for step in progress_bar(steps, enabled=config.progress, desc=f"scale study at {config.rows:,} rows", unit="index"):
        if isinstance(step, str):
            rows.append(study.baseline(step))
            continue
        compressor, k = step
        try:
            rows.append(study.method(compressor, k))
        except (ValueError, TypeError, NotImplementedError, MemoryError) as err:
            notes.append(f"scale: {compressor.name} k={k} skipped, {type(err).__name__}: {err}")
    if config.ann and ann_points is not None:
        ann_points.extend(study.ann_points)
        points, more = faiss_curves(corpus, queries, study.exact_ids, FAISS_INDEXES, config.rounds, config.seed)
        ann_points.extend(points)
        notes.extend(more)
    flat = rows[0]["latency_median_s"]
    for row in rows:
        row["speedup_vs_flat"] = flat / max(row["latency_median_s"], 1e-12)
    return rows


class _Study:
    """The scaled corpus and queries, the exact top-10 of float search, and how every row is measured."""

    def __init__(self, config: ScaleConfig, corpus: np.ndarray, queries: np.ndarray, qrels: sp.csr_matrix,
                 notes: list[str]) -> None:
        self.config, self.corpus, self.queries, self.qrels, self.notes = config, corpus, queries, qrels, notes
        self.exact_ids: np.ndarray | None = None
        self.ann_points: list[Row] = []

    def baseline(self, name: str) -> Row:
        d = self.corpus.shape[1]
        with PeakMemory() as memory:
            index, build_s = timed(lambda: self._faiss_index(name))
            _, ids = index.search(self.queries, 10)
        if name == "flat":
            self.exact_ids = ids
        bytes_per_vector = {"flat": 4.0 * d, "hnsw": 4.0 * d + 8.0 * self.config.hnsw_m, "ivfpq": float(_pq_m(d)) + 8.0}[name]
        return self._row(f"faiss-{name}", None, ids, lambda q, k: index.search(q, k), self.queries, build_s=build_s,
                         encode_s=0.0, memory=memory, bytes_per_vector=bytes_per_vector, backend=_describe(index),
                         index_bytes=None)

    def method(self, compressor: Compressor, k: int | None) -> Row:
        codes, encode_s = timed(lambda: compressor.encode(self.corpus, k=k))
        with PeakMemory() as memory:
            index, build_s = timed(lambda: compressor.index(codes, device=self.config.device, k=k))
            query_codes = self.queries if index.second_stage is not None else index.encode_queries(self.queries)
            _, ids = index.search(query_codes, 10)
        row = self._row(compressor.name, k, ids, index.search, query_codes, build_s=build_s, encode_s=encode_s,
                        memory=memory, bytes_per_vector=codes.bytes_per_vector, backend=index.backend,
                        index_bytes=index.nbytes)
        row["active_dims"] = float(np.mean(codes.active_counts()))
        row["brute_force"] = index.brute_force
        if self.config.check_queries and not isinstance(query_codes, np.ndarray):
            row["score_check"] = self._check_against_score(compressor, index, query_codes, codes)
        if self.config.ann:
            self._ann_curve(compressor, k, codes, ids)
        return row

    def _ann_curve(self, compressor: Compressor, k: int | None, codes: Any, exact_codes_ids: np.ndarray) -> None:
        assert self.exact_ids is not None
        try:
            self.ann_points.extend(method_curve(compressor, k, codes, self.queries, self.exact_ids, exact_codes_ids,
                                                self.config.rounds))
        except (ValueError, TypeError, NotImplementedError, MemoryError) as err:
            self.notes.append(f"ann: {compressor.name} k={k} has no approximate index here, {type(err).__name__}: {err}")

    def _check_against_score(self, compressor: Compressor, index: Any, query_codes: Any, codes: Any) -> dict[str, Any]:
        """Top-10 of the index vs brute force through ``compressor.score`` (documents in blocks)."""
        queries = query_codes[np.arange(min(self.config.check_queries, len(query_codes)))]
        want = ScoreIndex(codes, compressor.score, query_batch=len(queries)).search(queries, 10)
        agree = same_top_k(index.search(queries, 10), want)
        return {"queries": len(queries), "identical_top_10": float(agree.mean())}

    def _row(self, method: str, k: int | None, ids: np.ndarray, search: Callable[[Any, int], Any], queries: Any, *,
             build_s: float, encode_s: float, memory: PeakMemory, bytes_per_vector: float, backend: str,
             index_bytes: int | None) -> Row:
        cfg = self.config
        latency = time_search(search, queries, batch_size=cfg.batch_size, warmup=cfg.warmup, rounds=cfg.rounds)
        assert self.exact_ids is not None
        return {
            "method": method, "k": k, "variant": "scale", "n": len(self.corpus),
            **{key: value for key, value in evaluate_ranking(ids, self.qrels).as_dict().items() if key.endswith("_at_10")},
            PER_QUERY_NDCG: judged_ndcg_at_10(ids, self.qrels),
            "neighbour_recall_at_10": float(np.mean(neighbour_recall_at_k(ids, self.exact_ids, 10))),
            "bytes_per_vector": bytes_per_vector, "encode_s": encode_s, "index_build_s": build_s,
            "index_mb": None if index_bytes is None else index_bytes / 2**20,
            "peak_memory_mb": None if memory.extra_bytes is None else memory.extra_bytes / 2**20,
            "backend": backend, **{f"latency_{key}": value for key, value in latency.as_dict().items()},
        }

    def _faiss_index(self, name: str) -> Any:
        n, d = self.corpus.shape
        cfg = self.config
        if name == "flat":
            index = faiss.IndexFlatIP(d)
        elif name == "hnsw":
            index = faiss.IndexHNSWFlat(d, cfg.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efSearch = cfg.hnsw_ef_search
        else:
            nlist = max(1, int(math.sqrt(n)))
            index = faiss.IndexIVFPQ(faiss.IndexFlatIP(d), d, nlist, _pq_m(d), 8, faiss.METRIC_INNER_PRODUCT)
            sample = self.corpus[np.random.default_rng(cfg.seed).permutation(n)[: min(n, max(64 * nlist, 65536))]]
            index.train(sample)
            index.nprobe = cfg.ivf_nprobe
        index.add(self.corpus)
        return index


def _pq_m(d: int) -> int:
    """Sub-quantizers of the IVF-PQ baseline: one byte per 8 dims (d / 8 bytes per vector), dividing d."""
    m = max(1, d // 8)
    while d % m:
        m -= 1
    return m


def _describe(index: Any) -> str:
    return {"IndexFlatIP": "faiss-flat", "IndexHNSWFlat": "faiss-hnsw", "IndexIVFPQ": "faiss-ivfpq"}.get(
        type(index).__name__, type(index).__name__)

