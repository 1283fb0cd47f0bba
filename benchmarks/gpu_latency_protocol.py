"""The CSR paper's latency protocol: dense vs sparse search at equal active dims, 512 queries, db >= 1M.

Runs unchanged on CPU (small default round counts) and on CUDA (paper-like round counts), and
records the device name with every number in ``benchmarks/results/latency_protocol_<device>.json``.

For each active-dim count ``a``: dense = ``a``-dim float32 vectors, searched by matmul + top-k
(``build_index``'s dense backend, torch; faiss on the CPU, faiss-gpu on CUDA, recorded as an error row where
faiss-gpu is not installed); sparse = ``a`` active of ``h`` dims, searched by (1) the library's sparse backend
(CPU: posting lists; CUDA: torch CSR docs × dense queries) and (2) the paper's form, both sides CSR and one
sparse×sparse product, then top-k.

    python benchmarks/gpu_latency_protocol.py                       # device auto
    python benchmarks/gpu_latency_protocol.py --n 1300000 --rounds 2000 --warmup 100   # the paper's counts
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from arguments import integers  # sibling benchmark modules
from records import write_record

from adaptemb import Codes, SparseCodes, build_index, resolve_device
from adaptemb.evaluate.latency import summarize, synthetic_dense, synthetic_sparse, time_rounds, timed
from adaptemb.evaluate.machine import describe, machine_info

RESULTS = Path(__file__).resolve().parent / "results"
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")


def torch_csr(matrix: sp.csr_matrix, device: str) -> torch.Tensor:
    """A scipy CSR matrix as a float32 torch sparse CSR tensor on ``device``."""
    return torch.sparse_csr_tensor(torch.from_numpy(matrix.indptr.astype(np.int64)),
                                   torch.from_numpy(matrix.indices.astype(np.int64)),
                                   torch.from_numpy(matrix.data.astype(np.float32)), size=matrix.shape, device=device,
                                   check_invariants=False)  # built from a valid scipy CSR matrix


class SparseSparse:
    """The paper's form: query CSR × document CSR (transposed) → sparse scores → dense → top-k."""

    backend = "torch-spgemm"

    def __init__(self, docs: SparseCodes, device: str) -> None:
        self.device = device
        self._docs_t = torch_csr(docs.to_csr().T.tocsr(), device)  # (h, n)

    def search(self, queries: SparseCodes, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
        q = torch_csr(queries.to_csr(), self.device)
        scores = torch.sparse.mm(q, self._docs_t).to_dense()
        return torch.topk(scores, top_k, dim=1)


def _dense_engines(docs: Codes, device: str) -> dict[str, Callable[[], Any]]:
    faiss = "faiss-cpu" if device == "cpu" else "faiss-gpu"
    return {"torch-matmul": lambda: build_index(docs, device=device, backend="torch"),
            faiss: lambda: build_index(docs, device=device, backend="faiss")}


def _sparse_engines(docs: SparseCodes, device: str) -> dict[str, Callable[[], Any]]:
    return {"adaptemb-sparse": lambda: build_index(docs, device=device), "torch-spgemm": lambda: SparseSparse(docs, device)}


def _measure(kind: str, engines: dict[str, Callable[[], Any]], queries: Codes, a: int, h: int | None,
             args: argparse.Namespace, device: str) -> list[dict[str, Any]]:
    rows = []
    for engine, make in engines.items():
        try:
            index, build_s = timed(make)
            times = time_rounds(partial(index.search, queries, args.top_k), warmup=args.warmup, rounds=args.rounds)
        except (RuntimeError, MemoryError, NotImplementedError, ValueError) as err:  # out of GPU memory, no faiss-gpu
            rows.append({"kind": kind, "active": a, "h": h, "engine": engine, "error": f"{type(err).__name__}: {err}"})
            continue
        stats = summarize(times, batch_size=args.batch, warmup=args.warmup)
        rows.append({"kind": kind, "active": a, "h": h, "engine": engine, "n": args.n, "device": device,
                     "sparsity": None if h is None else 1 - a / h, "build_s": build_s, **stats.as_dict()})
        print(f"{kind:6} a={a:4} h={h or '-':>6} {engine:16} median {stats.median_s * 1e3:9.2f} ms / {args.batch} queries "
              f"(p10 {stats.p10_s * 1e3:.2f}, p90 {stats.p90_s * 1e3:.2f})", flush=True)
        del index
    if device != "cpu":
        torch.cuda.empty_cache()
    return rows


def _measure_dense(a: int, args: argparse.Namespace, device: str) -> list[dict[str, Any]]:
    docs, queries = synthetic_dense(args.n, a, seed=args.seed), synthetic_dense(args.batch, a, seed=args.seed + 1)
    return _measure("dense", _dense_engines(docs, device), queries, a, None, args, device)


def _measure_sparse(a: int, h: int, args: argparse.Namespace, device: str) -> list[dict[str, Any]]:
    docs, queries = synthetic_sparse(args.n, h, a, seed=args.seed), synthetic_sparse(args.batch, h, a, seed=args.seed + 1)
    return _measure("sparse", _sparse_engines(docs, device), queries, a, h, args, device)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto")
    p.add_argument("--n", type=int, default=1_000_000, help="database rows (the paper: 1.3M)")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--active", type=integers, default="16,32,64", help="active dims a (dense dim = sparse k)")
    p.add_argument("--h", type=integers, default="1536,4096,16384", help="sparse code sizes h")
    p.add_argument("--warmup", type=int, default=None, help="default: 20 on CUDA, 1 on CPU (the paper: 100)")
    p.add_argument("--rounds", type=int, default=None, help="default: 100 on CUDA, 3 on CPU (the paper: 2000)")
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    device = str(resolve_device(args.device))
    cuda = device.startswith("cuda")
    args.warmup = args.warmup if args.warmup is not None else (20 if cuda else 1)
    args.rounds = args.rounds if args.rounds is not None else (100 if cuda else 3)
    machine = machine_info()
    device_name = torch.cuda.get_device_name(0) if cuda else machine["cpu"]
    print(f"device: {device_name}; {describe(machine)}; n={args.n:,}, batch {args.batch}, "
          f"warmup {args.warmup}, rounds {args.rounds}", flush=True)
    rows = []
    for a in args.active:
        rows += _measure_dense(a, args, device)
        for h in args.h:
            rows += _measure_sparse(a, h, args, device)
    record = {"benchmark": "latency_protocol", "device": device, "device_name": device_name, "n": args.n,
              "batch": args.batch, "warmup": args.warmup, "rounds": args.rounds, "rows": rows, "machine": machine,
              "load_average_end": machine_info()["load_average"], "argv": sys.argv[1:]}
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    out = args.out or RESULTS / f"latency_protocol_{slug}.json"
    write_record(out, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
