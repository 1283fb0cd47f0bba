"""csr fitted for its byte budget, against csr cut from one fit and faiss' rotated 1-bit codes, 8-32 B (issue 31).

Usage::

    python benchmarks/csr_budget_fit.py [--data default | wordnet-examples-768] [--bytes 8,10,12,16,24,32]
                                        [--pairs 500] [--scratch] [--out benchmarks/results/csr_budget_fit_DATA.json]

Rows (NDCG@10 over the queries, each searched through the method's own index with raw float queries):

* ``csr cut``: one fit at the default k = 32, ``encode(C, bytes=B)`` (every smaller k cut from that fit);
* ``csr fitted``: ``adaptemb.fit(C, "csr", bytes=[all budgets])``, heads annealed from the main fit and kept where
  they recall more on the held-out slice (the fit report says which), ``encode(C, bytes=B)``;
* ``csr fitted + pairs``: the same with ``--pairs`` labelled (query, document) pairs; it and ``csr fitted`` are also
  scored on the other queries (``held_out``), the pairs' queries left out;
* ``csr scratch`` (``--scratch``): one fit per budget at that budget's k (the most 2-bit values its packed row holds), no heads;
* ``faiss PCAR{8B},SQtqmse1``: faiss directly (train, add, search).

The record holds every row, the fit seconds and head reports, the machine and the load before and after; the plot
goes to ``docs/img/csr-budget-fit-<data>.png``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np

import adaptemb
from adaptemb.datasets import Dataset
from adaptemb.evaluate.machine import machine_info
from adaptemb.evaluate.metrics import ndcg_at_k

sys.path.insert(0, str(Path(__file__).parent))
from arguments import data_set_parser
from compose_frontier import dataset
from records import write_record

DOCS_IMG = Path(__file__).resolve().parent.parent / "docs" / "img"


def pair_split(data: Dataset, count: int, seed: int) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """``count`` seeded judged queries with their most relevant document as pairs; the other queries' rows."""
    qrels = data.qrels.tocsr()
    judged = np.flatnonzero(np.diff(qrels.indptr) > 0)
    chosen = np.random.default_rng(seed).choice(judged, count, replace=False)
    docs = [qrels.indices[qrels.indptr[i] + np.argmax(qrels.data[qrels.indptr[i] : qrels.indptr[i + 1]])] for i in chosen]
    return (data.queries[chosen], data.corpus[np.array(docs)]), np.setdiff1d(np.arange(len(data.queries)), chosen)


def csr_rows(label: str, compressor: adaptemb.Compressor, data: Dataset, budgets: list[int], fit_s: float,
             held_out: np.ndarray) -> list[dict[str, Any]]:
    rows = []
    for nbytes in budgets:
        codes = compressor.encode(data.corpus, bytes=nbytes)
        per_query = ndcg_at_k(compressor.index(codes).search(data.queries, 10)[1], data.qrels, 10)
        rows.append({"label": label, "bytes": nbytes, "bytes_per_vector": codes.bytes_per_vector, "k": codes.k,
                     "value_bits": codes.value_bits, "ndcg@10": float(per_query.mean()),
                     "ndcg@10_held_out": float(per_query[held_out].mean()), "fit_s": round(fit_s, 1)})
    return rows


def fitted(data: Dataset, **params: Any) -> tuple[adaptemb.Compressor, float]:
    started = time.perf_counter()
    compressor = adaptemb.fit(data.corpus, "csr", progress=False, **params)
    return compressor, time.perf_counter() - started


def faiss_rows(data: Dataset, budgets: list[int], held_out: np.ndarray) -> list[dict[str, Any]]:
    rows = []
    for nbytes in budgets:
        spec = f"PCAR{min(8 * nbytes, data.dim)},SQtqmse1"
        index = faiss.index_factory(data.dim, spec, faiss.METRIC_INNER_PRODUCT)
        index.train(data.corpus)
        index.add(data.corpus)
        per_query = ndcg_at_k(index.search(data.queries, 10)[1], data.qrels, 10)
        rows.append({"label": "faiss PCAR{8B},SQtqmse1", "spec": spec, "bytes": nbytes, "bytes_per_vector": float(index.sa_code_size()),
                     "ndcg@10": float(per_query.mean()), "ndcg@10_held_out": float(per_query[held_out].mean())})
    return rows


def plot(path: Path, rows: list[dict[str, Any]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label in dict.fromkeys(_series(row) for row in rows):
        mine = [row for row in rows if _series(row) == label]
        ax.plot([row["bytes_per_vector"] for row in mine], [row["ndcg@10_held_out"] for row in mine], marker="o",
                label=label)
    ax.set_xlabel("bytes per vector")
    ax.set_ylabel("NDCG@10 (queries not used as pairs)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def _series(row: dict[str, Any]) -> str:
    """The plot line of a row: faiss' rows (one factory string per budget) share one."""
    return "faiss PCAR{8B},SQtqmse1" if row["label"].startswith("faiss") else row["label"]


def main() -> None:
    parser = data_set_parser(__doc__.split("\n")[0], bytes_default="8,10,12,16,24,32")
    parser.add_argument("--pairs", type=int, default=500)
    parser.add_argument("--scratch", action="store_true", help="also fit one csr per budget at its k, from scratch")
    args = parser.parse_args()
    load_before = os.getloadavg()
    data = dataset(args.data, args.docs, args.seed)
    pairs, held_out = pair_split(data, args.pairs, args.seed)
    rows = faiss_rows(data, args.bytes, held_out)
    cut, cut_s = fitted(data)
    rows += csr_rows("csr cut from one fit (k=32)", cut, data, args.bytes, cut_s, held_out)
    heads, heads_s = fitted(data, bytes=args.bytes)
    rows += csr_rows("csr fitted per budget", heads, data, args.bytes, heads_s, held_out)
    supervised, supervised_s = fitted(data, bytes=args.bytes, pairs=pairs)
    rows += csr_rows(f"csr fitted per budget + {args.pairs} pairs", supervised, data, args.bytes, supervised_s, held_out)
    if args.scratch:
        for nbytes in args.bytes:
            k = adaptemb.PackedSparseCodes.max_k_within(nbytes, 4 * data.dim, 2)
            compressor, seconds = fitted(data, k=k)
            rows += csr_rows("csr fitted from scratch at the budget's k", compressor, data, [nbytes], seconds, held_out)
    for row in rows:
        print({key: value for key, value in row.items()})
    record = {"data": data.name, "queries": len(data.queries), "held_out_queries": len(held_out), "pairs": args.pairs,
              "rows": rows, "heads": heads.fit_report["extra"].get("heads"),
              "heads_with_pairs": supervised.fit_report["extra"].get("heads"),
              "supervised": supervised.fit_report["extra"].get("supervised"),
              "machine": machine_info(), "load_before": load_before, "load_after": os.getloadavg()}
    write_record(args.out or Path(__file__).parent / "results" / f"csr_budget_fit_{args.data}.json", record)
    plot(DOCS_IMG / f"csr-budget-fit-{args.data}.png", rows, f"csr fitted per byte budget ({data.name})")


if __name__ == "__main__":
    main()
