"""Search over csr's packed codes at 500,000 rows against faiss ``IndexFlatIP`` on the same float vectors.

csr is fitted on the built-in corpus (8,000 rows, 384-d); the 500,000 documents are corpus rows mixed with
another row and noise (``0.8 a + 0.3 b + 0.05 noise``, L2-normalised), encoded at each byte budget
(``encode(x, bytes=B)``) and searched through csr's index (``numba-levels``: the raw float query projected
through the decoder, against the packed documents) with a batch of 512 raw queries (the built-in queries), top-10.
faiss' exact ``IndexFlatIP`` searches the 500,000 float32 vectors with the same 512 queries and the same threads.
Times are seconds per batch (median of the timed rounds after one warm-up round); the speedup is faiss' median over
csr's (the query projection included in csr's time). The JSON records the machine and its load.

    python benchmarks/packed_search.py                 # 500,000 rows, 16 / 32 / 64 B
    python benchmarks/packed_search.py --rows 100000 --rounds 3
    python benchmarks/packed_search.py --data wordnet-examples-768   # the 768-d stand-in (5,000 rows, 1,000 queries)

With ``--data wordnet-examples-768`` csr is fitted on the 768-d stand-in's 5,000 documents (``compose_frontier.dataset``)
and the 500,000 rows are mixed from them; the record goes to ``packed_search_500k_wordnet-examples-768.json``.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import asdict
from pathlib import Path

import faiss
import numpy as np
from compose_frontier import dataset
from records import write_record

import adaptemb
from adaptemb.datasets import load_dataset
from adaptemb.evaluate.latency import summarize, time_rounds
from adaptemb.evaluate.machine import machine_info

OUT = Path(__file__).parent / "results" / "packed_search_500k.json"


def documents(corpus: np.ndarray, rows: int, seed: int = 0) -> np.ndarray:
    """``rows`` unit rows around the corpus: ``0.8 a + 0.3 b + 0.05 noise`` for random corpus rows a, b."""
    rng = np.random.default_rng(seed)
    out = np.empty((rows, corpus.shape[1]), np.float32)
    for start in range(0, rows, 65536):
        n = min(65536, rows - start)
        block = 0.8 * corpus[rng.integers(len(corpus), size=n)] + 0.3 * corpus[rng.integers(len(corpus), size=n)]
        block += 0.05 * rng.standard_normal(block.shape).astype(np.float32) / np.sqrt(corpus.shape[1])
        out[start : start + n] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bytes", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--data", default="default", help="default, or wordnet-examples-768 (the 768-d stand-in)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    data = load_dataset("default") if args.data == "default" else dataset(args.data, 5000, 0)
    corpus, queries = data.corpus.astype(np.float32), data.queries[:512].astype(np.float32)
    csr = adaptemb.fit(corpus, "csr", progress=False)
    docs = documents(corpus, args.rows)
    flat = faiss.IndexFlatIP(docs.shape[1])
    flat.add(docs)
    faiss_time = summarize(time_rounds(lambda: flat.search(queries, 10), rounds=args.rounds), batch_size=len(queries), warmup=1)
    rows = []
    for budget in args.bytes:
        start = time.perf_counter()
        codes = csr.encode(docs, bytes=budget)
        encode_s = time.perf_counter() - start
        index = csr.index(codes, device="cpu")
        stats = summarize(time_rounds(lambda index=index: index.search(queries, 10), rounds=args.rounds),
                          batch_size=len(queries), warmup=1)
        rows.append({"budget_bytes": budget, "k": codes.k, "value_bits": codes.value_bits,
                     "bytes_per_vector": codes.bytes_per_vector, "backend": index.backend, "index_nbytes": index.nbytes,
                     "encode_s": round(encode_s, 1), "search": asdict(stats),
                     "speedup_over_faiss_flat": round(faiss_time.median_s / stats.median_s, 2)})
        print(rows[-1], flush=True)
    out = OUT if args.data == "default" else OUT.with_name(f"{OUT.stem}_{args.data}.json")
    write_record(out, {"data": args.data, "dim": docs.shape[1], "rows_indexed": args.rows, "queries": len(queries), "top_k": 10, "threads": faiss.omp_get_max_threads(),
                       "faiss_flat_ip": asdict(faiss_time), "csr": rows, "machine": machine_info(),
                       "load_before": [round(x, 2) for x in load_before],
                       "load_after": [round(x, 2) for x in os.getloadavg()]})


if __name__ == "__main__":
    main()
