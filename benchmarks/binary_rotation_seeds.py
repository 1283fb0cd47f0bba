"""svd+binary against faiss' rotated 1-bit codes over rotation seeds, and three candidate changes (issue 29).

Usage::

    python benchmarks/binary_rotation_seeds.py [--data default | wordnet-examples-768] [--docs 5000]
                                               [--bytes 16,32] [--seeds 5] [--speed-rows 100000]

The records in benchmarks/results/ were run with ``--seeds 20`` (and ``--speed-rows 0`` on the stand-in).
                                               [--out benchmarks/results/binary_rotation_seeds_DATA.json]

Every row is NDCG@10 with raw float queries, per rotation seed; the record holds each seed's number and the
mean and standard deviation over seeds:

* ``svd+binary``: ``adaptemb.fit(C, "svd+binary", byte_budgets=..., seed=s)``, ``encode(C, bytes=B)``,
  ``index(codes).search(Q, 10)`` (the real path), seeds 0 .. n-1;
* ``faiss PCA{m},RR(seed),SQtqmse1``: faiss' PCA, its ``RandomRotationMatrix(m, m).init(seed)`` and the 1-bit
  TurboQuant-MSE scalar quantiser (seed 5 is ``PCAR{m},SQtqmse1``'s own draw: faiss' ``prepare_Ab`` fixes it),
  seeds 5 .. n+4; faiss trained on one thread; ``PCA{8B-64},RaBitQ`` once (it draws nothing);
* candidates scored by hand (``q @ decoded.T``, top 10) on the composition's own projection, each seed:
  ``random (by hand)`` the composition's rotation and ±1 documents (must equal the real path);
  ``+ per-dim scale`` documents decoded as ``s_j * sign`` with ``s_j = mean |z_j|`` over the rotated fit rows
  (the 1-bit Lloyd-Max level of each dimension); ``+ centred query`` the query centred on the fit mean before
  the rotation, as faiss' ``A q + b`` does; ``hadamard`` a randomized Hadamard rotation (seeded sign flips, then
  the normalised Walsh-Hadamard matrix; ranks that are powers of two only), with and without the scale.

Encode speed: the rotation alone on ``--speed-rows`` random rows at 256, 512 and 768 (padded to 1024) dims,
dense float32 matmul against sign flips + a fast Walsh-Hadamard transform in torch (log2(r) butterfly passes, or
the same transform as two small matrix products), beside the projection from 768 dims; median of 5 after a
warm-up, with the load average.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import scipy.linalg
import torch

import adaptemb
from adaptemb import walsh_hadamard
from adaptemb.datasets import Dataset
from adaptemb.evaluate.machine import machine_info
from adaptemb.evaluate.metrics import ndcg_at_k

sys.path.insert(0, str(Path(__file__).parent))
from arguments import data_set_parser
from compose_frontier import dataset
from records import data_fields, write_record

FAISS_DEFAULT_SEED = 5  # PCAMatrix::prepare_Ab draws RandomRotationMatrix(m, m).init(5) for PCAR{m}


def top10(queries: np.ndarray, decoded: np.ndarray) -> np.ndarray:
    scores = queries @ decoded.T
    part = np.argpartition(-scores, 10, axis=1)[:, :10]
    order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def hadamard_rotation(rank: int, seed: int) -> np.ndarray:
    """The randomized Hadamard rotation ``diag(signs) H / sqrt(r)`` as a matrix (rows rotate by ``y @ M``)."""
    signs = np.where(np.random.default_rng((seed, rank, 1)).random(rank) < 0.5, -1.0, 1.0)
    return signs[:, None] * scipy.linalg.hadamard(rank) / np.sqrt(rank)


def hand_rows(
    label: str,
    matrix: np.ndarray,
    center: np.ndarray,
    fit_rows: np.ndarray,
    docs: np.ndarray,
    queries: np.ndarray,
    data: Dataset,
    centred_query: bool = True,
) -> dict[str, float]:
    """NDCG@10 of sign codes under ``matrix``: plain ±1, per-dim scale, and (optionally) a centred query."""
    signs = np.where((docs - center) @ matrix > 0, 1.0, -1.0)
    scale = np.abs((fit_rows - center) @ matrix).mean(axis=0)
    rotated_q = queries @ matrix
    out = {
        label: ndcg_at_k(top10(rotated_q, signs), data.qrels, 10).mean(),
        f"{label} + per-dim scale": ndcg_at_k(top10(rotated_q, signs * scale), data.qrels, 10).mean(),
    }
    if centred_query:
        out[f"{label} + centred query"] = ndcg_at_k(
            top10((queries - center) @ matrix, signs), data.qrels, 10
        ).mean()
    return out


def ours(data: Dataset, budgets: list[int], seed: int) -> dict[tuple[int, str], float]:
    fitted = adaptemb.fit(data.corpus, "svd+binary", byte_budgets=budgets, seed=seed)
    state = fitted.state_tensors()  # the saved form: projection.*, rank{r}.center, rank{r}.rotation
    projection = adaptemb.fit(data.corpus, "svd", seed=seed)  # the composition's own projection (exact PCA)
    same = projection.state_tensors()
    assert all(torch.equal(t, state[f"projection.{key}"]) for key, t in same.items()), "not the composition's PCA"
    out: dict[tuple[int, str], float] = {}
    for nbytes in budgets:
        codes = fitted.encode(data.corpus, bytes=nbytes)
        _, ids = fitted.index(codes, device="cpu").search(data.queries, 10)
        out[(nbytes, "svd+binary")] = float(ndcg_at_k(ids, data.qrels, 10).mean())
        rank = codes.dim
        docs, queries = (
            projection.encode(x, k=rank).to_dense().astype(np.float64) for x in (data.corpus, data.queries)
        )
        center = state[f"rank{rank}.center"].double().numpy()
        rows = hand_rows(
            "random (by hand)", state[f"rank{rank}.rotation"].double().numpy(), center, docs, docs, queries, data
        )
        if rank & (rank - 1) == 0:
            rows |= hand_rows(
                "hadamard", hadamard_rotation(rank, seed), center, docs, docs, queries, data, False
            )
        out |= {(nbytes, label): float(value) for label, value in rows.items()}
    return out


def faiss_rotated(data: Dataset, m: int, seed: int) -> float:
    """NDCG@10 of faiss' PCA to m dims, ``RandomRotationMatrix(m, m).init(seed)`` and ``SQtqmse1``."""
    pca = faiss.PCAMatrix(data.dim, m, 0, False)
    rotation = faiss.RandomRotationMatrix(m, m)
    rotation.init(seed)
    quantizer = faiss.IndexScalarQuantizer(m, faiss.ScalarQuantizer.QT_1bit_tqmse, faiss.METRIC_INNER_PRODUCT)
    index = faiss.IndexPreTransform(rotation, quantizer)
    index.prepend_transform(pca)
    index.train(data.corpus)  # the rotation is already initialised: only the PCA trains
    index.add(data.corpus)
    return float(ndcg_at_k(index.search(data.queries, 10)[1], data.qrels, 10).mean())


def faiss_factory(data: Dataset, spec: str) -> float:
    index = faiss.index_factory(data.dim, spec, faiss.METRIC_INNER_PRODUCT)
    index.train(data.corpus)
    index.add(data.corpus)
    return float(ndcg_at_k(index.search(data.queries, 10)[1], data.qrels, 10).mean())


def fwht(x: torch.Tensor) -> torch.Tensor:
    """Unnormalised fast Walsh-Hadamard transform of each row (width a power of two)."""
    n, width = x.shape
    half = 1
    while half < width:
        pairs = x.view(n, width // (2 * half), 2, half)
        x = torch.stack((pairs[:, :, 0] + pairs[:, :, 1], pairs[:, :, 0] - pairs[:, :, 1]), dim=2)
        half *= 2
    return x.reshape(n, width)


def median_seconds(step: Any, repeats: int = 5) -> float:
    step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def encode_speed(rows: int, dim: int = 768) -> list[dict[str, Any]]:
    """Rotation time per 1,000 rows: dense ``(y - c) @ R`` against sign flips + Walsh-Hadamard (padded to a power
    of two; butterfly passes, or two small matrix products), beside the projection from ``dim`` dims it follows."""
    x = torch.randn(rows, dim)
    out = [
        {"rank": rank, "rows": rows, "torch_threads": torch.get_num_threads(), **rotation_times(x, rank)}
        for rank in (256, 512, 768)
    ]
    for row in out:
        print(row, flush=True)
    return out


def rotation_times(x: torch.Tensor, rank: int) -> dict[str, float]:
    """Milliseconds per 1,000 rows of each step at ``rank`` (median of 5 after a warm-up)."""
    rows, padded = len(x), 1 << (rank - 1).bit_length()
    y, center = torch.randn(rows, rank), torch.randn(rank)
    matrix = torch.linalg.qr(torch.randn(rank, rank))[0]
    components = torch.linalg.qr(torch.randn(x.shape[1], rank))[0]
    signs = torch.where(torch.rand(padded) < 0.5, -1.0, 1.0)

    def flipped() -> torch.Tensor:
        return torch.nn.functional.pad(y - center, (0, padded - rank)) * signs

    steps = {
        "projection_from_dim": lambda: x @ components,
        "dense": lambda: (y - center) @ matrix,
        "hadamard_butterfly": lambda: fwht(flipped()) * padded**-0.5,
        "hadamard_kronecker": lambda: walsh_hadamard(flipped()),  # the library's: H_a (x) H_b, normalised
    }
    return {
        "padded": padded,
        **{f"{name}_ms_per_1000": 1e6 * median_seconds(step) / rows for name, step in steps.items()},
    }


def summary(values: list[float]) -> dict[str, Any]:
    spread = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return {"values": values, "mean": float(np.mean(values)), "std": spread}


def main() -> None:
    parser = data_set_parser(__doc__.split("\n")[0], bytes_default="16,32")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--speed-rows", type=int, default=100_000, help="rows of the encode-speed test; 0: skip it"
    )
    args = parser.parse_args()
    data = dataset(args.data, args.docs, args.seed)
    load_before, start = os.getloadavg(), time.perf_counter()
    faiss.omp_set_num_threads(1)  # faiss' PCA changes in its last bits with the thread count (tq_parity.py)
    per_seed: dict[tuple[int, str], list[float]] = {}
    for seed in range(args.seeds):
        for key, value in ours(data, args.bytes, seed).items():
            per_seed.setdefault(key, []).append(value)
        for nbytes in args.bytes:
            per_seed.setdefault((nbytes, "faiss PCA{m},RR(seed),SQtqmse1"), []).append(
                faiss_rotated(data, 8 * nbytes, FAISS_DEFAULT_SEED + seed)
            )
        print(f"seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)
    rows = [
        {"budget": nbytes, "label": label, **summary(values)}
        for (nbytes, label), values in sorted(per_seed.items())
    ]
    for nbytes in args.bytes:
        rows.append(
            {
                "budget": nbytes,
                "label": f"faiss PCAR{8 * nbytes},SQtqmse1 (factory, seed 5)",
                **summary([faiss_factory(data, f"PCAR{8 * nbytes},SQtqmse1")]),
            }
        )
        rows.append(
            {
                "budget": nbytes,
                "label": f"faiss PCA{min(data.dim, 8 * nbytes - 64)},RaBitQ",
                **summary([faiss_factory(data, f"PCA{min(data.dim, 8 * nbytes - 64)},RaBitQ")]),
            }
        )
    load_after = os.getloadavg()
    speed = encode_speed(args.speed_rows) if args.speed_rows else []
    for row in rows:
        print(
            f"{row['budget']:>3} B  {row['label']:<48} {row['mean']:.4f} ± {row['std']:.4f}  "
            f"{' '.join(f'{v:.4f}' for v in row['values'])}"
        )
    record = {
        **data_fields("binary_rotation_seeds", data),
        "bytes": args.bytes,
        "seeds": args.seeds,
        "faiss_seeds": [FAISS_DEFAULT_SEED + s for s in range(args.seeds)],
        "faiss_version": faiss.__version__,
        "rows": rows,
        "encode_speed": speed,
        "total_s": time.perf_counter() - start,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "load_after_speed": [round(x, 2) for x in os.getloadavg()],
        "machine": machine_info(),
    }
    write_record(
        args.out or Path(__file__).parent / "results" / f"binary_rotation_seeds_{data.name}.json", record
    )


if __name__ == "__main__":
    main()
