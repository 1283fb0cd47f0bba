"""The bench's funnel rows (``adaptemb bench --rerank``): shortlist with a method's codes, rerank the shortlist with
float32 vectors or a fixed-size method's codes in the embedding space (``BenchConfig.rerank_stores``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from adaptemb.api import get_compressor
from adaptemb.codes import Codes
from adaptemb.evaluate.latency import query_batch, summarize, time_rounds
from adaptemb.evaluate.metrics import (
    PER_QUERY_NDCG,
    Row,
    evaluate_ranking,
    judged_ndcg_at_10,
    one_nn_accuracy,
)
from adaptemb.index import FunnelIndex
from adaptemb.indexing import CompressedIndex
from adaptemb.method import Compressor
from adaptemb.ranking import neighbour_recall_at_k
from adaptemb.registry import get_registry

if TYPE_CHECKING:
    from adaptemb.evaluate.context import RunContext

REFERENCE = "float32"
"""The full-precision row's method name, and the rerank store of the float32 vectors."""


def rerank_rows(compressor: Compressor, index: CompressedIndex, queries: Codes, docs: Codes, base: Row,
                 ctx: RunContext) -> list[Row]:
    rows = []
    for store_name in ctx.config.rerank_stores:
        if store_name == compressor.name:
            continue
        store = _rerank_store(store_name, ctx)
        if store is None:
            continue
        funnel = FunnelIndex(index, store, shortlist=ctx.config.shortlist)
        scores, ids = funnel.search(queries, ctx.queries, ctx.config.depth)
        row = _measure_funnel(ctx, funnel, queries, ids, docs, store)
        rows.append(ctx.keep_ranking({**base, "variant": f"rerank-{store_name}", **row, "note":
                                      f"shortlist {ctx.config.shortlist} by {compressor.name} codes, rerank with {store_name}"},
                                     scores, ids))
    return rows


def _rerank_store(name: str, ctx: RunContext) -> Codes | np.ndarray | None:
    if name not in ctx.stores:
        if name == REFERENCE:
            ctx.stores[name] = ctx.corpus
        elif name not in get_registry():
            ctx.notes.append(f"rerank store {name!r} is not a registered method; skipped")
            return None
        else:
            codes = get_compressor(name, seed=ctx.config.seed).fit(ctx.corpus).encode(ctx.corpus)
            if codes.dim != ctx.corpus.shape[1]:
                ctx.notes.append(f"rerank store {name!r} does not keep the embedding space; skipped")
                return None
            ctx.stores[name] = codes
    return ctx.stores[name]


def _measure_funnel(ctx: RunContext, funnel: FunnelIndex, queries: Codes, ids: np.ndarray, docs: Codes,
                    store: Codes | np.ndarray) -> Row:
    rows = np.arange(ctx.config.batch_size) % len(queries)
    batch_codes, batch_float = query_batch(queries, ctx.config.batch_size), ctx.queries[rows]
    times = time_rounds(lambda: funnel.search(batch_codes, batch_float, 10), warmup=ctx.config.warmup,
                        rounds=ctx.config.rounds)
    latency = summarize(times, batch_size=ctx.config.batch_size, warmup=ctx.config.warmup)
    store_bytes = store.bytes_per_vector if isinstance(store, Codes) else 4.0 * store.shape[1]
    total = docs.bytes_per_vector + store_bytes
    return {
        **evaluate_ranking(ids, ctx.data.qrels, ctx.data.judged).as_dict(),
        PER_QUERY_NDCG: judged_ndcg_at_10(ids, ctx.data.qrels, ctx.data.judged),
        "neighbour_recall_at_10": float(np.mean(neighbour_recall_at_k(ids, ctx.exact_ids, 10))),
        "one_nn_accuracy": one_nn_accuracy(ids[:, 0], ctx.data.labels, ctx.data.query_labels)
        if ctx.data.labels is not None and ctx.data.query_labels is not None else None,
        "code_kind": docs.kind, "query_kind": queries.kind, "code_dim": docs.dim,
        "active_dims": float(np.mean(docs.active_counts())),
        "bytes_per_vector": total, "compression_ratio": 4.0 * ctx.corpus.shape[1] / total,
        "backend": f"funnel({getattr(funnel.first, 'backend', '?')})", "device": ctx.device,
        **{f"latency_{key}": value for key, value in latency.as_dict().items()},
    }
