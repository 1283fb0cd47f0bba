"""svd+binary's fit cost at the default bench's budgets (16, 32, 64 B) on the built-in data, in process CPU seconds.

Usage::

    python benchmarks/fit_cost.py LABEL   # prints one JSON line: LABEL, the load and a row per fit

Fits ``adaptemb.fit(corpus, "svd+binary", byte_budgets=[16, 32, 64])`` without and (where the dataset has them) with
``queries=`` its 500 ``dev_queries`` in this process, and reports process CPU and wall seconds and what each fit
chose. Run it once per checkout (``PYTHONPATH=...``) to compare code; the machine is shared, so compare CPU seconds.
The record ``results/fit_cost_choices.json`` holds a run on commit 1e1a03e (main before issue 46) and one after.
"""

from __future__ import annotations

import json
import os
import sys
import time

import adaptemb
from adaptemb.datasets import load_dataset


def main() -> None:
    data = load_dataset("default")
    rows = []
    for with_queries in (False, True):
        sample = getattr(data, "dev_queries", None)
        if with_queries and sample is None:
            continue
        extra = {"queries": sample} if with_queries else {}
        cpu, wall = time.process_time(), time.perf_counter()
        fitted = adaptemb.fit(data.corpus, "svd+binary", byte_budgets=[16, 32, 64], **extra)
        rows.append({"method": "svd+binary", "queries": with_queries, "cpu_s": round(time.process_time() - cpu, 2),
                     "wall_s": round(time.perf_counter() - wall, 2), "ranks": fitted.fit_report["ranks"],
                     "rotations": fitted.fit_report["rotations"], "bits": fitted.fit_report["bits_per_dim"]})
    print(json.dumps({"code": sys.argv[1] if len(sys.argv) > 1 else "", "load": os.getloadavg(), "rows": rows}))


if __name__ == "__main__":
    main()
