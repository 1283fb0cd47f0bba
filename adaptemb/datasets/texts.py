"""A JSONL file of texts: one ``{"text": ..., "label": ..., "_id": ...}`` object a line (``label``, ``_id``/``id`` and
``title`` optional), the text form of a corpus alone.

It is evaluated as a corpus of embeddings without queries is (format (c)): after embedding, ``min(1000, n // 10)``
seeded rows are held out as queries, each judged against its exact top-10 neighbours, and labels, when given,
give 1-NN accuracy. A document with a title is ``title + " " + text`` (BEIR's convention). Labels may be integers
or strings (numbered in sorted order; the names are kept in the dataset's metadata); ids default to the line's row
number (0-based, blank lines skipped).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from adaptemb.datasets.beir import document_text
from adaptemb.datasets.text_task import TextTask

TEXT_SUFFIXES = (".jsonl",)
ID_FIELDS = ("_id", "id")


def is_text_file(path: str | Path) -> bool:
    """True for a ``.jsonl`` file (a file of texts)."""
    return Path(path).suffix.lower() in TEXT_SUFFIXES and Path(path).is_file()


def read_texts(path: str | Path) -> TextTask:
    """Read a JSONL file of texts (see the module docstring) as a corpus-only ``TextTask``."""
    source = Path(path).expanduser()
    records = _records(source)
    if len(records) < 20:
        raise ValueError(f"{source} holds {len(records)} texts; a file of texts needs at least 20 (10% become "
                         "held-out queries, each judged against its top-10 neighbours)")
    texts = [document_text(record.get("title"), record["text"]) for record in records]
    ids = _ids(records, source)
    labels, names = _labels(records, source)
    metadata = {"format": "texts", "path": str(source)}
    if names is not None:
        metadata["label_names"] = json.dumps(names)
    return TextTask(name=source.stem, corpus_texts=texts, corpus_ids=ids, files=[source], labels=labels,
                    description=f"{len(texts):,} texts from {source.name}", metadata=metadata)


def _records(source: Path) -> list[dict[str, Any]]:
    records = []
    with open(source, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{source} line {number} is not JSON ({err.msg}); each line is one object such as "
                                 '{"text": "...", "label": "..."}') from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise TypeError(f"{source} line {number}: expected an object with a \"text\" string (\"label\", "
                                 f"\"_id\" and \"title\" optional); got {line.strip()[:80]!r}")
            records.append(record)
    return records


def _ids(records: list[dict[str, Any]], source: Path) -> list[str]:
    field = next((name for name in ID_FIELDS if name in records[0]), None)
    if field is None:
        if any(name in record for record in records for name in ID_FIELDS):
            raise ValueError(f"{source}: some lines have an id and the first has none; give every line one or none")
        return [str(row) for row in range(len(records))]
    if any(field not in record for record in records):
        raise ValueError(f"{source}: some lines lack {field!r}; give every line an id or none")
    ids = [str(record[field]) for record in records]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{source}: {field!r} repeats; each text needs its own id")
    return ids


def _labels(records: list[dict[str, Any]], source: Path) -> tuple[np.ndarray | None, list[str] | None]:
    given = ["label" in record for record in records]
    if not any(given):
        return None, None
    if not all(given):
        missing = given.index(False)
        raise ValueError(f"{source}: text {missing} has no \"label\" but others do; label every text or none")
    values = [record["label"] for record in records]
    if all(isinstance(value, int) and not isinstance(value, bool) for value in values):
        return np.array(values, dtype=np.int64), None
    if all(isinstance(value, str) for value in values):
        names = sorted(set(values))
        number = {name: index for index, name in enumerate(names)}
        return np.array([number[value] for value in values], dtype=np.int64), names
    raise ValueError(f"{source}: labels must be all integers or all strings")
