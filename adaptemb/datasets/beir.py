"""BEIR folders: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``, read by beir's ``GenericDataLoader``.

``corpus.jsonl`` holds one ``{"_id", "title", "text"}`` object a line, ``queries.jsonl`` one ``{"_id", "text"}``
a line, ``qrels/<split>.tsv`` a header line then ``query-id<TAB>corpus-id<TAB>score`` lines with whole-number
grades (> 0: relevant, the grade is NDCG's gain; <= 0: judged not relevant). As in BEIR: only the queries judged
in the split are kept (the others are left out, with a note), and a document's text is ``title + " " + text``,
stripped (beir's ``extract_corpus_sentences`` for sentence-transformers models); a missing title counts as "".
Every query kept has a judgement, so every one counts in the means (``Dataset.judged``): one judged only not
relevant counts 0, as pytrec_eval and BEIR count it.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from adaptemb.datasets.text_task import TextTask

CORPUS_FILE = "corpus.jsonl"
QUERIES_FILE = "queries.jsonl"
QRELS_FOLDER = "qrels"
DEFAULT_SPLIT = "test"
TITLE_SEPARATOR = " "
"""beir's ``sep`` between a document's title and text (``beir.retrieval.models.SentenceBERT``)."""


def is_beir_folder(path: str | Path) -> bool:
    """True for a folder holding ``corpus.jsonl``, ``queries.jsonl`` or a ``qrels/`` folder (BEIR's names)."""
    root = Path(path)
    return root.is_dir() and any((root / name).exists() for name in (CORPUS_FILE, QUERIES_FILE, QRELS_FOLDER))


def beir_splits(folder: str | Path) -> list[str]:
    """The splits of a BEIR folder: the ``qrels/*.tsv`` file stems, sorted."""
    qrels = Path(folder) / QRELS_FOLDER
    return sorted(path.stem for path in qrels.glob("*.tsv")) if qrels.is_dir() else []


def document_text(title: str | None, text: str | None) -> str:
    """A document's text as BEIR's sentence-transformers models see it: ``(title + " " + text).strip()``."""
    return ((title or "") + TITLE_SEPARATOR + (text or "")).strip()


def read_beir(folder: str | Path, split: str = DEFAULT_SPLIT, *, progress: bool = True) -> TextTask:
    """Read a BEIR folder's corpus, the queries judged in ``split`` and their graded judgements (module docstring)."""
    root = Path(folder).expanduser()
    qrels_file = _check_layout(root, split)
    corpus, queries, qrels = _load(root, split, qrels_file, progress)
    corpus_ids = list(corpus)
    _check_ids(root, corpus, queries, qrels, qrels_file)
    column = {doc: col for col, doc in enumerate(corpus_ids)}
    query_ids = list(queries)
    rows, cols, grades = [], [], []
    for row, qid in enumerate(query_ids):
        for doc, grade in qrels[qid].items():
            if grade > 0:
                rows.append(row), cols.append(column[doc]), grades.append(grade)
    matrix = sp.csr_matrix((np.array(grades, np.float32), (rows, cols)), shape=(len(query_ids), len(corpus_ids)))
    task = TextTask(
        name=root.name, corpus_texts=[document_text(doc.get("title"), doc.get("text")) for doc in corpus.values()],
        corpus_ids=corpus_ids, files=[root / CORPUS_FILE, root / QUERIES_FILE, qrels_file],
        query_texts=[queries[qid] for qid in query_ids], query_ids=query_ids, qrels=matrix,
        judged=np.ones(len(query_ids), dtype=bool),
        description=f"BEIR folder {root.name}, split {split}: {len(corpus_ids):,} documents, {len(query_ids):,} queries",
        metadata={"format": "beir", "split": split, "path": str(root)})
    _note_queries(task, root / QUERIES_FILE, qrels_file, matrix)
    return task


def _check_layout(root: Path, split: str) -> Path:
    """The split's qrels file; a clear error for a folder that is not a BEIR folder or lacks the split."""
    missing = [name for name in (CORPUS_FILE, QUERIES_FILE) if not (root / name).is_file()]
    if not root.is_dir() or missing:
        raise FileNotFoundError(
            f"{root} is not a BEIR folder: it lacks {', '.join(missing) or 'everything'}; a BEIR folder holds "
            f"{CORPUS_FILE}, {QUERIES_FILE} and {QRELS_FOLDER}/<split>.tsv")
    splits = beir_splits(root)
    if not splits:
        raise FileNotFoundError(
            f"BEIR folder {root} has no qrels: no {QRELS_FOLDER}/<split>.tsv file (a header line, then "
            "query-id<TAB>corpus-id<TAB>score lines); the bench needs judgements to evaluate")
    if split not in splits:
        raise FileNotFoundError(f"BEIR folder {root} has no split {split!r} ({QRELS_FOLDER}/{split}.tsv); "
                                f"its splits: {', '.join(splits)} (choose one with --split)")
    return root / QRELS_FOLDER / f"{split}.tsv"


def _load(root: Path, split: str, qrels_file: Path, progress: bool) -> tuple[dict, dict, dict]:  # type: ignore[type-arg]
    """beir's ``GenericDataLoader.load(split)``, its errors turned into clear ones (its corpus bar silenced
    unless ``progress``)."""
    try:
        from beir.datasets.data_loader import GenericDataLoader
    except ImportError:
        raise ModuleNotFoundError("reading a BEIR folder needs beir: pip install 'adaptemb[beir]'") from None
    quiet = contextlib.nullcontext() if progress else contextlib.redirect_stderr(io.StringIO())
    try:
        with quiet:
            return GenericDataLoader(data_folder=str(root)).load(split=split)  # type: ignore[no-any-return]
    except KeyError as err:
        raise ValueError(f"{qrels_file} judges query id {err.args[0]!r}, which {QUERIES_FILE} does not hold; every "
                         f"judged query needs a line {{\"_id\": ..., \"text\": ...}} in {QUERIES_FILE}") from None
    except (ValueError, IndexError, TypeError) as err:  # json.JSONDecodeError is a ValueError
        raise ValueError(
            f"cannot read BEIR folder {root} ({type(err).__name__}: {err}): {CORPUS_FILE} and {QUERIES_FILE} hold one "
            f"JSON object a line, {qrels_file.name} a header line then query-id<TAB>corpus-id<TAB>score lines with "
            "whole-number scores") from None


def _check_ids(root: Path, corpus: dict, queries: dict, qrels: dict, qrels_file: Path) -> None:  # type: ignore[type-arg]
    """Every document and query has an ``_id`` and a text, ids do not repeat, and every judged document exists."""
    for name, items in ((CORPUS_FILE, corpus), (QUERIES_FILE, queries)):
        if None in items:
            raise ValueError(f"{root / name}: a line has no \"_id\"; every line needs one")
    no_text = next((doc for doc, fields in corpus.items() if not isinstance(fields.get("text"), str)), None)
    if no_text is not None:
        raise ValueError(f"{root / CORPUS_FILE}: document {no_text!r} has no \"text\" string (\"title\" is optional)")
    no_text = next((qid for qid, text in queries.items() if not isinstance(text, str)), None)
    if no_text is not None:
        raise ValueError(f"{root / QUERIES_FILE}: query {no_text!r} has no \"text\" string")
    lines = _count_lines(root / CORPUS_FILE)
    if lines != len(corpus):
        raise ValueError(f"{root / CORPUS_FILE} holds {lines:,} documents but {len(corpus):,} distinct \"_id\"s; "
                         "each document needs its own id")
    unknown = sorted({doc for judged in qrels.values() for doc in judged} - set(corpus))
    if unknown:
        raise ValueError(f"{qrels_file} judges {len(unknown)} document id(s) that {CORPUS_FILE} does not hold: "
                         f"{', '.join(map(repr, unknown[:5]))}{' ...' if len(unknown) > 5 else ''}")


def _note_queries(task: TextTask, queries_file: Path, qrels_file: Path, matrix: sp.csr_matrix) -> None:
    left_out = _count_lines(queries_file) - len(task.query_texts or [])
    if left_out > 0:
        task.notes.append(f"dataset: {left_out:,} of the queries in {queries_file.name} have no judgement in "
                          f"{qrels_file.parent.name}/{qrels_file.name}; left out, as BEIR's loader leaves them out")
    not_relevant = int((np.diff(matrix.indptr) == 0).sum())
    if not_relevant:
        task.notes.append(f"dataset: {not_relevant:,} queries are judged only not relevant (grades <= 0); each counts 0 "
                          "in every mean, as in pytrec_eval and BEIR")


def _count_lines(path: Path) -> int:
    """Non-blank lines of a JSONL file."""
    with open(path, "rb") as handle:
        return sum(1 for line in handle if line.strip())
