"""csr's packed codes at 16 / 32 / 64 B on the built-in data, against the best faiss code of each size.

One default csr fit (``adaptemb.fit(C, "csr")``). Per byte budget B:

* ``csr``: ``encode(C, bytes=B)`` (k and value bits from the fit's choice table), searched through its index with
  the raw float queries (the default asymmetric query: the encoder's pre-activations ``W_enc (q - b_pre) + b_enc``);
* the same packed documents scored with the other query forms: through the decoder ``W_dec q`` (``<q, decode>``
  up to a per-query constant) and the pre-activations' ReLU;
* how values are stored, each at its best (k, b) within B on these queries (an oracle choice, to compare the
  storage forms, not the chooser): a per-feature codebook (what csr stores) against one float16 scale per row
  with b-bit levels ``round(v / max * (2^b - 1))``;
* faiss codes of at most B bytes through adaptemb: ``pq`` and ``opq`` (M = B sub-quantisers, fitted per budget),
  ``rabitq`` (1 bit, d / 8 + 8 B), ``tq`` (``PCAR{8B},SQtqmse1``) and ``svd+rabitq``.

Also NDCG@10 at every k of csr's choice table (its value bits as chosen): the plot
``docs/img/packed-frontier-<data>.png`` draws them beside the faiss codes. NDCG@10 over the queries; the JSON (``benchmarks/results/packed_sparse_quality_<data>.json``) records the machine
and its load. ``--data wordnet-examples-768``: the 768-d stand-in (``standin768.py``), a seeded subset of 5,000
documents and 1,000 queries as ``faiss_parity.py`` takes it (h = 3,072: 12-bit indices).

    python benchmarks/packed_sparse_quality.py
    python benchmarks/packed_sparse_quality.py --data wordnet-examples-768
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from records import write_record

import adaptemb
from adaptemb.datasets import load_dataset
from adaptemb.evaluate.machine import machine_info
from adaptemb.evaluate.metrics import ndcg_at_k

BUDGETS = (16, 32, 64)
FAISS_CODES = ("pq", "opq", "rabitq", "tq", "svd+rabitq")
RESULTS = Path(__file__).parent / "results"
DOCS_IMG = Path(__file__).parent.parent / "docs" / "img"


def dataset(name: str) -> Any:
    if name == "wordnet-examples-768":
        from faiss_parity import subset
        from standin768 import wordnet_examples_768

        return subset(wordnet_examples_768(), 5000, 1000, 0)
    return load_dataset(name)


def ndcg(ids: np.ndarray, qrels: Any) -> float:
    return round(float(np.nanmean(ndcg_at_k(ids, qrels, 10))), 4)


def top10(scores: np.ndarray) -> np.ndarray:
    return np.argsort(-scores, axis=1, kind="stable")[:, :10]


def ranked(weights: np.ndarray, docs: sp.csr_matrix) -> np.ndarray:
    """The top-10 documents of each query by ``<weights, doc>`` (sparse documents)."""
    return top10(np.asarray(docs @ weights.T).T)


def query_projections(csr: adaptemb.Compressor, queries: np.ndarray) -> dict[str, np.ndarray]:
    """The three query forms over the h latents of an ``l2`` csr (offsets left out: the same for every document
    of a query)."""
    state = csr.state_tensors()
    unit = adaptemb.unit_rows(torch.from_numpy(queries))
    pre = ((unit - state["pre_bias"]) @ state["enc_weight"].T + state["enc_bias"]).numpy()
    decoder = (unit @ state.get("dec_weight", state["enc_weight"]).T).numpy()  # W_dec q (normalize="l2": no σ)
    return {"decoder": decoder, "pre_activation": pre, "relu_pre_activation": np.maximum(pre, 0)}


def with_value_bits(csr: adaptemb.Compressor, bits: int) -> adaptemb.Compressor:
    """The fitted csr with another ``value_bits`` (same model, codebooks and table)."""
    other = adaptemb.get_compressor("csr", **{**csr.config.model_dump(), "value_bits": bits})
    state = csr.state_tensors()
    other.restore(csr.dim, state if bits != 16 else {k: t for k, t in state.items() if k not in ("codebooks", "choices")})
    return other


def storage_frontier(csr: adaptemb.Compressor, corpus: np.ndarray, weights: np.ndarray, qrels: Any) -> dict[str, Any]:
    """Per budget, the best NDCG@10 of each value storage over every (k, b) that fits (see the module docstring)."""
    floats = with_value_bits(csr, 16)
    per_bits = {b: with_value_bits(csr, b) for b in (1, 2, 3, 4, 8)}
    hidden = csr.encode(corpus[:1]).dim
    best: dict[str, dict[int, tuple[float, int, int]]] = {"feature_codebook": {}, "row_scale": {}}
    for k in (*range(4, 17), 18, 20, 24, 28, 32, 36, 40):
        exact = floats.encode(corpus, k=k)
        indices, _ = exact.slots()
        kept = np.minimum(indices, exact.dim - 1)
        values = np.take_along_axis(exact.to_dense(), kept, axis=1) * (indices < exact.dim)
        for b, compressor in per_bits.items():
            nbytes = adaptemb.PackedSparseCodes.row_bytes(k, hidden, b)  # indices as the codes store them
            codebook = ndcg(ranked(weights, compressor.encode(corpus, k=k).to_csr()), qrels)
            scale = values[:, :1].astype(np.float16).astype(np.float32)  # values come largest first
            levels = np.rint(np.divide(values, scale, out=np.zeros_like(values), where=scale > 0) * (2**b - 1))
            stored = sp.csr_matrix(((levels / (2**b - 1) * scale).ravel(), kept.ravel(), np.arange(0, kept.size + 1, k)),
                                   shape=(len(corpus), exact.dim))
            row_scale = ndcg(ranked(weights, stored), qrels)
            for name, size, score in (("feature_codebook", nbytes, codebook), ("row_scale", nbytes + 2, row_scale)):
                for budget in BUDGETS:
                    if size <= budget and score > best[name].get(budget, (-1.0,))[0]:
                        best[name][budget] = (score, k, b)
    return {name: {budget: {"ndcg_at_10": s, "k": k, "value_bits": b} for budget, (s, k, b) in rows.items()}
            for name, rows in best.items()}


def packed_frontier(csr: adaptemb.Compressor, corpus: np.ndarray, weights: np.ndarray, qrels: Any) -> list[dict[str, Any]]:
    """NDCG@10 of csr's codes at every k of its choice table, each at the value bits the fit chose for it."""
    rows = []
    for k in sorted({row["k"] for row in csr.fit_report["extra"]["value_choices"]}):
        codes = csr.encode(corpus, k=k)
        rows.append({"k": k, "value_bits": codes.value_bits, "bytes_per_vector": codes.bytes_per_vector,
                     "ndcg_at_10": ndcg(ranked(weights, codes.to_csr()), qrels)})
    return rows


def plot(path: Path, frontier: list[dict[str, Any]], rows: list[dict[str, Any]], title: str) -> None:
    """NDCG@10 against bytes per vector: csr's packed codes (one point per k) beside the faiss codes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot([r["bytes_per_vector"] for r in frontier], [r["ndcg_at_10"] for r in frontier], "o-", label="csr packed (per k)")
    for method in FAISS_CODES:
        points = sorted((r["bytes_per_vector"], r["ndcg_at_10"]) for r in rows if r["method"] == method and "ndcg_at_10" in r)
        if points:
            ax.plot(*zip(*points), "s--", label=method)
    full = next(r["ndcg_at_10"] for r in rows if r["method"] == "float32")
    ax.axhline(full, color="grey", linestyle=":", label="float32")
    ax.set(xscale="log", xlabel="bytes per vector", ylabel="NDCG@10", title=title)
    ax.set_xlim(2, 200)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def faiss_rows(corpus: np.ndarray, queries: np.ndarray, qrels: Any, budget: int) -> list[dict[str, Any]]:
    rows = []
    for method in FAISS_CODES:
        start = time.perf_counter()
        try:
            if method in ("pq", "opq"):
                compressor = adaptemb.fit(corpus, method, k=budget)
                codes = compressor.encode(corpus)
            else:
                compressor = adaptemb.fit(corpus, method)
                codes = compressor.encode(corpus, bytes=budget)
        except adaptemb.InvalidConfigError as err:  # e.g. no budget of the method fits
            rows.append({"method": method, "budget_bytes": budget, "skipped": str(err)})
            continue
        ids = compressor.index(codes, device="cpu").search(queries, 10)[1]
        rows.append({"method": method, "budget_bytes": budget, "bytes_per_vector": codes.bytes_per_vector,
                     "ndcg_at_10": ndcg(ids, qrels), "seconds": round(time.perf_counter() - start, 1)})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="default", help="default, or wordnet-examples-768 (the 768-d stand-in)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    data = dataset(args.data)
    corpus, queries, qrels = data.corpus.astype(np.float32), data.queries.astype(np.float32), data.qrels
    start = time.perf_counter()
    csr = adaptemb.fit(corpus, "csr", progress=False)
    fit_s = time.perf_counter() - start
    projections = query_projections(csr, queries)
    rows: list[dict[str, Any]] = [{"method": "float32", "bytes_per_vector": 4 * corpus.shape[1],
                                   "ndcg_at_10": ndcg(top10(queries @ corpus.T), qrels)}]
    for budget in BUDGETS:
        codes = csr.encode(corpus, bytes=budget)
        ids = csr.index(codes, device="cpu").search(queries, 10)[1]
        row = {"method": "csr", "budget_bytes": budget, "k": codes.k, "value_bits": codes.value_bits,
               "bytes_per_vector": codes.bytes_per_vector, "ndcg_at_10": ndcg(ids, qrels)}
        docs = codes.to_csr()
        row["query_forms"] = {name: ndcg(ranked(weights, docs), qrels) for name, weights in projections.items()}
        rows.append(row)
        print(row, flush=True)
        rows.extend(faiss_rows(corpus, queries, qrels, budget))
    storage = storage_frontier(csr, corpus, projections["pre_activation"], qrels)
    frontier = packed_frontier(csr, corpus, projections["pre_activation"], qrels)
    plot(DOCS_IMG / f"packed-frontier-{args.data}.png", frontier, rows, f"csr packed vs faiss codes ({data.name})")
    write_record(RESULTS / f"packed_sparse_quality_{args.data}.json", {"dataset": args.data, "csr_fit_s": round(fit_s, 1), "rows": rows, "value_storage": storage, "packed_frontier": frontier,
                       "value_choices": csr.fit_report["extra"]["value_choices"], "machine": machine_info(),
                       "load_before": [round(x, 2) for x in load_before],
                       "load_after": [round(x, 2) for x in os.getloadavg()]})


if __name__ == "__main__":
    main()
