"""CLLR against its issue's bar: NDCG@10 at r = 32 and 64 with 500 training pairs, and with no supervision.

Usage::

    python benchmarks/cllr_bar.py --data wordnet-768 --splits 2,3            # the bar's setting, defaults
    python benchmarks/cllr_bar.py --data wordnet-768 --splits 0 -p alpha=30  # one override (sweeps)
    python benchmarks/cllr_bar.py --data wordnet-768 --splits 0 --sweep      # the recorded sweep (split 0 only)
    python benchmarks/cllr_bar.py --data wordnet-768 --splits 0,1 --sweep-nesting --threads 1  # the nesting sweep (splits 0, 1)
    python benchmarks/cllr_bar.py --data wordnet-768 --splits 0,1 --sweep-stopping --threads 1  # early stopping (splits 0, 1)
    python benchmarks/cllr_bar.py --data wordnet-768 --splits 0,1 --extra-pairs 3000 --sweep-stopping --entries 0,1 --threads 1

The setting of the bar, on each split (a seeded permutation of the 5,000 queries): 500 training queries and 500
other (held-out) queries; the corpus is the 5,000 rows made of the gold documents of those 1,000 queries plus
other corpus rows drawn at random. Every method is fitted on those 5,000 rows; ``cllr`` with pairs also gets the
500 (training query, its gold document) pairs. Scored on the 500 held-out queries: NDCG@10 (adaptemb.evaluate),
through each compressor's own index (queries through ``encode_queries``), like ``adaptemb bench``.

Rows: ``full`` (exact inner product on the float32 embeddings), ``svd`` (PCA), ``mrl`` (prefix truncation),
``cllr`` fitted with the pairs, ``cllr`` fitted on the rows alone (views), and ``cllr`` int8 with the pairs. The
sweep ran on split 0 and the views' temperature, the prefix-nesting stage and early stopping were chosen on splits 0 and 1;
splits 2 and 3 were never used to choose anything: they are the held-out check of the defaults.

Data: ``wordnet-768``: the 768-d real-text stand-in (``standin768.py``: WordNet example sentence -> its
definition, MiniLM layers 3 + 6); ``wordnet-384``: the built-in ``wordnet-examples`` (all-MiniLM-L6-v2);
``wordnet-titled-768`` / ``wordnet-titled-384``: the same example-sentence queries against titled documents
(``"lemma, lemma: definition"``), stand-in or all-MiniLM-L6-v2 (an easier task: full NDCG@10 about 0.57, not 0.22);
``default``: the shipped 8,000 × 384 set (1,500 queries); or any dataset path with one relevant row per query.
No default was chosen on the titled sets.
Records are appended to ``<out>/cllr_bar_<data>.json`` (``cllr_sweep_<data>.json`` with ``--sweep``) with the
machine, its load average and the threads each fit used (``--threads N`` fixes them; default: adaptemb's choice).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

import adaptemb
from adaptemb.datasets import Dataset, load_dataset
from adaptemb.evaluate import machine_info, ndcg_at_k
from adaptemb.ranking import exact_top_k

sys.path.insert(0, str(Path(__file__).parent))
from arguments import integers  # sibling benchmark modules (benchmarks/ is on sys.path)
from records import append_record
from standin768 import wordnet_examples_768, wordnet_titled

CORPUS_ROWS, TRAIN_QUERIES, TEST_QUERIES = 5000, 500, 500
BUDGETS = (32, 64)
SWEEP: list[dict[str, Any]] = [  # around the paper's λ = 0.1, α = 10 (the first row); run before the
    # views had their own temperature (view_temperature): the views' NCE then used `temperature`
    {"alpha": 10.0}, {"alpha": 3.0}, {"alpha": 1.0}, {"alpha": 0.3}, {"alpha": 0.1}, {"alpha": 0.0},
    {"alpha": 1.0, "lam": 1.0}, {"alpha": 1.0, "lam": 0.01},
    {"alpha": 1.0, "regularizer": "l21"}, {"alpha": 10.0, "regularizer": "l21"},
    {"alpha": 1.0, "temperature": 0.1}, {"alpha": 1.0, "temperature": 0.02},
    {"alpha": 1.0, "lr": 0.03}, {"alpha": 1.0, "lr": 0.3},
    {"alpha": 1.0, "steps": 150}, {"alpha": 1.0, "steps": 600},
    {"alpha": 1.0, "rank": 128}, {"alpha": 1.0, "rank": 768},
    {"alpha": 1.0, "view_dropout": 0.0, "view_noise": 0.0}, {"alpha": 1.0, "view_dropout": 0.3},
    {"alpha": 1.0, "view_noise": 0.3},
]
NESTING_SWEEP: list[dict[str, Any]] = [  # the prefix-nesting stage around its defaults (splits 0 and 1)
    {"prefix_steps": 0}, {}, {"prefix_steps": 50}, {"prefix_steps": 300},
    {"teacher_temperature": 0.01}, {"teacher_temperature": 0.05}, {"prefix_temperature": 0.1},
    {"prefixes": [32, 64]}, {"prefix_candidates": 4096},
]

STOPPING_SWEEP: list[dict[str, Any]] = [  # early stopping on held-out pairs (splits 0 and 1)
    {"val_fraction": 0.0}, {}, {"eval_every": 10, "patience": 10}, {"val_fraction": 0.2},
]


def load(name: str) -> Dataset:
    if name == "wordnet-768":
        return wordnet_examples_768()
    if name in ("wordnet-titled-768", "wordnet-titled-384"):
        return wordnet_titled(int(name[-3:]))
    if name == "wordnet-384":
        return load_dataset("wordnet-examples", progress=False)
    return load_dataset(name, progress=False)


def bar_split(data: Dataset, seed: int, extra_pairs: int = 0) -> dict[str, Any]:
    """The 5,000-row corpus, the 500 training pairs and the 500 held-out queries with their qrels; with
    ``extra_pairs``, that many more training pairs from the other queries (their documents stay out of the corpus
    unless drawn into it)."""
    if not (np.diff(data.qrels.indptr) == 1).all():
        raise SystemExit("the bar's split needs one relevant corpus row per query")
    gold = data.qrels.indices
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(data.queries))
    train, test = order[:TRAIN_QUERIES], order[TRAIN_QUERIES : TRAIN_QUERIES + TEST_QUERIES]
    needed = np.unique(gold[np.concatenate([train, test])])
    others = rng.choice(np.setdiff1d(np.arange(len(data.corpus)), needed), CORPUS_ROWS - len(needed), replace=False)
    rows = np.sort(np.concatenate([needed, others]))
    position = np.full(len(data.corpus), -1)
    position[rows] = np.arange(len(rows))
    corpus = np.ascontiguousarray(data.corpus[rows])
    qrels = sp.csr_matrix((np.ones(len(test)), (np.arange(len(test)), position[gold[test]])), shape=(len(test), len(rows)))
    more = order[TRAIN_QUERIES + TEST_QUERIES :][:extra_pairs]
    pairs = (np.concatenate([data.queries[train], data.queries[more]]),
             np.concatenate([corpus[position[gold[train]]], data.corpus[gold[more]]]))
    return {"corpus": corpus, "pairs": pairs, "queries": data.queries[test], "qrels": qrels}


def ndcg(ids: np.ndarray, qrels: sp.csr_matrix) -> float:
    return round(float(np.nanmean(ndcg_at_k(ids, qrels, 10))), 4)


def scored(compressor: adaptemb.Compressor, split: dict[str, Any], k: int) -> float | None:
    if k > compressor.budgets().high:  # the regulariser left fewer directions than k
        return None
    docs = compressor.encode(split["corpus"], k=k)
    _, ids = compressor.index(docs, device="cpu", k=k).search(split["queries"], 10)
    return ndcg(ids, split["qrels"])


def timed_fit(method: str, split: dict[str, Any], **params: Any) -> tuple[adaptemb.Compressor, float]:
    started = time.perf_counter()
    compressor = adaptemb.fit(split["corpus"], method, seed=0, **params)
    return compressor, round(time.perf_counter() - started, 2)


def cllr_rows(split: dict[str, Any], overrides: dict[str, Any], *, unsupervised: bool, int8: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    variants = [("cllr_pairs", {"pairs": split["pairs"]})]
    if unsupervised:
        variants.append(("cllr_unsupervised", {}))
    if int8:
        variants.append(("cllr_pairs_int8", {"pairs": split["pairs"], "values": "int8"}))
    for name, extra in variants:
        load_before = os.getloadavg()[0]
        compressor, seconds = timed_fit("cllr", split, progress=False, **overrides, **extra)
        report = compressor.fit_report or {}
        out[name] = {
            **{f"ndcg@10_r{k}": scored(compressor, split, k) for k in BUDGETS},
            "fit_s": seconds, "load_1min_before": round(load_before, 2), "load_1min_after": round(os.getloadavg()[0], 2),
            "threads": report.get("threads"), "steps": report.get("steps"), "rank": report["extra"]["rank"],
            "active_columns": report["extra"]["active_columns"], "losses_after": report["extra"]["losses_after"],
            "bytes_per_vector_r32": compressor.encode(split["corpus"][:1], k=32).bytes_per_vector,
            "config": compressor.config.model_dump(),
        }
    return out


def baseline_rows(split: dict[str, Any]) -> dict[str, Any]:
    full = exact_top_k(split["queries"], split["corpus"], 10)
    out: dict[str, Any] = {"full": {"ndcg@10": ndcg(full, split["qrels"])}}
    for method in ("svd", "mrl"):
        compressor, seconds = timed_fit(method, split)
        out[method] = {**{f"ndcg@10_r{k}": scored(compressor, split, k) for k in BUDGETS}, "fit_s": seconds}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="wordnet-768", help="wordnet-768, wordnet-384, default or a dataset path")
    parser.add_argument("--splits", type=integers, default="2,3", help="comma-separated split seeds")
    parser.add_argument("--threads", type=int, default=None, help="fix adaptemb's threads (default: its choice)")
    parser.add_argument("-p", "--param", action="append", default=[], help="cllr override NAME=VALUE")
    parser.add_argument("--sweep", action="store_true", help="run the recorded sweep grid (pairs and views; no int8)")
    parser.add_argument("--sweep-nesting", action="store_true", help="run the prefix-nesting grid (pairs and views)")
    parser.add_argument("--sweep-stopping", action="store_true", help="run the early-stopping grid (pairs and views)")
    parser.add_argument("--entries", type=integers, default=None,
                        help="comma-separated positions in the sweep grid to run (default all)")
    parser.add_argument("--no-int8", action="store_true", help="skip the int8 variant")
    parser.add_argument("--extra-pairs", type=int, default=0, help="train on this many more pairs (other queries)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    adaptemb.set_threads(args.threads)
    data = load(args.data)
    label = Path(args.data).stem if args.data.endswith((".npz", ".safetensors")) else args.data
    sweep = "nesting" if args.sweep_nesting else "stopping" if args.sweep_stopping else args.sweep
    grid = {"nesting": NESTING_SWEEP, "stopping": STOPPING_SWEEP, True: SWEEP}.get(sweep, [adaptemb.parse_params(args.param)])
    if args.entries:
        grid = [grid[i] for i in args.entries]
    for seed in args.splits:
        split = bar_split(data, seed, args.extra_pairs)
        baselines = baseline_rows(split)
        for overrides in grid:
            machine = machine_info()
            rows = cllr_rows(split, overrides, unsupervised=True, int8=not (sweep or args.no_int8))
            record = {"data": label, "split_seed": seed, "corpus_rows": CORPUS_ROWS, "train_pairs": len(split["pairs"][0]),
                      "test_queries": TEST_QUERIES, "overrides": overrides, "sweep": sweep, "threads_arg": args.threads,
                      **baselines, **rows, "machine": machine}
            append_record(args.out / f"cllr_{'sweep' if sweep else 'bar'}_{label}.json", record)


if __name__ == "__main__":
    main()
