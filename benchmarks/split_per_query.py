"""Move the per-query NDCG@10 lists out of bench results written before per_query.npz existed.

    python benchmarks/split_per_query.py OUT/results.json [MORE/results.json ...]

Each ``results.json`` is rewritten without its rows' ``ndcg_at_10_per_query`` lists, which go to a compressed
``per_query.npz`` beside it, as ``adaptemb bench`` writes them now (``adaptemb.evaluate.report.write_json``: float32,
``row_<i>`` / ``scale_<i>``). Every other value is kept as it was. A file without such lists is left alone. Old
records carry no query ids (only datasets with ids give them, and those came later).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from adaptemb.evaluate.report import PER_QUERY_FILE, split_per_query, write_per_query
from adaptemb.serialization import atomic_write


def split(path: Path) -> int:
    """Rewrite ``path`` without per-query lists and write them beside it; return how many arrays were moved."""
    data = json.loads(path.read_text())
    arrays = split_per_query(data)
    if arrays:
        write_per_query(arrays, path.with_name(PER_QUERY_FILE))
        text = json.dumps(data, indent=2, default=str) + "\n"
        atomic_write(path, lambda tmp: tmp.write_text(text))
    return len(arrays)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="+", help="results.json files written by adaptemb bench")
    for path in parser.parse_args().results:
        moved = split(path)
        print(f"{path}: {moved} per-query arrays -> {path.with_name(PER_QUERY_FILE)}" if moved else f"{path}: none")


if __name__ == "__main__":
    main()
