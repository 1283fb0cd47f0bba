"""Writing benchmark records: appended to a JSON list file, or one record to its own file; atomically (shared by the
benchmark scripts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
