"""Can the corpus alone, or labelled pairs, choose the rotation before 1-bit codes (issue 29)?

Usage::

    python benchmarks/rotation_choice.py [--data default | wordnet-examples-768] [--docs 5000] [--bytes 16,32]
                                         [--seeds 20] [--pairs 500] [--probe-rows 1000] [--no-cllr]
                                         [--out benchmarks/results/rotation_choice_DATA.json]

Everything is scored by hand on the composition's own parts (checked against the real path, ``fit``, ``encode(C,
bytes=B)``, ``index(codes).search(Q, 10)``, for seed 0 and for rotation none): documents are the bits
``z > mean(z)`` of ``z = rotation.documents(y)`` (``y`` the projected corpus), float queries score ``<rotation.
queries(y_q), ±1>``. NDCG@10 with raw float queries.

Part 1, no queries: for each rotation draw (``fit_rotation(y, "random", seed)``, seeds 0 .. n-1) of svd+binary,
statistics of a seeded slice of ``--probe-rows`` corpus rows (the probe) that need no queries, and their Spearman
correlation with the real NDCG@10 over the draws:

* ``quant_rel_mse``: ``1 - |z|_1^2 / (r |z|^2)``, the relative squared error of ``z`` against ``alpha * sign(z)`` with
  the best per-row ``alpha`` (lower is better), mean over the probe;
* ``score_corr``: per probe row, Pearson correlation over the corpus between the float score ``<y_p, y_d>`` and the
  code score ``<R^T y_p, b_d>``, mean over the probe (higher is better);
* ``recall10_proj`` / ``recall10_full`` / ``recall100_full``: probe rows as queries (themselves left out), the
  code's top-10 (top-100) against the projected float (full float) top-10 (top-100) (higher is better);
* ``var_spread``: coefficient of variation of the per-dimension variance of ``z`` over the corpus (lower better).

For each statistic, best-of-N: the draw the statistic prefers among N drawn without replacement (direction fixed
beforehand, as above), its NDCG minus the mean of the N, averaged over 2,000 subsets. ``split_half``: the Spearman
correlation over draws between the NDCG@10 of two random halves of the queries (mean of 50 splits), how far the
draws' order on one set of queries carries to others at all.

Part 2, pairs: ``pair_split(data, --pairs, seed)`` (the csr_budget_fit split: each pair is a judged query and its
most relevant document). For svd+binary (svd learns nothing from pairs) and cllr+binary (its projection fitted with
the pairs, which hold out their own fifth for early stopping), each rotation (none, random seed 0, itq; and every
random draw for svd) gets the pairs' MRR (the pair's document's rank among the corpus codes, full depth) and
NDCG@10 on the other queries. For cllr the MRR is on cllr's own held-out fifth (``held``) and on all pairs (``all``,
mostly pairs it trained on).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import spearmanr

import adaptemb
from adaptemb import Rotation, fit_rotation
from adaptemb.datasets import Dataset
from adaptemb.evaluate.machine import machine_info
from adaptemb.evaluate.metrics import ndcg_at_k

sys.path.insert(0, str(Path(__file__).parent))
from arguments import data_set_parser, integers
from compose_frontier import dataset
from csr_budget_fit import pair_split
from records import data_fields, write_record

# the direction each statistic is read in: +1 higher is better
DIRECTIONS = {
    "quant_rel_mse": -1,
    "score_corr": 1,
    "recall10_proj": 1,
    "recall10_full": 1,
    "recall100_full": 1,
    "var_spread": -1,
}


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    part = np.argpartition(-scores, k, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def sign_codes(rotation: Rotation | None, y: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(z, ±1 documents) as the composition's binary quantiser makes them (bit: z > the fit rows' mean)."""
    z = y if rotation is None else rotation.documents(y)
    threshold = z.double().mean(dim=0).float()
    return z.numpy(), np.where((z > threshold).numpy(), 1.0, -1.0).astype(np.float32)


def query_floats(rotation: Rotation | None, y: torch.Tensor) -> np.ndarray:
    return (y if rotation is None else rotation.queries(y)).numpy()


def overlap(found: np.ndarray, truth: np.ndarray) -> float:
    k = truth.shape[1]
    return float(np.mean([len(np.intersect1d(a, b)) / k for a, b in zip(found, truth, strict=True)]))


class Probe:
    """The probe rows, their float neighbours (projected and full), held fixed across draws."""

    def __init__(self, data: Dataset, y_docs: torch.Tensor, rows: int, seed: int) -> None:
        self.ids = np.sort(np.random.default_rng(seed).choice(len(data.corpus), rows, replace=False))
        self.y = y_docs[self.ids]
        proj = self.y.numpy() @ y_docs.numpy().T
        full = data.corpus[self.ids] @ data.corpus.T
        for scores in (proj, full):
            scores[np.arange(rows), self.ids] = -np.inf
        self.proj_float = proj
        self.truth10_proj, self.truth10_full, self.truth100_full = (
            top_k(proj, 10),
            top_k(full, 10),
            top_k(full, 100),
        )

    def statistics(self, rotation: Rotation | None, z: np.ndarray, docs: np.ndarray) -> dict[str, float]:
        zp = z[self.ids].astype(np.float64)
        rel = 1 - np.abs(zp).sum(1) ** 2 / (zp.shape[1] * (zp**2).sum(1))
        code = query_floats(rotation, self.y) @ docs.T
        a = self.proj_float.copy()
        a[np.isinf(a)] = 0.0
        corr = [np.corrcoef(a[i], code[i])[0, 1] for i in range(len(a))]
        code[np.arange(len(code)), self.ids] = -np.inf
        var = z.astype(np.float64).var(axis=0)
        return {
            "quant_rel_mse": float(rel.mean()),
            "score_corr": float(np.mean(corr)),
            "recall10_proj": overlap(top_k(code, 10), self.truth10_proj),
            "recall10_full": overlap(top_k(code, 10), self.truth10_full),
            "recall100_full": overlap(top_k(code, 100), self.truth100_full),
            "var_spread": float(var.std() / var.mean()),
        }


def per_query(
    rotation: Rotation | None, docs: np.ndarray, y_queries: torch.Tensor, data: Dataset
) -> np.ndarray:
    return ndcg_at_k(top_k(query_floats(rotation, y_queries) @ docs.T, 10), data.qrels, 10)


def best_of_n(
    stat: np.ndarray, ndcg: np.ndarray, direction: int, n: int, rng: np.random.Generator
) -> dict[str, float]:
    gains, oracle = [], []
    for _ in range(2000):
        pick = rng.choice(len(stat), n, replace=False)
        chosen = pick[np.argmax(direction * stat[pick])]
        gains.append(ndcg[chosen] - ndcg[pick].mean())
        oracle.append(ndcg[pick].max() - ndcg[pick].mean())
    return {
        "n": n,
        "gain": float(np.mean(gains)),
        "gain_se": float(np.std(gains) / np.sqrt(len(gains))),
        "oracle_gain": float(np.mean(oracle)),
    }


def split_half(per_query_ndcg: np.ndarray, rng: np.random.Generator) -> float:
    """Mean Spearman over 50 random query halves of the draws' NDCG on one half against the other."""
    rhos = []
    for _ in range(50):
        order = rng.permutation(per_query_ndcg.shape[1])
        half = len(order) // 2
        rhos.append(
            spearmanr(per_query_ndcg[:, order[:half]].mean(1), per_query_ndcg[:, order[half:]].mean(1))[0]
        )
    return float(np.mean(rhos))


def part_one(
    data: Dataset, y_docs: torch.Tensor, y_queries: torch.Tensor, seeds: int, probe: Probe, nbytes: int
) -> dict[str, Any]:
    stats: dict[str, list[float]] = {name: [] for name in DIRECTIONS}
    per_q = []
    for seed in range(seeds):
        rotation = fit_rotation(y_docs, "random", seed, 1)
        z, docs = sign_codes(rotation, y_docs)
        per_q.append(per_query(rotation, docs, y_queries, data))
        for name, value in probe.statistics(rotation, z, docs).items():
            stats[name].append(value)
    per_q_arr = np.array(per_q)
    ndcg = per_q_arr.mean(axis=1)
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {
        "bytes": nbytes,
        "rank": int(y_docs.shape[1]),
        "ndcg@10": ndcg.tolist(),
        "split_half_spearman": split_half(per_q_arr, rng),
        "statistics": {},
    }
    for name, values in stats.items():
        arr = np.array(values)
        rho = float(spearmanr(arr, ndcg)[0])
        out["statistics"][name] = {
            "values": values,
            "spearman": rho,
            "spearman_as_better": DIRECTIONS[name] * rho,
            "best_of": [best_of_n(arr, ndcg, DIRECTIONS[name], n, rng) for n in (2, 4, 8) if n <= len(arr)],
        }
        print(
            f"  {nbytes} B {name:<15} rho(better, ndcg) {DIRECTIONS[name] * rho:+.2f}  best-of-4 gain "
            f"{out['statistics'][name]['best_of'][-1]['gain']:+.4f}",
            flush=True,
        )
    print(
        f"  {nbytes} B ndcg {ndcg.mean():.4f} ± {ndcg.std(ddof=1):.4f}  split-half rho {out['split_half_spearman']:+.2f}",
        flush=True,
    )
    return out


def reciprocal_ranks(
    rotation: Rotation | None, docs: np.ndarray, y_pair_queries: torch.Tensor, doc_ids: np.ndarray
) -> np.ndarray:
    scores = query_floats(rotation, y_pair_queries) @ docs.T
    own = scores[np.arange(len(scores)), doc_ids]
    return 1.0 / (1 + (scores > own[:, None]).sum(axis=1))


def pair_rows(
    method: str,
    y_docs: torch.Tensor,
    y_queries: torch.Tensor,
    data: Dataset,
    split: dict[str, Any],
    draws: list[tuple[str, int]],
    nbytes: int,
) -> list[dict[str, Any]]:
    """Per rotation: the pairs' MRR (all; and the held fifth where given) and NDCG@10 on the other queries."""
    rows = []
    for kind, seed in draws:
        rotation = fit_rotation(y_docs, kind, seed, 50)
        _, docs = sign_codes(rotation, y_docs)
        ndcg = per_query(rotation, docs, y_queries, data)
        rr = reciprocal_ranks(rotation, docs, y_queries[split["pair_queries"]], split["pair_docs"])
        row = {
            "method": method,
            "bytes": nbytes,
            "rotation": kind,
            "seed": seed,
            "ndcg@10_other_queries": float(ndcg[split["other"]].mean()),
            "ndcg@10_all": float(ndcg.mean()),
            "mrr_pairs_all": float(rr.mean()),
        }
        if split.get("held") is not None:
            row["mrr_pairs_held"] = float(rr[split["held"]].mean())
        rows.append(row)
    return rows


def choices(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Among none, random seed 0 and itq: what each pair MRR picks and what the other queries pick."""
    three = [r for r in rows if (r["rotation"], r["seed"]) in {("none", 0), ("random", 0), ("itq", 0)}]
    best = max(three, key=lambda r: r["ndcg@10_other_queries"])
    out: dict[str, Any] = {
        "truth": best["rotation"],
        "ndcg": {r["rotation"]: r["ndcg@10_other_queries"] for r in three},
    }
    for key in ("mrr_pairs_all", "mrr_pairs_held"):
        if key in three[0]:
            pick = max(three, key=lambda r: r[key])
            out[key] = {
                "picks": pick["rotation"],
                "agrees": pick["rotation"] == best["rotation"],
                "mrr": {r["rotation"]: r[key] for r in three},
            }
    randoms = [r for r in rows if r["rotation"] == "random"]
    if len(randoms) > 1:
        out["over_draws"] = over_draws(rows, randoms)
    if len(randoms) > 2:
        out["random_draws_spearman_mrr_vs_ndcg"] = float(
            spearmanr([r["mrr_pairs_all"] for r in randoms], [r["ndcg@10_other_queries"] for r in randoms])[0]
        )
    return out


def over_draws(rows: list[dict[str, Any]], randoms: list[dict[str, Any]]) -> dict[str, float]:
    """For each random draw s, the pairs' MRR choosing among none, itq and draw s: how often it picks what the other
    queries pick, and its NDCG@10 on them minus draw s's (the auto default's), mean and worst over the draws."""
    fixed = [r for r in rows if r["rotation"] in ("none", "itq")]
    agree, gains = [], []
    for draw in randoms:
        options = [*fixed, draw]
        pick = max(options, key=lambda r: r["mrr_pairs_all"])
        agree.append(pick is max(options, key=lambda r: r["ndcg@10_other_queries"]))
        gains.append(pick["ndcg@10_other_queries"] - draw["ndcg@10_other_queries"])
    return {
        "agree_rate": float(np.mean(agree)),
        "mean_gain_vs_random": float(np.mean(gains)),
        "worst_gain_vs_random": float(np.min(gains)),
    }


def split_of(
    data: Dataset, count: int, seed: int, cllr_seed: int
) -> tuple[tuple[np.ndarray, np.ndarray], dict[str, Any]]:
    pairs, other = pair_split(data, count, seed)
    qrels = data.qrels.tocsr()
    judged = np.flatnonzero(np.diff(qrels.indptr) > 0)
    chosen = np.random.default_rng(seed).choice(judged, count, replace=False)
    doc_ids = np.array(
        [
            qrels.indices[qrels.indptr[i] + np.argmax(qrels.data[qrels.indptr[i] : qrels.indptr[i + 1]])]
            for i in chosen
        ]
    )
    assert np.array_equal(data.corpus[doc_ids], pairs[1]) and np.array_equal(data.queries[chosen], pairs[0])
    held = torch.randperm(count, generator=torch.Generator().manual_seed(cllr_seed + 2))[
        : round(0.2 * count)
    ].numpy()
    return pairs, {"pair_queries": chosen, "pair_docs": doc_ids, "other": other, "held": held}


def projected(model: adaptemb.Compressor, x: np.ndarray, rank: int) -> torch.Tensor:
    return torch.from_numpy(model.encode(x, k=rank).to_dense())


def real_path_check(
    data: Dataset,
    method: str,
    budgets: list[int],
    rows: dict[tuple[int, str], float],
    seed: int = 0,
    **params: Any,
) -> list[dict[str, Any]]:
    """NDCG@10 of the real path (fit, encode, index search) beside the by-hand number for the same rotation."""
    fitted = adaptemb.fit(data.corpus, method, byte_budgets=budgets, seed=seed, **params)
    out = []
    for nbytes in budgets:
        codes = fitted.encode(data.corpus, bytes=nbytes)
        real = float(
            ndcg_at_k(fitted.index(codes, device="cpu").search(data.queries, 10)[1], data.qrels, 10).mean()
        )
        out.append(
            {
                "method": method,
                "rotation": params.get("rotation", "auto"),
                "bytes": nbytes,
                "rank": codes.dim,
                "real": real,
                "by_hand": rows[(nbytes, params.get("rotation", "random"))],
            }
        )
        print(f"  check {out[-1]}", flush=True)
    return out


def svd_pairs(
    data: Dataset, svd: adaptemb.Compressor, budgets: list[int], seeds: int, pair_seed: int, count: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """svd+binary: rows and choices of one pair split (every pair is held out: svd learns nothing from them)."""
    _, split = split_of(data, count, pair_seed, pair_seed)
    all_rows, picked = [], []
    for nbytes in budgets:
        y_docs, y_queries = projected(svd, data.corpus, 8 * nbytes), projected(svd, data.queries, 8 * nbytes)
        draws = [("none", 0), ("itq", 0)] + [("random", s) for s in range(seeds)]
        rows = pair_rows("svd+binary", y_docs, y_queries, data, {**split, "held": None}, draws, nbytes)
        all_rows += [{**r, "pair_seed": pair_seed} for r in rows]
        picked.append({"method": "svd+binary", "bytes": nbytes, "pair_seed": pair_seed, **choices(rows)})
        print(f"  {picked[-1]}", flush=True)
    return all_rows, picked


def cllr_pairs(data: Dataset, budgets: list[int], pair_seed: int, count: int) -> dict[str, Any]:
    """cllr+binary fitted with one pair split (seed = the split's): rows, choices and the real-path check."""
    pairs, split = split_of(data, count, pair_seed, pair_seed)
    fit_start = time.perf_counter()
    cllr = adaptemb.fit(data.corpus, "cllr", pairs=pairs, seed=pair_seed)
    out: dict[str, Any] = {"fit_s": round(time.perf_counter() - fit_start, 1), "rows": [], "choices": []}
    hand = {}
    for nbytes in budgets:
        y_docs, y_queries = (
            projected(cllr, data.corpus, 8 * nbytes),
            projected(cllr, data.queries, 8 * nbytes),
        )
        rows = pair_rows(
            "cllr+binary", y_docs, y_queries, data, split, [("none", 0), ("random", 0), ("itq", 0)], nbytes
        )
        out["rows"] += [{**r, "pair_seed": pair_seed} for r in rows]
        out["choices"].append(
            {"method": "cllr+binary", "bytes": nbytes, "pair_seed": pair_seed, **choices(rows)}
        )
        print(f"  {out['choices'][-1]}", flush=True)
        hand |= {(nbytes, r["rotation"]): r["ndcg@10_all"] for r in rows}
    out["checks"] = real_path_check(
        data, "cllr+binary", budgets, hand, pair_seed, rotation="none", pairs=pairs
    )
    return out


def main() -> None:
    parser = data_set_parser(__doc__.split("\n")[0], bytes_default="16,32")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=500)
    parser.add_argument(
        "--pair-seeds", type=integers, default="0,1,2,3", help="seeds of the pair splits (and cllr's)"
    )
    parser.add_argument("--probe-rows", type=int, default=1000)
    parser.add_argument("--no-cllr", action="store_true")
    parser.add_argument("--no-part1", action="store_true", help="skip the corpus statistics (part 1)")
    args = parser.parse_args()
    data = dataset(args.data, args.docs, args.seed)
    load_before, start = os.getloadavg(), time.perf_counter()
    svd = adaptemb.fit(data.corpus, "svd", seed=0)
    record: dict[str, Any] = {
        **data_fields("rotation_choice", data),
        "bytes": args.bytes,
        "seeds": args.seeds,
        "pairs": args.pairs,
        "pair_seeds": args.pair_seeds,
        "probe_rows": args.probe_rows,
        "part1": [],
        "part2": [],
        "choices": [],
        "checks": [],
        "cllr_fit_s": [],
    }
    for nbytes in [] if args.no_part1 else args.bytes:
        y_docs, y_queries = projected(svd, data.corpus, 8 * nbytes), projected(svd, data.queries, 8 * nbytes)
        probe = Probe(data, y_docs, args.probe_rows, args.seed + 1)
        record["part1"].append(part_one(data, y_docs, y_queries, args.seeds, probe, nbytes))
    for pair_seed in args.pair_seeds:
        rows, picked = svd_pairs(data, svd, args.bytes, args.seeds, pair_seed, args.pairs)
        record["part2"] += rows
        record["choices"] += picked
        if pair_seed == args.pair_seeds[0]:
            hand = {(r["bytes"], r["rotation"]): r["ndcg@10_all"] for r in rows if r["seed"] == 0}
            for rotation in ("random", "none"):
                record["checks"] += real_path_check(data, "svd+binary", args.bytes, hand, rotation=rotation)
        if not args.no_cllr:
            cllr = cllr_pairs(data, args.bytes, pair_seed, args.pairs)
            record["part2"] += cllr["rows"]
            record["choices"] += cllr["choices"]
            record["checks"] += cllr["checks"]
            record["cllr_fit_s"].append(cllr["fit_s"])
    record |= {
        "total_s": round(time.perf_counter() - start, 1),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "torch_threads": torch.get_num_threads(),
        "machine": machine_info(),
    }
    write_record(args.out or Path(__file__).parent / "results" / f"rotation_choice_{data.name}.json", record)


if __name__ == "__main__":
    main()
