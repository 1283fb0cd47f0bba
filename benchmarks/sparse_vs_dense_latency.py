"""CPU bar of issue 3: sparse codes (k=32 active of h=1536) vs full 384-d float32 vectors through faiss.

One run, one process, the same 512 queries in both forms (the sparse query codes are the queries'
codes, the dense ones their 384-d vectors), a 1,000,000-row database, the CSR paper's protocol
(batch of 512 queries, warm-up rounds, median and spread over timed rounds). Writes
``benchmarks/results/sparse_vs_dense_latency_<device>.json`` with the machine.

Codes: ``--codes random`` draws k distinct dims uniformly per row (fast); ``--codes projected`` makes
them as a TopK(ReLU(x W)) of the dense vectors with a random W (slower to build, same search cost model).

    python benchmarks/sparse_vs_dense_latency.py            # 1M rows, CPU
    python benchmarks/sparse_vs_dense_latency.py --n 100000 --rounds 2
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import faiss
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from arguments import integers  # sibling benchmark modules
from records import write_record

from adaptemb import SparseCodes, build_index, resolve_device
from adaptemb.evaluate.latency import synthetic_dense, synthetic_sparse, time_search, timed
from adaptemb.evaluate.machine import describe, machine_info

RESULTS = Path(__file__).resolve().parent / "results"


def projected_sparse(x: np.ndarray, h: int, k: int, seed: int) -> SparseCodes:
    """TopK(ReLU(x W)) codes of ``x`` with a seeded Gaussian W (d, h), in chunks."""
    w = torch.randn(x.shape[1], h, generator=torch.Generator().manual_seed(seed)) / x.shape[1] ** 0.5
    idx, val = [], []
    for start in range(0, len(x), 65536):
        values, ids = torch.topk(torch.relu(torch.from_numpy(x[start : start + 65536]) @ w), k, dim=1)
        idx.append(ids.numpy()), val.append(values.numpy())
    return SparseCodes(np.concatenate(idx), np.concatenate(val), h)


def _sparse_threads(backend: str) -> int | str:
    """Threads the sparse engine searches with: numba's pool (all cores), one for scipy, the GPU's for torch."""
    if backend == "numba-postings":
        import numba

        return numba.get_num_threads()
    return 1 if backend == "scipy-postings" else "gpu"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1_000_000, help="database rows")
    p.add_argument("--dense-dim", type=int, default=384)
    p.add_argument("--sparse-dim", type=int, default=1536)
    p.add_argument("--active", type=int, default=32)
    p.add_argument("--batch", type=int, default=512, help="queries per timed batch")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--codes", choices=["random", "projected"], default="random")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dense-threads", type=integers, default=None,
                   help="faiss OpenMP thread counts to time dense with (default: all cores, and 1)")
    p.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/...)")
    args = p.parse_args(argv)
    device = str(resolve_device(args.device))
    args.dense_threads = args.dense_threads or sorted({faiss.omp_get_max_threads(), 1}, reverse=True)
    machine = machine_info()
    print(f"machine: {describe(machine)}; load {machine['load_average']}", flush=True)

    dense_docs, build_data_dense = timed(lambda: synthetic_dense(args.n, args.dense_dim, seed=args.seed))
    dense_queries = synthetic_dense(args.batch, args.dense_dim, seed=args.seed + 1)
    if args.codes == "projected":
        sparse_docs, build_data_sparse = timed(lambda: projected_sparse(dense_docs.values, args.sparse_dim, args.active, args.seed))
        sparse_queries = projected_sparse(dense_queries.values, args.sparse_dim, args.active, args.seed)
    else:
        sparse_docs, build_data_sparse = timed(lambda: synthetic_sparse(args.n, args.sparse_dim, args.active, seed=args.seed))
        sparse_queries = synthetic_sparse(args.batch, args.sparse_dim, args.active, seed=args.seed + 1)
    print(f"data: dense {build_data_dense:.1f}s, sparse {build_data_sparse:.1f}s", flush=True)

    results = {}
    cases = [(f"dense-faiss-{t}t", dense_docs, dense_queries, lambda d: build_index(d, device=device), t) for t in args.dense_threads]
    cases.append(("sparse", sparse_docs, sparse_queries, lambda d: build_index(d, device=device), None))
    if device == "cpu":  # the pure-scipy engine too, for reference
        cases.append(("sparse-scipy", sparse_docs, sparse_queries, lambda d: build_index(d, backend="scipy"), None))
    default_threads = faiss.omp_get_max_threads()
    for name, docs, queries, make, threads in cases:
        faiss.omp_set_num_threads(threads or default_threads)
        index, build_s = timed(partial(make, docs))
        stats = time_search(index.search, queries, batch_size=args.batch, warmup=args.warmup, rounds=args.rounds)
        faiss.omp_set_num_threads(default_threads)
        results[name] = {
            "backend": index.backend, "device": index.device, "dim": docs.dim, "threads": threads or _sparse_threads(index.backend),
            "active_dims": int(docs.active_counts()[0]), "bytes_per_vector": docs.bytes_per_vector,
            "index_build_s": build_s, **stats.as_dict(),
        }
        print(f"{name}: {index.backend} median {stats.median_s:.3f}s per {args.batch} queries "
              f"(p10 {stats.p10_s:.3f}, p90 {stats.p90_s:.3f})", flush=True)
        del index
    best_dense = min((r for k, r in results.items() if k.startswith("dense")), key=lambda r: r["median_s"])
    speedup = best_dense["median_s"] / results["sparse"]["median_s"]  # the default engine
    print(f"sparse speed-up over the fastest dense setting: {speedup:.1f}x", flush=True)
    record = {
        "benchmark": "sparse_vs_dense_latency", "n": args.n, "batch": args.batch, "codes": args.codes,
        "seed": args.seed, "results": results, "speedup_median": speedup,
        "speedup_definition": "median dense batch time (fastest faiss thread setting) / median sparse batch time",
        "machine": machine, "load_average_end": machine_info()["load_average"], "argv": sys.argv[1:],
    }
    out = args.out or RESULTS / f"sparse_vs_dense_latency_{device.split(':')[0]}_{args.n}.json"
    write_record(out, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
