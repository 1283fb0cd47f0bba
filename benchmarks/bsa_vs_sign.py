"""BSA binary sparse codes vs 1-bit sign quantisation at equal bytes per vector, on real text embeddings.

Usage::

    python benchmarks/bsa_vs_sign.py DATA.npz [--fit-on extra] [--out benchmarks/results]

``DATA.npz`` holds ``corpus`` (n, d), ``queries`` (q, d), ``gold`` (q,) (the one relevant corpus row of
each query), optionally ``queries_lemmas``/``gold_lemmas`` (a second query set) and ``extra`` (rows to
fit on, disjoint from the corpus; without it the corpus itself is used). BSA is fitted with its
defaults except ``h = 8 d``, ``k = 64``. Reported per method and scoring: bytes per vector (stored
layout, and the ideal bit-packed size), NDCG@10 as a fraction of full precision, and neighbour
recall@10 (overlap with the float32 top 10). Results go to ``<out>/bsa_vs_sign_<machine>.{json,md}``
(``<machine>`` is the host name; the JSON's ``machine`` is ``adaptemb.evaluate.machine.machine_info()``).

The metrics are the library's (``adaptemb.ranking.top_k`` and ``adaptemb.evaluate.metrics``): score
ties are broken by the lower corpus row id, for NDCG@10 too, where the earlier helper of this script
counted ties in the query's favour (the gold row ranked ahead of every row with an equal score), so
NDCG@10 of coarse scorings such as Hamming similarity can come out slightly lower than before.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

import adaptemb
from adaptemb.evaluate.machine import machine_info
from adaptemb.evaluate.metrics import ndcg_at_k
from adaptemb.ranking import neighbour_recall_at_k, top_k


def top10(scores: np.ndarray) -> np.ndarray:
    """(q, 10) best corpus rows per query, best first; ties go to the lower row id."""
    return top_k(scores, 10)[1]


def gold_qrels(gold: np.ndarray, n: int) -> sp.csr_matrix:
    """(q, n) relevance matrix with the one gold row of each query marked 1."""
    gold = np.asarray(gold)
    return sp.csr_matrix((np.ones(len(gold), dtype=np.float32), (np.arange(len(gold)), gold)), shape=(len(gold), n))


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


class Bench:
    """Scores every method on every query set against the same corpus."""

    def __init__(self, corpus: np.ndarray, query_sets: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        self.corpus, self.query_sets, self.rows = corpus, query_sets, []
        self.qrels = {name: gold_qrels(gold, len(corpus)) for name, (_, gold) in query_sets.items()}
        self.exact = {name: top10(q @ corpus.T) for name, (q, _) in query_sets.items()}
        self.full_ndcg = {name: float(ndcg_at_k(ids, self.qrels[name], 10).mean()) for name, ids in self.exact.items()}

    def add(self, method: str, scoring: str, bytes_stored: float, bytes_ideal: float, score_fn) -> None:
        row = {"method": method, "scoring": scoring, "bytes_per_vector": round(bytes_stored, 2),
               "ideal_bytes_per_vector": round(bytes_ideal, 2)}
        for name, (q, _) in self.query_sets.items():
            found = top10(np.asarray(score_fn(q)))
            ndcg = float(ndcg_at_k(found, self.qrels[name], 10).mean())
            row[f"ndcg10_{name}"] = round(ndcg, 4)
            row[f"ndcg10_frac_{name}"] = round(ndcg / self.full_ndcg[name], 4)
            row[f"nbr_recall10_{name}"] = round(float(neighbour_recall_at_k(found, self.exact[name], 10).mean()), 4)
        self.rows.append(row)
        print(json.dumps(row), flush=True)


def add_sign(bench: Bench, fit_rows: np.ndarray, bits: int, seed: int = 0) -> None:
    """1-bit sign codes: the ``binary`` plugin at d bits; a random Gaussian expansion for more bits."""
    d = fit_rows.shape[1]
    if bits == d:
        sign = adaptemb.get_compressor("binary").fit(fit_rows)
        docs = sign.encode(bench.corpus)
        bench.add(f"sign {bits} bits (binary plugin)", "hamming", docs.bytes_per_vector, bits / 8,
                  lambda q: sign.score(sign.encode_queries(q), docs))
        return
    proj = np.random.default_rng(seed).standard_normal((d, bits)).astype(np.float32)
    docs = adaptemb.BinaryCodes.from_signs(bench.corpus @ proj)
    bench.add(f"sign {bits} bits (random projection)", "hamming", docs.bytes_per_vector, bits / 8,
              lambda q: adaptemb.BinaryCodes.from_signs(q @ proj).similarity(docs))


def with_scoring(bsa: adaptemb.Compressor, scoring: str) -> adaptemb.Compressor:
    """The same fitted BSA compressor under another ``scoring`` setting."""
    other = adaptemb.get_compressor("bsa", **{**bsa.config.model_dump(), "scoring": scoring})
    other.restore(bsa.dim, bsa.state_tensors())
    return other


SCORINGS = {"dot": "symmetric dot (shared features)", "cosine": "symmetric cosine",
            "asymmetric_dot": "asymmetric <q, x_hat>", "asymmetric": "asymmetric cos(q, x_hat) (default)"}


def add_bsa(bench: Bench, bsa: adaptemb.Compressor, k: int | None) -> None:
    """BSA at natural mode (k=None) or fixed k, under every scoring the plugin offers."""
    docs = bsa.encode(bench.corpus, k=k)
    label = "BSA natural" if k is None else f"BSA fixed k={k}"
    label += f" (mean {docs.active_counts().mean():.1f} active)"
    stored, ideal = docs.bytes_per_vector, docs.storage["ideal_bytes_per_vector"]
    for scoring, name in SCORINGS.items():
        scorer = with_scoring(bsa, scoring)
        bench.add(label, name, stored, ideal, lambda q, c=scorer: c.score(c.encode_queries(q, k=k), docs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--fit-on", default="extra", help="array to fit on (default: extra; falls back to corpus)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--epochs", type=int, default=None, help="override BSA epochs (default: the plugin's)")
    args = parser.parse_args()
    data = np.load(args.data)
    corpus = unit(data["corpus"])
    fit_rows = unit(data[args.fit_on] if args.fit_on in data.files else data["corpus"])
    query_sets = {"queries": (unit(data["queries"]), data["gold"])}
    if "queries_lemmas" in data.files:
        query_sets["lemmas"] = (unit(data["queries_lemmas"]), data["gold_lemmas"])
    info = machine_info()
    bench = Bench(corpus, query_sets)
    d = corpus.shape[1]
    bench.add("float32 (full)", "cosine", 4 * d, 4 * d, lambda q: q @ corpus.T)
    extra = {} if args.epochs is None else {"epochs": args.epochs}
    started = time.perf_counter()
    bsa = adaptemb.get_compressor("bsa", h=8 * d, k=64, progress=False, **extra).fit(fit_rows)
    fit_seconds = time.perf_counter() - started
    natural = bsa.encode(corpus)
    for bits in (d, 2 * d, int(8 * natural.bytes_per_vector)):
        add_sign(bench, fit_rows, bits)
    for k in (None, 64, 32, 24):
        add_bsa(bench, bsa, k)
    recon = bsa.decode(natural)
    result = {
        "machine": info, "data": str(args.data), "fit_on": args.fit_on if args.fit_on in data.files else "corpus",
        "fit_rows": len(fit_rows), "dim": d, "bsa_config": bsa.config.model_dump(), "fit_seconds": round(fit_seconds, 1),
        "fit_report": bsa.fit_report,
        "corpus_reconstruction_cosine_distance": float(np.mean(1 - np.sum(unit(recon) * corpus, axis=1))),
        "corpus_natural_active_mean": float(natural.active_counts().mean()),
        "corpus_natural_active_std": float(natural.active_counts().std()),
        "corpus_storage": natural.storage, "rows": bench.rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"bsa_vs_sign_{platform.node()}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2, default=str))
    stem.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


def markdown(result: dict) -> str:
    names = [key[len("ndcg10_frac_"):] for key in result["rows"][0] if key.startswith("ndcg10_frac_")]
    head = "| method | scoring | bytes/vec (stored) | bytes/vec (ideal) | " + " | ".join(
        f"NDCG@10 {n} (frac of full) | nbr R@10 {n}" for n in names) + " |"
    lines = [head, "|" + "---|" * (4 + 2 * len(names))]
    for row in result["rows"]:
        cells = [row["method"], row["scoring"], f"{row['bytes_per_vector']:g}", f"{row['ideal_bytes_per_vector']:g}"]
        for n in names:
            cells += [f"{row[f'ndcg10_{n}']:.4f} ({row[f'ndcg10_frac_{n}']:.3f})", f"{row[f'nbr_recall10_{n}']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    m = result["machine"]
    load = f"{m['load_average'][0]:.1f}" if m.get("load_average") else "?"
    lines.append(f"\nMachine: {m['cpu']}, {m['cpu_cores_usable']} cores, torch threads {m['torch_threads']}, "
                 f"1-min load average at start {load} (shared machine). "
                 f"Fit on {result['fit_rows']} rows ({result['fit_on']}) in {result['fit_seconds']} s.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
