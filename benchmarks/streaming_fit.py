"""Fitting from a stream at scale: peak memory and rows/s of ``adaptemb fit --stream`` on a parquet file.

Usage::

    python benchmarks/streaming_fit.py [--rows 1000000] [--method csr] [-p epochs=1 ...] [--engine local|ray]
                                       [--work /tmp/adaptemb-stream] [--out benchmarks/results]

Input: the parquet file ``streaming_encode.py`` writes (``rows`` float32 rows of the 768-d real-text stand-in:
the 40,000 WordNet definitions, then noise-perturbed copies; built here when missing). The fit runs in a child
process (``adaptemb fit --stream``, the command a user runs); peak memory is sampled every 0.2 s over the process
tree as RSS and PSS (see ``streaming_encode.py``). The fitted compressor is then scored on the 768-d
``wordnet-examples`` task (example sentence -> its definition; ``standin768.py``'s cache) beside the same method
fitted in memory, with its defaults, on 5,000 of the definitions (the setting of the other benchmarks), so the
record shows what reading every row bought. A record (rows/s, peak memory, both NDCG@10, machine and load) is appended to
``<out>/streaming_fit.json``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from records import append_record
from standin768 import wordnet_examples_768
from streaming_encode import run_sampled, stream_arguments, stream_source

import adaptemb
from adaptemb.evaluate.machine import machine_info
from adaptemb.evaluate.metrics import ndcg_at_k


def examples_ndcg(compressor: adaptemb.Compressor, k: int | None) -> float:
    data = wordnet_examples_768()
    ids = compressor.index(compressor.encode(data.corpus, k=k)).search(data.queries, 10)[1]
    return float(np.mean(ndcg_at_k(ids, data.qrels, 10)))


def main() -> None:
    parser = stream_arguments(__doc__)
    parser.add_argument("-p", "--param", action="append", default=[], help="NAME=VALUE, as adaptemb fit -p")
    args = parser.parse_args()

    base, source = stream_source(args)
    model = args.work / f"{args.method}-stream-fit.safetensors"
    params = [item for p in args.param for item in ("-p", p)]
    command = [sys.executable, "-m", "adaptemb", "fit", "-m", args.method, "-i", str(source), "-o", str(model),
               "--stream", "--engine", args.engine, *params]
    load_before = os.getloadavg()
    seconds, peak_rss, peak_pss = run_sampled(command, stdout=subprocess.DEVNULL)
    load_after = os.getloadavg()

    streamed = adaptemb.load(model)
    fit_rows = base[np.random.default_rng(0).choice(len(base), 5_000, replace=False)]
    in_memory = adaptemb.fit(fit_rows, args.method, progress=False)  # the method's defaults
    append_record(args.out / "streaming_fit.json", {
        "engine": args.engine, "method": args.method, "params": args.param, "rows": args.rows, "dim": int(base.shape[1]),
        "input_bytes": source.stat().st_size, "seconds": round(seconds, 1), "rows_per_second": round(args.rows / seconds),
        "peak_tree_rss_bytes": peak_rss, "peak_tree_pss_bytes": peak_pss,
        "ndcg_at_10_examples_768": {"stream_fit_every_row": round(examples_ndcg(streamed, args.k), 4),
                                    "in_memory_fit_5000_definitions_defaults": round(examples_ndcg(in_memory, args.k), 4),
                                    "k": args.k},
        "load_before": load_before, "load_after": load_after, "machine": machine_info(),
    })


if __name__ == "__main__":
    main()
