"""Stages past the full rank: which rotation before 2 and 3 bits per dimension, and the float query centred or not
(issue 46: the measurements behind ``StageChoice.stage_rotation_kind`` and ``StageChoice._query_shift``).

Usage::

    python benchmarks/multibit_stages.py [--data default | wordnet-examples-768] [--docs 5000]
                                         [--stages 341x3,384x2,256x2] [--rotations none:0,itq:0]
                                         [--out benchmarks/results/multibit_stages_DATA.json]

One ``svd`` fit; per stage ``RANKxBITS`` (bits 1: the rotated rows' signs) and rotation (none, random with seeds
0-2, ITQ-20, itq-tail, Hadamard) the rotation (``adaptemb.fit_rotation``) and the levels (``fit_levels``: 2 bits; ``fit_planes``: 3 bits) fitted on
the documents, each document coded by the signs of its planes (what the sign-bit quantiser keeps, sign(0) counted
as 0), and NDCG@10 over every query scored by the lifted float query: uncentred (``q @ components.T``, what a stage
past the full rank scores) and centred like the documents (``(q - mean) @ components.T``, what svd's encode gives).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

import adaptemb
from adaptemb import fit_levels, fit_planes, fit_rotation

sys.path.insert(0, str(Path(__file__).parent))
from arguments import data_set_parser
from compose_frontier import dataset, per_query_ndcg
from records import data_fields, write_record


class _Identity:
    """The query side of a 1-bit stage left unrotated."""

    @staticmethod
    def queries(y: torch.Tensor) -> torch.Tensor:
        return y


IDENTITY = _Identity()
ROTATIONS = [("none", 0), ("random", 0), ("random", 1), ("random", 2), ("itq", 0), ("itq-tail", 0), ("hadamard", 0)]
ITQ_ITERATIONS = 20


def ndcg(scores: torch.Tensor, data: Any) -> float:
    return round(float(np.nanmean(per_query_ndcg(np.argsort(-scores.numpy(), axis=1)[:, :10], data))), 4)


def stage_rows(svd: adaptemb.Compressor, data: Any, rank: int, bits: int,
               rotations: list[tuple[str, int]]) -> list[dict[str, Any]]:
    documents = torch.from_numpy(svd.encode(data.corpus, k=rank).to_dense())
    centred = torch.from_numpy(svd.encode(data.queries, k=rank).to_dense())
    shift = -torch.from_numpy(svd.encode(np.zeros((1, data.dim), dtype=np.float32), k=rank).to_dense())[0]
    rows = []
    for kind, seed in rotations:
        rotation = fit_rotation(documents, kind, seed, ITQ_ITERATIONS)
        z = documents if rotation is None else rotation.documents(documents)
        stage = fit_planes(z, rotation, None) if bits == 3 else fit_levels(z, rotation) if bits == 2 else None
        planes = torch.sign(z if stage is None else stage.documents(documents))
        if stage is None:  # 1 bit: the signs of the rotated rows, the rotated query (what a 1-bit stage scores)
            stage = rotation or IDENTITY
        rows.append({"rank": rank, "bits": bits, "bytes": rank * bits / 8, "rotation": kind, "seed": seed,
                     "ndcg_uncentred": ndcg(stage.queries(centred + shift) @ planes.T, data),
                     "ndcg_centred": ndcg(stage.queries(centred) @ planes.T, data)})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = data_set_parser(__doc__.split("\n\n")[0], bytes_default="128")
    parser.add_argument("--stages", default="341x3,384x2,256x2", help="comma-separated RANKxBITS (bits 1, 2 or 3)")
    parser.add_argument("--rotations", default=None, help="comma-separated KIND:SEED (default: every one of ROTATIONS)")
    args = parser.parse_args()
    rotations = ROTATIONS if args.rotations is None else [
        (kind, int(seed)) for kind, seed in (item.split(":") for item in args.rotations.split(","))]
    data = dataset(args.data, args.docs, 0)
    load_before = list(os.getloadavg())
    svd = adaptemb.fit(data.corpus, "svd")
    rows = []
    for stage in args.stages.split(","):
        rank, bits = (int(part) for part in stage.split("x"))
        rows += stage_rows(svd, data, rank, bits, rotations)
    from adaptemb.evaluate.machine import machine_info

    name = data.name if args.data == "default" else f"{args.data}-{args.docs}"
    write_record(args.out or Path(__file__).parent / "results" / f"multibit_stages_{args.data}.json",
                 {**data_fields("multibit_stages", data), "dataset": name, "stages": args.stages, "rows": rows,
                  "load_before": load_before, "load_after": list(os.getloadavg()), "machine": machine_info()})


if __name__ == "__main__":
    main()
