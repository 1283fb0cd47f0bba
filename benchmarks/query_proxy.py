"""Which proxy computed on a query sample picks the rotation (and bits) of svd+binary that real queries agree with
(issue 46)?

Usage::

    python benchmarks/query_proxy.py [--data default | wordnet-examples-768] [--docs 5000] [--bytes 8,16,32,64]
                                     [--sample 500] [--splits 20] [--out benchmarks/results/query_proxy_DATA.json]

Candidates (through the public path): ``adaptemb.fit(C, "svd+binary", rotation=R, bits_per_dim=b,
itq_iterations=20, byte_budgets=B)`` for R in none, random (seed 0), itq and b in 1, 2 (2: 2 bits on half the rank
where that half is a rank). Per budget each candidate's codes (``encode(C, bytes=B)``) are scored against every
query (``encode_queries`` and ``score``: float queries against the sign codes, as the index scores them), and
each query gets its NDCG@10 by the qrels and the proxies below, each against the exact float scores ``Q C^T``:

* ``r10@10`` (what ``fit(x, queries=...)`` uses): the share of the float top-10 in the candidate's top-10;
* ``r100@100``, ``r10@100``, ``r1@10``: the share of the float top-k found in the candidate's top-m;
* ``ndcg_float10``: NDCG@10 of the candidate's ranking with the float top-10 as graded relevance (10 .. 1);
* ``spearman100``: Spearman correlation of the candidate's and the float scores over the float top-100;
* ``r10@10_halfwhite``: as ``r10@10`` against the top-10 of the half-whitened float scores (``half_whitened_top10``).

A split draws ``--sample`` queries as the sample and evaluates on the others; split 0 is the split of
``benchmarks/rotation_default.py --sample`` (seed 46), the others seeded 1 .. ``--splits``-1. For each proxy and
budget: the candidate the sample's mean proxy picks (ties to the cheaper: 1 bit before 2, none before random
before itq), its NDCG@10 on the other queries minus the best candidate's there (the regret; the bar is >= -0.005),
for split 0 and the mean and worst over splits. ``--rotations-only``: only 1-bit candidates (the bar's three
rotations) are picked among.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import rankdata

import adaptemb
from adaptemb.evaluate.metrics import ndcg_at_k
from adaptemb.ranking import top_k

sys.path.insert(0, str(Path(__file__).parent))
from arguments import data_set_parser
from compose_frontier import dataset
from records import data_fields, write_record

CANDIDATES = [(rotation, bits) for bits in (1, 2) for rotation in ("none", "random", "itq")]
PROXIES = ("r10@10", "r100@100", "r10@100", "r1@10", "ndcg_float10", "spearman100", "r10@10_halfwhite")


def overlap(found: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per row: |found ∩ truth| / |truth|."""
    hits = (found[:, :, None] == truth[:, None, :]).any(axis=1)
    return hits.mean(axis=1)


def float_graded_ndcg(ranked: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """NDCG@10 of ``ranked`` (q, 10) with the float top-10 ``truth`` as relevance 10, 9, .., 1."""
    gains = np.zeros(ranked.shape)
    for rank, column in enumerate(truth.T):
        gains += (ranked == column[:, None]) * (10 - rank)
    discounts = 1 / np.log2(np.arange(2, 12))
    ideal = (np.arange(10, 0, -1) * discounts).sum()
    return (gains * discounts).sum(axis=1) / ideal


def spearman_over(code: np.ndarray, exact: np.ndarray, ids: np.ndarray) -> np.ndarray:
    a = rankdata(np.take_along_axis(code, ids, axis=1), axis=1)
    b = rankdata(np.take_along_axis(exact, ids, axis=1), axis=1)
    a, b = a - a.mean(axis=1, keepdims=True), b - b.mean(axis=1, keepdims=True)
    return (a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))


def half_whitened_top10(data: Any) -> np.ndarray:
    """Each query's top-10 under the corpus' full-rank PCA with component j scaled by 1 / sqrt(its std): a reference
    that equalises the corpus' directions halfway (what sign bits on unrotated components do in part)."""
    centred = data.corpus.astype(np.float64) - data.corpus.mean(axis=0)
    _, singular, vt = np.linalg.svd(centred, full_matrices=False)
    scale = vt.T / np.sqrt(singular / np.sqrt(len(centred)))
    return top_k((data.queries @ scale) @ (centred @ scale).T, 10)[1]


def per_query(code: np.ndarray, exact: np.ndarray, truth: dict[Any, np.ndarray], qrels: Any) -> dict[str, np.ndarray]:
    """Every proxy and the NDCG@10 of one candidate's score matrix, per query."""
    ranked100 = top_k(code, 100)[1]
    return {
        "ndcg@10": ndcg_at_k(ranked100[:, :10], qrels, 10),
        "r10@10": overlap(ranked100[:, :10], truth[10]),
        "r100@100": overlap(ranked100, truth[100]),
        "r10@100": overlap(ranked100, truth[10]),
        "r1@10": overlap(ranked100[:, :10], truth[1]),
        "ndcg_float10": float_graded_ndcg(ranked100[:, :10], truth[10]),
        "spearman100": spearman_over(code, exact, truth[100]),
        "r10@10_halfwhite": overlap(ranked100[:, :10], truth["halfwhite"]),
    }


def candidate_stats(data: Any, budgets: list[int]) -> dict[str, dict[int, dict[str, Any]]]:
    """Per candidate label and budget: the code width, bits and per-query statistics."""
    exact = data.queries @ data.corpus.T
    truth: dict[Any, np.ndarray] = {k: top_k(exact, k)[1] for k in (1, 10, 100)}
    truth["halfwhite"] = half_whitened_top10(data)
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for rotation, bits in CANDIDATES:
        fitted = adaptemb.fit(data.corpus, "svd+binary", rotation=rotation, bits_per_dim=bits, itq_iterations=20,
                              byte_budgets=budgets)
        label = f"{rotation}/{bits}bit"
        out[label] = {}
        for nbytes in budgets:
            codes = fitted.encode(data.corpus, bytes=nbytes)
            width_bits = fitted.fit_report["bits_per_dim"][codes.dim]
            code = fitted.score(fitted.encode_queries(data.queries, k=codes.dim), codes)
            out[label][nbytes] = {"width": codes.dim, "bits": width_bits,
                                  "stats": per_query(code, exact, truth, data.qrels)}
        print(label, {b: (v["width"], v["bits"], round(float(np.nanmean(v["stats"]["ndcg@10"])), 4),
                          round(float(v["stats"]["r10@10"].mean()), 4)) for b, v in out[label].items()}, flush=True)
    return out


def splits(queries: int, sample: int, count: int) -> list[np.ndarray]:
    """Boolean sample masks: split 0 as rotation_default.split_queries (seed 46), then seeds 1 .. count-1."""
    masks = []
    for seed in [46, *range(1, count)]:
        mask = np.zeros(queries, dtype=bool)
        mask[np.random.default_rng(seed).permutation(queries)[:sample]] = True
        masks.append(mask)
    return masks


def distinct(stats: dict[str, dict[int, dict[str, Any]]], nbytes: int, rotations_only: bool) -> list[str]:
    """The candidates at ``nbytes`` that are different codes (a 2-bit fit that kept 1 bit there is its 1-bit twin)."""
    return [label for label, per in stats.items()
            if (label.endswith("/1bit") or per[nbytes]["bits"] == 2) and not (rotations_only and label.endswith("/2bit"))]


def regrets(stats: dict[str, dict[int, dict[str, Any]]], budgets: list[int], masks: list[np.ndarray],
            rotations_only: bool) -> dict[str, Any]:
    """Per budget and proxy: the pick and regret on split 0, the mean and worst regret over the splits."""
    out: dict[str, Any] = {}
    for nbytes in budgets:
        labels = distinct(stats, nbytes, rotations_only)
        row: dict[str, Any] = {"candidates": labels, "split0_ndcg": {}}
        for name in PROXIES:
            picks, losses = [], []
            for mask in masks:
                proxy = [stats[label][nbytes]["stats"][name][mask].mean() for label in labels]
                ndcg = [np.nanmean(stats[label][nbytes]["stats"]["ndcg@10"][~mask]) for label in labels]
                pick = int(np.argmax(proxy))
                picks.append(labels[pick])
                losses.append(float(ndcg[pick] - max(ndcg)))
            row[name] = {"split0_pick": picks[0], "split0_regret": round(losses[0], 4),
                         "mean_regret": round(float(np.mean(losses)), 4), "worst_regret": round(min(losses), 4),
                         "within_bar": round(float(np.mean(np.array(losses) >= -0.005)), 3)}
        for label in labels:
            row["split0_ndcg"][label] = round(float(np.nanmean(stats[label][nbytes]["stats"]["ndcg@10"][~masks[0]])), 4)
        out[str(nbytes)] = row
    return out


def main() -> None:
    parser = data_set_parser(__doc__.split("\n\n")[0], bytes_default="8,16,32,64")
    parser.add_argument("--sample", type=int, default=500)
    parser.add_argument("--splits", type=int, default=20)
    args = parser.parse_args()
    data = dataset(args.data, args.docs, 0)
    load_before = list(os.getloadavg())
    stats = candidate_stats(data, args.bytes)
    masks = splits(len(data.queries), args.sample, args.splits)
    result = {mode: regrets(stats, args.bytes, masks, mode == "rotations_only") for mode in ("rotations_only", "all")}
    for mode, per_budget in result.items():
        for nbytes, row in per_budget.items():
            print(mode, nbytes, row["split0_ndcg"])
            for name in PROXIES:
                print(f"   {name:<13}", row[name], flush=True)
    name = data.name if args.data == "default" else f"{args.data}-{args.docs}"
    means = {label: {str(b): {key: round(float(np.nanmean(v)), 4) for key, v in per["stats"].items()} | {
        "width": per["width"], "bits": per["bits"]} for b, per in by_budget.items()} for label, by_budget in stats.items()}
    record = {**data_fields("query_proxy", data), "dataset": name, "bytes": args.bytes, "sample": args.sample,
              "splits": args.splits, "candidates_all_queries": means, "regrets": result, "load_before": load_before,
              "load_after": list(os.getloadavg())}
    from adaptemb.evaluate.machine import machine_info

    write_record(args.out or Path(__file__).parent / "results" / f"query_proxy_{args.data}.json",
                 record | {"machine": machine_info()})


if __name__ == "__main__":
    main()
