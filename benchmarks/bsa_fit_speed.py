"""CPU seconds of bsa's default fit at one torch thread: this checkout against a baseline checkout, runs alternating.

Usage::

    git archive <commit> adaptemb plugins | tar -x -C /tmp/base     # the baseline's code
    python benchmarks/bsa_fit_speed.py --baseline /tmp/base [--data default,768] [--repeats 2] [--epochs N]

Each run is a fresh process (the baseline's with ``--baseline`` first on ``PYTHONPATH``, its ``plugins/`` as
``adaptemb_plugins``) that fits bsa with its defaults and ``seed=0`` at ``adaptemb.set_threads(1)`` (as one of the
bench's fit workers does) and measures the fit's process CPU seconds (user + system; and the main thread's alone)
and wall seconds; torch's optimiser module (``torch._dynamo``, imported by the first optimiser step of a process,
~2 CPU-s) is imported before the clock starts. Runs alternate baseline / current so that a shared host's drift
hits both alike.

Data:

* ``default``: the built-in default data's corpus, 8,000 x 384 (all-MiniLM-L6-v2), what ``adaptemb bench`` fits on;
* ``768``: the first 5,000 rows of a seed-0 permutation of the 768-d stand-in's ``wordnet-examples-768`` corpus
  (``standin768.py``; cached, never built here).

The record (appended to ``<out>/bsa_fit_speed.json``) holds every run (CPU and wall seconds, epochs, steps, batch,
the fit report's held-out reconstruction distance and active count), the median CPU seconds per variant and data
and their ratio, the load average and the host's one-thread matmul GFLOP/s (``main_job_time.host_speed``) before
and after, the machine, the commits and ``--note``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from main_job_time import git_commit, host_speed  # sibling benchmark modules (benchmarks/ is on sys.path)
from records import append_record

REPORT_FIELDS = ("epochs", "steps", "batch_size", "stopped_early", "reconstruction_cosine_distance", "active_mean",
                 "dead_fraction")


def load_rows(data: str) -> Any:
    import numpy as np

    if data == "default":
        from adaptemb.datasets.builtin import load_builtin

        return np.ascontiguousarray(load_builtin("default").corpus, dtype=np.float32)
    if data == "768":
        from standin768 import wordnet_examples_768

        corpus = wordnet_examples_768().corpus
        return np.ascontiguousarray(corpus[np.random.default_rng(0).permutation(len(corpus))[:5000]], dtype=np.float32)
    raise SystemExit(f"unknown --data {data!r}; valid: default, 768")


def child(data: str, epochs: int | None) -> None:
    """One fit in this process; prints its measurements as one JSON line."""
    import resource
    import time

    import torch._dynamo  # noqa: F401 (the optimiser's one-off import, kept out of the clock)

    import adaptemb

    adaptemb.set_threads(1)  # a fixed count: adaptemb's automatic choice takes a second core when it looks free
    rows = load_rows(data)
    params: dict[str, Any] = {"seed": 0, "progress": False, **({"epochs": epochs} if epochs else {})}
    before, started, thread = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), time.thread_time()
    compressor = adaptemb.fit(rows, method="bsa", **params)
    wall, thread = time.perf_counter() - started, time.thread_time() - thread
    after, report = resource.getrusage(resource.RUSAGE_SELF), compressor.fit_report
    print(json.dumps({"cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
                      "main_thread_cpu_s": round(thread, 2), "wall_s": round(wall, 2),
                      "threads": report["threads"], "precision": report["precision"],
                      "adaptemb": str(Path(adaptemb.__file__).parent),
                      **{name: report[name] for name in REPORT_FIELDS}}))


def run_variant(variant: str, baseline: Path | None, data: str, epochs: int | None) -> dict[str, Any]:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as links:
        if baseline is not None:
            (Path(links) / "adaptemb_plugins").symlink_to(baseline.resolve() / "plugins")
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(baseline.resolve()), links, env.get("PYTHONPATH")]))
        command = [sys.executable, __file__, "--child", data] + (["--epochs", str(epochs)] if epochs else [])
        load = os.getloadavg()[0]
        done = subprocess.run(command, env=env, cwd=links, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{variant} run on {data} failed:\n{done.stderr[-3000:]}")
    return {"variant": variant, "data": data, "load_1min_before": round(load, 2),
            **json.loads(done.stdout.strip().splitlines()[-1])}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median CPU seconds per data and variant, and current / baseline."""
    out: dict[str, Any] = {}
    for data in dict.fromkeys(run["data"] for run in runs):
        medians = {variant: statistics.median(r["cpu_s"] for r in runs if r["data"] == data and r["variant"] == variant)
                   for variant in dict.fromkeys(r["variant"] for r in runs if r["data"] == data)}
        out[data] = {"median_cpu_s": medians}
        if len(medians) == 2:
            out[data]["current_over_baseline"] = round(medians["current"] / medians["baseline"], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, help="a folder with the baseline's adaptemb/ and plugins/")
    parser.add_argument("--data", default="default", help="comma-separated: default, 768")
    parser.add_argument("--repeats", type=int, default=2, help="runs per variant and data")
    parser.add_argument("--epochs", type=int, help="epochs (default: bsa's schedule)")
    parser.add_argument("--baseline-commit", default="", help="the commit the baseline folder was taken from")
    parser.add_argument("--note", default="", help="what the current checkout changed, for the record")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.epochs)
        return
    from adaptemb.evaluate.machine import machine_info

    variants = [("baseline", args.baseline), ("current", None)] if args.baseline else [("current", None)]
    load_before, speed_before = list(os.getloadavg()), host_speed()
    runs = [run_variant(name, path, data, args.epochs)
            for _ in range(args.repeats) for data in args.data.split(",") for name, path in variants]
    record = {"benchmark": "bsa_fit_speed", "epochs": args.epochs or "schedule", "note": args.note,
              "commit": git_commit(), "baseline_commit": args.baseline_commit or None, "runs": runs,
              "summary": summary(runs),
              "load_before": load_before, "load_after": list(os.getloadavg()),
              "host_gflops_1thread": {"before": speed_before, "after": host_speed()}, "machine": machine_info()}
    append_record(args.out / "bsa_fit_speed.json", record)


if __name__ == "__main__":
    main()
