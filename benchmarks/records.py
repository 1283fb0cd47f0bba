"""Writing benchmark records: appended to a JSON list file, or one record to its own file; atomically (shared by the
benchmark scripts)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from adaptemb.evaluate.machine import machine_info
from adaptemb.serialization import atomic_write


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append ``record`` to the JSON list in ``path`` (created with its folder), printing it without the machine."""
    print(json.dumps({key: value for key, value in record.items() if key != "machine"}), flush=True)
    records = json.loads(path.read_text()) if path.is_file() else []
    records.append(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(records, indent=1) + "\n"))


def data_fields(benchmark: str, data: Any) -> dict[str, Any]:
    """The fields every record on one data set starts with: the benchmark's name and the data's name and shape."""
    return {"benchmark": benchmark, "dataset": data.name, "docs": len(data.corpus), "queries": len(data.queries),
            "dim": data.dim}


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Write ``record`` as the JSON file ``path`` (created with its folder) and say where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(record, indent=2) + "\n"))
    print(f"wrote {path}")


def write_sweep_record(benchmark: str, data: Any, args: argparse.Namespace, rows: list[dict[str, Any]],
                       summary: dict[str, Any], load_before: list[float], **extra: Any) -> None:
    """A seed sweep's record (``args``: ``--data``, ``--docs``, ``--method``, ``--bytes``, ``--seeds``, ``--out``), with
    the load before and after and the machine, to ``--out`` or ``results/{benchmark}_{data}[_{method}].json``
    (no method suffix for svd+binary)."""
    name = data.name if args.data == "default" else f"{args.data}-{args.docs}"
    record = {**data_fields(benchmark, data), "dataset": name, "method": args.method, "bytes": args.bytes,
              "seeds": args.seeds, **extra, "rows": rows, "summary": summary, "load_before": load_before,
              "load_after": list(os.getloadavg()), "machine": machine_info()}
    suffix = "" if args.method == "svd+binary" else f"_{args.method.replace('+', '_')}"
    write_record(args.out or Path(__file__).parent / "results" / f"{benchmark}_{args.data}{suffix}.json", record)
