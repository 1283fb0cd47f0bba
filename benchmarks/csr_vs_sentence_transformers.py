"""adaptemb's CSR vs the CSR module of sentence-transformers, on frozen embeddings, at k = 8/16/32/64.

Usage::

    python benchmarks/csr_vs_sentence_transformers.py [--docs 5000] [--ks 8 16 32 64] [--seed 0]
                                                      [--threads 1] [--no-adaptemb-per-k]
                                                      [--out benchmarks/results/csr_vs_sentence_transformers.json]

Data: the shipped default dataset (WordNet definitions, all-MiniLM-L6-v2, 384-d, 1,500 example-sentence
queries, one relevant definition each). A ``--docs`` subset keeps every query's gold definition plus
random other definitions (seeded), so every query is evaluated against the same subset.

Methods, all fitted on the documents alone:

* ``full``: float32 cosine on the 384-d embeddings.
* ``pca``: ``adaptemb.fit(X, method="svd")``, dot product of the first r components (r = k).
* ``adaptemb-csr``: ``adaptemb.fit(X, method="csr", k=32, seed=seed)`` (defaults; one fit for every k),
  scored asymmetrically (its default) and symmetrically (sparse query code · sparse document code).
  With ``--adaptemb-per-k`` (default on) also one default fit per k (``k=k``), asymmetric.
* ``st-*``: ``sentence_transformers.sparse_encoder.modules.SparseAutoEncoder`` (the TopK SAE of CSR)
  wrapped in a ``SparseEncoder`` and trained on the frozen embeddings with ``losses.CSRLoss`` as
  sentence-transformers implements it (L(k) + L(4k)/8 + β·aux with β = 0.1, plus γ = 1 ×
  ``SparseMultipleNegativesRankingLoss``: in-batch negatives, dot product, scale 1). ``CSRLoss.forward``
  is called on ``[{"sentence_embedding": x}, {"sentence_embedding": x}]``: anchor and positive are the
  identical pass, the positives adaptemb uses by default (``view_dropout = 0``). The module keeps
  sentence-transformers' own initialisation (zero pre-bias, ``nn.Linear`` weights) and its size for a
  converted SentenceTransformer: h = 4·d, k = d/4, k_aux = d/2. ``SparseEncoderTrainer`` itself needs
  ``accelerate`` (not installed, no network), so a small loop replays its defaults:

  - ``trainer`` recipe = ``SparseEncoderTrainingArguments`` defaults: AdamW (lr 5e-5, betas 0.9/0.999,
    eps 1e-8, weight decay 0), linear decay to 0, no warm-up, grad-norm clip 1.0, batch 8, 3 epochs;
  - ``budget`` recipe = adaptemb's CSR optimiser budget: Adam (lr 3e-3, eps 6.25e-10), constant lr,
    no clipping, batch 256, 10 epochs.

  Variants: ``st-trainer-k96`` (the converted module's k = d/4 = 96, one fit, encoded with
  ``max_active_dims = k``), ``st-trainer-per-k`` (module k = the evaluated k: trained there),
  ``st-budget-k32`` (one fit at k = 32, adaptemb's optimiser budget) and ``st-budget-per-k``; a
  ``-nocl`` suffix is a diagnostic with γ = 0 (reconstruction losses only).
  Scoring: the sparse·sparse dot product (sentence-transformers' similarity for sparse codes); the
  ``st-budget-k32*`` codes are also scored asymmetrically (dense query through the tied decoder, as
  adaptemb's default) as a diagnostic that separates scoring from training.

Per method and k the JSON also holds the fraction of latents unused on the documents, the documents'
mean relative reconstruction error ``||x - x_hat||^2 / ||x||^2`` (L2-normalised space) and mean code norm.

Every method is scored with ``adaptemb.evaluate.metrics.evaluate_ranking`` on the same queries. Timings
are wall-clock on whatever machine runs this (``machine_info`` is recorded); ``--threads`` sets torch's
intra-op threads for every method (1 by default: on a 2-core machine shared with other jobs two torch
threads spin against each other and small matmuls run 20x slower).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

import adaptemb
from adaptemb.datasets import load_dataset
from adaptemb.evaluate.machine import machine_info
from adaptemb.evaluate.metrics import evaluate_ranking

RECIPES: dict[str, dict[str, Any]] = {
    "trainer": {"optimizer": "adamw", "lr": 5e-5, "eps": 1e-8, "schedule": "linear", "clip": 1.0,
                "batch_size": 8, "epochs": 3},
    "budget": {"optimizer": "adam", "lr": 3e-3, "eps": 6.25e-10, "schedule": "constant", "clip": None,
               "batch_size": 256, "epochs": 10},
}


def subset(docs: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """``docs`` corpus rows holding every query's gold row; returns corpus, queries, gold, description."""
    ds = load_dataset("default")
    qrels = ds.qrels.tocsr()
    if not np.all(np.diff(qrels.indptr) == 1):
        raise ValueError("expected exactly one relevant document per query")
    gold = qrels.indices.astype(np.int64)
    keep = np.unique(gold)
    if docs < len(keep) or docs > len(ds.corpus):
        raise ValueError(f"--docs must lie in {len(keep)}..{len(ds.corpus)}")
    rng = np.random.default_rng(seed)
    others = rng.choice(np.setdiff1d(np.arange(len(ds.corpus)), keep), docs - len(keep), replace=False)
    rows = np.sort(np.concatenate([keep, others]))
    remap = np.full(len(ds.corpus), -1, dtype=np.int64)
    remap[rows] = np.arange(len(rows))
    info = {"dataset": ds.name, "description": ds.description, "dim": ds.dim, "corpus_rows_total": len(ds.corpus),
            "docs": int(docs), "queries": len(ds.queries), "distinct_gold_docs": len(keep), "subset_seed": seed}
    return ds.corpus[rows].astype(np.float32), ds.queries.astype(np.float32), remap[gold], info


def ranking(scores: np.ndarray, gold: np.ndarray, depth: int = 100) -> dict[str, float]:
    """NDCG@10 and friends from a (q, n) score matrix (adaptemb's metric code)."""
    scores = np.asarray(scores, dtype=np.float32)
    depth = min(depth, scores.shape[1])
    top = np.argpartition(-scores, depth - 1, axis=1)[:, :depth]
    order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1, kind="stable")
    ranked = np.take_along_axis(top, order, axis=1)
    qrels = sp.csr_matrix((np.ones(len(gold)), (np.arange(len(gold)), gold)), shape=scores.shape)
    m = evaluate_ranking(ranked, qrels)
    return {"ndcg_at_10": round(m.ndcg_at_10, 4), "recall_at_10": round(m.recall_at_10, 4),
            "mrr_at_10": round(m.mrr_at_10, 4)}


def unused_latents(indices: np.ndarray, values: np.ndarray, hidden: int) -> float:
    """Fraction of the h latents that are active (value > 0) on no document."""
    fired = np.zeros(hidden, dtype=bool)
    fired[indices[values > 0]] = True
    return round(float(1.0 - fired.mean()), 4)


def timed(fn):  # type: ignore[no-untyped-def]
    started, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, round(time.perf_counter() - started, 2), round(time.process_time() - cpu, 2)


# -- sentence-transformers side ----------------------------------------------------------------------


def train_st(x: torch.Tensor, k: int, recipe: str, seed: int, gamma: float = 1.0) -> tuple[Any, dict[str, Any]]:
    """Train sentence-transformers' CSR module on frozen rows ``x`` with its ``CSRLoss``."""
    from sentence_transformers.sparse_encoder import SparseEncoder
    from sentence_transformers.sparse_encoder.losses import CSRLoss
    from sentence_transformers.sparse_encoder.modules import SparseAutoEncoder

    r = RECIPES[recipe]
    d = x.shape[1]
    torch.manual_seed(seed)
    sae = SparseAutoEncoder(input_dim=d, hidden_dim=4 * d, k=k, k_aux=d // 2)
    model = SparseEncoder(modules=[sae], device="cpu")
    loss_fn = CSRLoss(model, gamma=gamma)  # beta = 0.1 (default), SparseMultipleNegativesRankingLoss(scale=1, dot)
    params = [p for p in model.parameters() if p.requires_grad]
    if r["optimizer"] == "adamw":
        opt: torch.optim.Optimizer = torch.optim.AdamW(params, lr=r["lr"], betas=(0.9, 0.999), eps=r["eps"],
                                                       weight_decay=0.0)
    else:
        opt = torch.optim.Adam(params, lr=r["lr"], eps=r["eps"])
    n, bs = len(x), r["batch_size"]
    steps_per_epoch = (n + bs - 1) // bs
    total = steps_per_epoch * r["epochs"]
    if r["schedule"] == "linear":
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: max(0.0, 1.0 - step / total))
    else:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    last: dict[str, float] = {}
    for epoch in range(r["epochs"]):
        sums: dict[str, float] = {}
        order = torch.randperm(n, generator=gen)
        for start in range(0, n, bs):
            xb = x[order[start : start + bs]]
            parts = loss_fn([{"sentence_embedding": xb}, {"sentence_embedding": xb}])
            loss = sum(parts.values())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if r["clip"] is not None:
                torch.nn.utils.clip_grad_norm_(params, r["clip"])
            opt.step()
            sched.step()
            for name, value in parts.items():
                sums[name] = sums.get(name, 0.0) + float(value.detach())
        if epoch == r["epochs"] - 1:
            last = {name: round(v / steps_per_epoch, 5) for name, v in sums.items()}
    model.eval()
    return sae, {"recipe": recipe, **r, "gamma": gamma, "module_k": k, "k_aux": d // 2,
                 "hidden": 4 * d, "steps": total, "last_epoch_losses": last}


@torch.inference_mode()
def st_codes(sae: Any, x: torch.Tensor, k: int) -> torch.Tensor:
    """Dense (n, h) codes with k active dims: the module's own inference path (``max_active_dims``)."""
    return sae({"sentence_embedding": x}, max_active_dims=k)["sentence_embedding"]


def st_scores(sae: Any, q: torch.Tensor, docs: torch.Tensor, k: int) -> dict[str, Any]:
    d_codes = st_codes(sae, docs, k)
    out = {"symmetric": (st_codes(sae, q, k) @ d_codes.T).numpy()}
    with torch.inference_mode():  # <q, x_hat_doc> = <W q, z_doc> + <q, b_pre> with the tied decoder
        out["asymmetric"] = ((q @ sae.encoder.weight.T) @ d_codes.T + (q @ sae.pre_bias)[:, None]).numpy()
    nz = d_codes > 0
    out["unused_latents"] = round(float(1.0 - nz.any(dim=0).float().mean()), 4)
    with torch.inference_mode():
        out["recon_rel_err"] = relative_error(docs, d_codes @ sae.encoder.weight + sae.pre_bias)
        out["code_norm"] = round(float(d_codes.norm(dim=1).mean()), 3)
    return out


def relative_error(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """Mean over rows of ``||x - x_hat||^2 / ||x||^2`` (reconstruction quality of the codes)."""
    return round(float(((x - x_hat).pow(2).sum(1) / x.pow(2).sum(1)).mean()), 4)


# -- main ---------------------------------------------------------------------------------------------


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--docs", type=int, default=5000)
    p.add_argument("--ks", type=int, nargs="+", default=[8, 16, 32, 64])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads for every method")
    p.add_argument("--adaptemb-per-k", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--st-variants", nargs="+",
                   default=["trainer-k96", "trainer-per-k", "budget-k32", "budget-per-k", "budget-k32-nocl"],
                   help="RECIPE-{k96,k32,per-k}[-nocl]; -nocl trains with gamma = 0 (reconstruction only)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/csr_vs_sentence_transformers.json"))
    return p.parse_args()


class Recorder:
    """The ranking metrics (and diagnostics) of each method at each k, and the NDCG@10 table rows."""

    def __init__(self, gold: Any) -> None:
        self.gold = gold
        self.methods: dict[str, dict[str, Any]] = {}
        self.rows: dict[str, dict[int, float]] = {}

    def __call__(self, method: str, k: int, scores: np.ndarray, **extra: Any) -> None:
        m = ranking(scores, self.gold)
        self.methods.setdefault(method, {})[str(k)] = {**m, **extra}
        self.rows.setdefault(method, {})[k] = m["ndcg_at_10"]
        print(f"  {method:<28} k={k:<3} NDCG@10 {m['ndcg_at_10']:.4f}", flush=True)


def adaptemb_rows(args: argparse.Namespace, corpus: np.ndarray, queries: np.ndarray, xd: torch.Tensor,
                  record: Recorder, fits: dict[str, Any]) -> None:
    """adaptemb's svd (PCA) and csr (one fit at k=32, and one per k) at every k."""
    pca, secs, cpu = timed(lambda: adaptemb.fit(corpus, method="svd"))
    fits["pca"] = {"wall_s": secs, "cpu_s": cpu}
    for k in args.ks:
        record("pca", k, pca.score(pca.encode_queries(queries, k=k), pca.encode(corpus, k=k)))

    csr, secs, cpu = timed(lambda: adaptemb.fit(corpus, method="csr", k=32, seed=args.seed))
    rep = csr.fit_report or {}
    fits["adaptemb-csr"] = {"wall_s": secs, "cpu_s": cpu, "steps": rep.get("steps"),
                            "dead_fraction": rep.get("extra", {}).get("dead_fraction"),
                            "losses_after": rep.get("extra", {}).get("losses_after")}
    print(f"adaptemb csr fit (k=32): {secs} s wall", flush=True)
    for k in args.ks:
        docs = csr.encode(corpus, k=k)
        diag = {"unused_latents": unused_latents(docs.indices, docs.values, docs.dim),
                "recon_rel_err": relative_error(xd, torch.from_numpy(np.asarray(csr.decode(docs), dtype=np.float32))),
                "code_norm": round(float(np.linalg.norm(docs.values.astype(np.float32), axis=1).mean()), 3)}
        record("adaptemb-csr asym", k, csr.score(csr.encode_queries(queries, k=k), docs), **diag)
        record("adaptemb-csr sym", k, csr.score(csr.encode(queries, k=k), docs), **diag)
    if args.adaptemb_per_k:
        for k in args.ks:
            model, secs, cpu = timed(lambda k=k: adaptemb.fit(corpus, method="csr", k=k, seed=args.seed))
            fits[f"adaptemb-csr-k{k}"] = {"wall_s": secs, "cpu_s": cpu}
            record("adaptemb-csr per-k asym", k, model.score(model.encode_queries(queries, k=k),
                                                             model.encode(corpus, k=k)), fit_wall_s=secs)


def st_rows(args: argparse.Namespace, d: int, xq: torch.Tensor, xd: torch.Tensor, record: Recorder,
            fits: dict[str, Any]) -> None:
    """sentence-transformers' sparse encoder trained by each recipe variant, at every k it serves."""
    for variant in args.st_variants:
        recipe, kind = variant.split("-", 1)
        gamma = 0.0 if kind.endswith("-nocl") else 1.0
        kind = kind.removesuffix("-nocl")
        fit_ks = [d // 4] if kind == "k96" else [32] if kind == "k32" else list(args.ks)
        for fit_k in fit_ks:
            (sae, info), secs, cpu = timed(lambda fit_k=fit_k, recipe=recipe, gamma=gamma:
                                           train_st(xd, fit_k, recipe, args.seed, gamma))
            fits[f"st-{variant}-k{fit_k}"] = {"wall_s": secs, "cpu_s": cpu, **info}
            print(f"st {recipe} fit (module k={fit_k}): {secs} s wall; last epoch {info['last_epoch_losses']}",
                  flush=True)
            for k in (args.ks if kind in ("k96", "k32") else [fit_k]):
                s = st_scores(sae, xq, xd, k)
                diag = {key: s[key] for key in ("unused_latents", "recon_rel_err", "code_norm")}
                record(f"st-{variant}", k, s["symmetric"], fit_k=fit_k, **diag)
                if variant.startswith("budget-k32"):
                    record(f"st-{variant} asym (diag)", k, s["asymmetric"], fit_k=fit_k, **diag)


def print_table(args: argparse.Namespace, results: dict[str, Any], rows: dict[str, dict[int, float]],
                data: dict[str, Any], d: int) -> None:
    lines = ["| method | " + " | ".join(f"k={k}" for k in args.ks) + " |",
             "|---|" + "---|" * len(args.ks)]
    for method, by_k in rows.items():
        lines.append(f"| {method} | " + " | ".join(f"{by_k[k]:.3f}" if k in by_k else "–" for k in args.ks) + " |")
    lines.append(f"| full precision ({d}-d) | " + " | ".join(f"{results['full']['ndcg_at_10']:.3f}" for _ in args.ks)
                 + " |")
    print("\nNDCG@10, " + f"{data['docs']} docs, {data['queries']} queries\n" + "\n".join(lines))
    print("\nfit wall seconds: " + ", ".join(f"{k} {v['wall_s']}" for k, v in results["fits"].items()))
    print(f"wrote {args.out}")


def main() -> None:
    args = arguments()
    torch.set_num_threads(args.threads)
    import sentence_transformers

    machine = machine_info()
    corpus, queries, gold, data = subset(args.docs, args.seed)
    xq = F.normalize(torch.from_numpy(queries), dim=1)
    xd = F.normalize(torch.from_numpy(corpus), dim=1)
    record = Recorder(gold)
    results: dict[str, Any] = {"full": ranking((xq @ xd.T).numpy(), gold), "methods": record.methods, "fits": {}}
    print(f"full precision ({data['dim']}-d): NDCG@10 {results['full']['ndcg_at_10']:.4f}", flush=True)
    adaptemb_rows(args, corpus, queries, xd, record, results["fits"])
    st_rows(args, corpus.shape[1], xq, xd, record, results["fits"])
    results.update({
        "benchmark": "csr_vs_sentence_transformers", "args": {k: str(v) for k, v in vars(args).items()},
        "data": data, "machine": machine, "machine_end_load_average": machine_info()["load_average"],
        "sentence_transformers": sentence_transformers.__version__, "st_recipes": RECIPES,
        "note": "2-core machine shared with other jobs: timings are under contention, not clean",
    })
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print_table(args, results, record.rows, data, corpus.shape[1])


if __name__ == "__main__":
    main()
