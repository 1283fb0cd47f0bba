"""How many leading directions itq-tail leaves unrotated: relevance (NDCG@10) against the float ranking (recall@10).

Usage::

    python benchmarks/rotation_head_tradeoff.py default | wordnet-examples-768 | static-256 | minilm-384-200k

svd+binary at 1 bit per dimension with ITQ-20 on every direction (head 0), itq-tail with 4, 8 and 16 leading
directions unrotated (svd+binary's ``itq_tail_unrotated``) and a random rotation
(head -1), seeds 0-2. On the bench data sets (the built-in data, the 768-d stand-in's 5,000 documents): NDCG@10 of
every real query and the share of each query's exact float top-10 found, at 32, 48 and 64 B. On the Debian corpora
(/work/data/debian-corpus, ``benchmarks/debian_corpus.py``): fitted on 50k rows, 100k documents, the last 1,000
rows as queries, recall of the float top-10 at 32 B. Prints one line per fit (record: rotation_head_tradeoff.json).
"""

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from compose_frontier import dataset

import adaptemb
from adaptemb.evaluate import ndcg_at_k, neighbour_recall_at_k
from adaptemb.ranking import exact_top_k

torch.set_num_threads(1)
which = sys.argv[1]
budgets = [32, 48, 64]


def float_top10(queries: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """Each query's exact top-10 documents by cosine."""
    unit = [adaptemb.unit_rows(torch.from_numpy(np.asarray(a, dtype=np.float32))).numpy() for a in (queries, docs)]
    return exact_top_k(unit[0], unit[1], 10)


def float_recall(ids: np.ndarray, truth: np.ndarray) -> float:
    return float(neighbour_recall_at_k(ids, truth, 10).mean())


if which in ("default", "wordnet-examples-768"):
    data = dataset(which, 5000, 0) if which != "default" else dataset("default", 0, 0)
    truth = float_top10(data.queries, data.corpus)
    for head in (0, 4, 8, 16, -1):
        for seed in (0, 1, 2):
            if head == -1:
                params = {"rotation": "random", "seed": seed}
            else:
                params = {"rotation": "itq-tail", "itq_tail_unrotated": head, "itq_iterations": 20, "seed": seed}
            comp = adaptemb.fit(data.corpus, "svd+binary", byte_budgets=budgets, bits_per_dim=1, **params)
            res = {}
            for b in budgets:
                ids = comp.index(comp.encode(data.corpus, bytes=b), device="cpu").search(data.queries, 10)[1]
                res[b] = (round(float(ndcg_at_k(ids, data.qrels, 10).mean()), 4), round(float_recall(ids, truth), 4))
            print(which, "head", head, "seed", seed, res, flush=True)
else:
    x = np.load(f"/work/data/debian-corpus/{which}.npy", mmap_mode="r")
    fit, docs, queries = (np.array(rows, dtype=np.float32) for rows in (x[:50000], x[:100000], x[len(x) - 1000:]))
    truth = float_top10(queries, docs)
    for head in (0, 4, 8, 16):
        comp = adaptemb.fit(fit, "svd+binary", byte_budgets=[32], bits_per_dim=1, rotation="itq-tail",
                            itq_tail_unrotated=head, itq_iterations=20, seed=0)
        ids = comp.index(comp.encode(docs, bytes=32)).search(queries, 10)[1]
        print(which, "head", head, round(float_recall(ids, truth), 4), flush=True)
