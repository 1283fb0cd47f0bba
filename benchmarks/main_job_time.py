"""The README's main job, timed: ``adaptemb bench --out DIR`` (the first command's bench part) with each step's time.

Usage::

    python benchmarks/main_job_time.py [--out /tmp/main-job] [--baseline OLD/results.json] [--limit 120]
                                       [--record benchmarks/results/main_job_time.json]

Runs the command as a user would (a fresh process: start-up, imports and the report's plots included) and records
the wall time, the CPU seconds of the job (user + system: a measure that a busy machine inflates far less than
the wall time), the bench's own total, the time of every step the bench reports (``results.json`` ``steps``: the
reference row, each fit, each row, the recommendation), the peak memory, the load average before, during (sampled
every 5 s) and after, the host's one-thread matmul speed before and after (``host_gflops_1thread``: the same
load average hides a 20-30 % slower shared host), the machine and the commit. With ``--baseline`` (an earlier
run's ``results.json``) it also records each row's NDCG@10 beside the baseline's and the largest difference.

The main job's bar is a standing one: at most ``--limit`` seconds (120) at load <= 2 on 2 cores. A run slower than
that exits with status 1 (a regression, like a failing test); a run whose load passed 2 says its time is not a
valid measurement and exits 0 (measure again on a quieter machine).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from records import append_record  # sibling benchmark module (benchmarks/ is on sys.path)

from adaptemb.evaluate.machine import machine_info

VALID_LOAD = 2.0
"""The bar is measured at a load average of at most this (2 cores) before the job starts; the job's own two threads
then add about 2 while it runs (``load_during`` records it)."""
VALID_LOAD_DURING = 4.5
"""... and at most this while it runs (its own two threads and start-up included): other work that starts during the
run makes its time invalid as well."""


class LoadSampler:
    """The 1-minute load average every ``interval`` seconds while a job runs (a daemon thread)."""

    def __init__(self, interval: float = 5.0) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)

    def __enter__(self) -> LoadSampler:  # noqa: PYI034 (typing.Self is 3.11+; 3.10 is supported)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.samples.append(round(os.getloadavg()[0], 2))


def run_main_job(out: Path) -> dict[str, Any]:
    """Run ``adaptemb bench --out OUT`` in a fresh process; its wall seconds, peak memory and the load around it."""
    command = ["adaptemb", "bench", "--out", str(out)]
    load_before = list(os.getloadavg())
    started = time.perf_counter()
    with LoadSampler() as sampler:
        finished = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if finished.returncode:
        raise SystemExit(f"the main job failed ({finished.returncode}):\n{finished.stderr[-3000:]}")
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"command": " ".join(command), "wall_s": round(wall, 2), "max_rss_mb": round(children.ru_maxrss / 1024, 1),
            "cpu_s": round(children.ru_utime + children.ru_stime, 1),
            "load_before": load_before, "load_during": sampler.samples, "load_after": list(os.getloadavg()),
            "terminal_output": finished.stdout}


def host_speed(seconds: float = 2.0) -> float:
    """One thread's float32 matmul throughput (GFLOP/s) over about ``seconds``: a reference that shows a slow or busy
    host (shared VM hosts here vary by 20-30 % from hour to hour at the same load average)."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    a = np.random.default_rng(0).standard_normal((512, 512), dtype=np.float32)
    with threadpool_limits(1):
        rounds, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            a @ a
            rounds += 1
        elapsed = time.perf_counter() - started
    return round(2 * 512**3 * rounds / elapsed / 1e9, 1)


def step_times(results: dict[str, Any]) -> dict[str, Any]:
    """The bench's total, its steps (label: seconds) and the fit seconds per method, from its ``results.json``."""
    fits: dict[str, float] = {}
    fits_cpu: dict[str, float] = {}
    for step in results.get("steps", []):
        if step["kind"] == "fit":
            fits[step["method"]] = round(fits.get(step["method"], 0.0) + step["seconds"], 2)
            fits_cpu[step["method"]] = round(fits_cpu.get(step["method"], 0.0) + step.get("cpu_seconds", 0.0), 2)
    return {"bench_total_s": round(results["total_s"], 2), "fit_s": dict(sorted(fits.items(), key=lambda kv: -kv[1])),
            "fit_cpu_s": dict(sorted(fits_cpu.items(), key=lambda kv: -kv[1])),
            "steps": [{"label": step["label"], "kind": step["kind"], "seconds": round(step["seconds"], 3),
                       "cpu_seconds": round(step.get("cpu_seconds", 0.0), 3)} for step in results.get("steps", [])]}


def compare_rows(results: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """Each codes row's NDCG@10 beside the baseline row of the same method and bytes budget slot (the row order of
    a method), and the largest drop."""
    def by_method(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        grouped: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            grouped.setdefault(row["method"], []).append(row)
        return grouped

    now, then = by_method(results["rows"]), by_method(baseline["rows"])
    pairs = []
    for method, rows in now.items():
        for new, old in zip(rows, then.get(method, [])):
            pairs.append({"method": method, "k": new["k"], "bytes": new["bytes_per_vector"],
                          "ndcg_at_10": round(new["ndcg_at_10"], 4), "baseline_k": old["k"],
                          "baseline_ndcg_at_10": round(old["ndcg_at_10"], 4),
                          "difference": round(new["ndcg_at_10"] - old["ndcg_at_10"], 4)})
    missing = sorted(set(then) - set(now))
    worst = min(pairs, key=lambda pair: pair["difference"]) if pairs else None
    return {"rows": pairs, "largest_drop": worst, "methods_missing": missing}


def git_commit() -> str:
    """HEAD's short hash, with ``+changes`` when the working tree differs from it."""
    root = Path(__file__).resolve().parent.parent
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                           text=True, check=True).stdout.strip()
    return f"{head}+changes" if dirty else head


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/adaptemb-main-job"), help="the bench's output folder")
    parser.add_argument("--baseline", type=Path, help="an earlier run's results.json to compare each row with")
    parser.add_argument("--limit", type=float, default=120.0, help="the bar in seconds (wall clock)")
    parser.add_argument("--record", type=Path, default=Path(__file__).parent / "results" / "main_job_time.json")
    args = parser.parse_args()
    speed_before = host_speed()
    run = run_main_job(args.out)
    run["host_gflops_1thread"] = [speed_before, host_speed()]
    results = json.loads((args.out / "results.json").read_text())
    record = {"benchmark": "main_job_time", "date": time.strftime("%Y-%m-%d %H:%M"), "commit": git_commit(),
              **{k: v for k, v in run.items() if k != "terminal_output"}, **step_times(results), "limit_s": args.limit}
    if args.baseline:
        record["compared_with"] = {"baseline": str(args.baseline),
                                   **compare_rows(results, json.loads(args.baseline.read_text()))}
    load = run["load_before"][0]
    record["valid"] = load <= VALID_LOAD and max(run["load_during"], default=load) <= VALID_LOAD_DURING
    record["machine"] = machine_info()
    append_record(args.record, record)
    if not record["valid"]:
        print(f"the load was {load:.2f} before the run and up to {max(run['load_during'], default=load):.2f} during it "
              f"(valid: <= {VALID_LOAD} before, <= {VALID_LOAD_DURING} during): its time is not a valid measurement")
        return 0
    if run["wall_s"] > args.limit:
        print(f"REGRESSION: the main job took {run['wall_s']:.1f} s, over the {args.limit:.0f} s bar")
        return 1
    print(f"the main job took {run['wall_s']:.1f} s (bar {args.limit:.0f} s), load {load:.2f} before it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
