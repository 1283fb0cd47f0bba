"""``adaptemb bench --save-runs``: each table row's ranking as a TREC run file, re-evaluated by pytrec_eval.

Files go to ``OUT/runs/``: ``NAME.trec`` per row (``run_name``: ``float32``, ``csr-k10``, ``svd-k16-rerank-int8``),
with the dataset's own query and document ids (row numbers for a dataset without ids), at the bench's depth
(100: Recall@100 can be computed), written by ``adaptemb.evaluate.trec.write_run`` so that every TREC tool reads
back exactly the bench's ranking. Then ``pytrec_eval.json``: pytrec_eval's NDCG@10, Recall@100 and MRR@10 of
each file read back, beside the table's own values and their largest difference.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaptemb.datasets import Dataset
from adaptemb.evaluate.context import BenchResult
from adaptemb.evaluate.metrics import Row
from adaptemb.evaluate.trec import check_tokens, qrels_of, read_run, trec_metrics, write_run
from adaptemb.serialization import atomic_write

RUNS_FOLDER = "runs"
CHECK_FILE = "pytrec_eval.json"
AGREEMENT = 1e-6
"""The largest difference between pytrec_eval and the table that still counts as agreement."""
TABLE_KEYS = {"ndcg_cut_10": "ndcg_at_10", "recall_100": "recall_at_100", "recip_rank_10": "mrr_at_10"}
"""pytrec_eval's measure (``trec_metrics``) -> the table's column."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]+")


@dataclass
class SavedRuns:
    """What ``save_runs`` wrote: the folder, each row's run file by name, pytrec_eval's check (None without
    pytrec_eval) and the notes for the report."""

    folder: Path
    files: dict[str, Path]
    check: dict[str, dict[str, Any]] | None
    notes: list[str] = field(default_factory=list)


def run_name(row: Row) -> str:
    """A row's run name, safe as a file name and as a TREC tag: method, ``-k{k}`` for a budget, ``-{variant}`` for
    a rerank variant (``csr-k10``, ``svd+binary-k64``, ``svd-k16-rerank-int8``, ``float32``)."""
    parts = [str(row["method"])]
    if row.get("k") is not None:
        parts.append(f"k{row['k']}")
    if row.get("variant", "codes") not in ("codes", "reference"):
        parts.append(str(row["variant"]))
    return _UNSAFE.sub("-", "-".join(parts)).strip("-.") or "row"


def unique_names(rows: list[Row]) -> list[str]:
    """``run_name`` of each row, a repeated name suffixed ``-2``, ``-3``, ... so every row has its own file."""
    names: list[str] = []
    for row in rows:
        name, number = run_name(row), 2
        while name in names:
            name, number = f"{run_name(row)}-{number}", number + 1
        names.append(name)
    return names


def check_run_ids(data: Dataset) -> None:
    """Fail before a bench whose runs could not be written: every query and document id must be one token."""
    check_tokens(data.row_ids("queries"), f"dataset {data.name!r}: query id")
    check_tokens(data.row_ids("corpus"), f"dataset {data.name!r}: document id")


def save_runs(result: BenchResult, data: Dataset, out: str | Path) -> SavedRuns:
    """Write every kept ranking of ``result`` (``BenchConfig.keep_rankings``) to ``out/runs/`` and check each file
    with pytrec_eval when it is installed (see the module docstring)."""
    if not result.rankings:
        raise ValueError("the bench kept no rankings to save: run it with BenchConfig(keep_rankings=True)")
    folder = Path(out) / RUNS_FOLDER
    query_ids, doc_ids = data.row_ids("queries"), data.row_ids("corpus")
    rows = [row for row, _ in result.rankings]
    files: dict[str, Path] = {}
    saved = SavedRuns(folder, files, None)
    for name, (row, ranking) in zip(unique_names(rows), result.rankings):
        files[name] = folder / f"{name}.trec"
        raised = write_run(files[name], ranking, query_ids, doc_ids, tag=name)
        if raised:
            saved.notes.append(f"runs: {name} ranks {raised} document(s) above a better score; written in the "
                               "bench's order, each such score lowered below the one above it")
    stale = [path for path in folder.glob("*.trec") if path not in files.values()]
    for path in stale:  # an earlier run's rows: the folder holds this run's rankings only
        path.unlink()
    if stale:
        saved.notes.append(f"runs: removed {len(stale)} run file(s) of an earlier bench in {folder}")
    depth = max(ranking[1].shape[1] for _, ranking in result.rankings)
    ids = "the dataset's ids" if data.query_ids is not None else "row numbers as ids"
    where = f"{len(files)} TREC run files (depth {depth}, {ids}) in {folder}"
    try:
        saved.check = check_runs(files, rows, qrels_of(data.qrels, query_ids, doc_ids, data.judged))
    except ModuleNotFoundError as err:
        saved.notes.append(f"runs: {where}; not re-evaluated ({err})")
        return saved
    atomic_write(folder / CHECK_FILE, lambda tmp: tmp.write_text(json.dumps(saved.check, indent=2) + "\n"))
    saved.notes.append(f"runs: {where}; {agreement_text(saved.check)}")
    return saved


def check_runs(files: dict[str, Path], rows: list[Row], qrels: dict[str, dict[str, int]]) -> dict[str, dict[str, Any]]:
    """Per run file: pytrec_eval's measures of the file read back, the table's values and the largest
    difference."""
    check = {}
    for (name, path), row in zip(files.items(), rows):
        measured = trec_metrics(read_run(path), qrels)
        table = {measure: row[key] for measure, key in TABLE_KEYS.items()}
        diff = max(abs(measured[measure] - table[measure]) for measure in TABLE_KEYS)
        check[name] = {"file": path.name, "pytrec_eval": measured, "table": table, "max_abs_diff": diff}
    return check


def agreement_text(check: dict[str, dict[str, Any]]) -> str:
    """One sentence: pytrec_eval agrees with the table on every row, or on which rows it does not."""
    off = {name: entry["max_abs_diff"] for name, entry in check.items() if entry["max_abs_diff"] > AGREEMENT}
    if not off:
        return f"pytrec_eval on them agrees with the table within {AGREEMENT:g} on every row (NDCG@10, Recall@100, MRR@10)"
    listed = ", ".join(f"{name} ({diff:.2g})" for name, diff in off.items())
    return f"pytrec_eval on them differs from the table by more than {AGREEMENT:g} on {listed} (see {CHECK_FILE})"
