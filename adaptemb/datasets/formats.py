"""Reading and writing evaluation datasets: one file (a), a folder of parts (b) or a corpus alone (c).

Array names (the same in an ``.npz``/``.safetensors`` file and as file stems in a folder):

=================  =========  ===================================================================
name               shape      meaning
=================  =========  ===================================================================
``corpus``         (n, d)     corpus embeddings, float (required)
``queries``        (q, d)     query embeddings, float (absent: format (c), see ``holdout_split``)
``gold``           (q,)       the one relevant corpus row of each query, integer
``qrels_query``    (m,)       BEIR-style qrels: query of each judgement (row number, or an id of
``qrels_corpus``   (m,)       ``query_ids``), its corpus row (or id of ``corpus_ids``) and its
``qrels_grade``    (m,)       grade (optional, default 1; grades <= 0 mean not relevant, dropped)
``qrels``          (m, 2|3)   the same three columns in one array (numeric, str, or structured)
``query_ids``      (q,)       ids of the query rows (int or str), used to resolve ``qrels_query``
``corpus_ids``     (n,)       ids of the corpus rows (int or str), used to resolve ``qrels_corpus``
``labels``         (n,)       integer class of each corpus row (optional)
``query_labels``   (q,)       integer class of each query (optional)
``dev_queries``    (m, d)     unlabelled real queries apart from ``queries``, never evaluated: the sample
                              the bench's fits judge their choices by (optional)
=================  =========  ===================================================================

A folder holds ``corpus.npy|.parquet|.safetensors|.fvecs``, ``queries`` likewise, and
``gold.npy`` or ``qrels.tsv`` (BEIR: a header line, then ``query-id<TAB>corpus-id<TAB>score``),
plus any other name above as ``NAME.npy`` (ids also as ``NAME.txt``, one per line, or an
``id``/``_id`` column of the parquet file). Embeddings are returned as float32. Every file is read by
:mod:`adaptemb.io` (bfloat16 safetensors included), the readers ``load_embeddings`` and streaming use.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from adaptemb.data import load_embeddings
from adaptemb.datasets.base import Dataset
from adaptemb.errors import CorruptFileError
from adaptemb.io import SINGLE_ARRAY_SUFFIXES, open_rows, read_arrays
from adaptemb.ranking import exact_top_k
from adaptemb.serialization import atomic_write

DATASET_FORMAT = "adaptemb.dataset"
HEADER_KEY = "__adaptemb__"
EMBEDDING_NAMES = ("corpus", "queries")
QRELS_NAMES = ("qrels_query", "qrels_corpus", "qrels_grade")
ID_NAMES = ("query_ids", "corpus_ids")
LABEL_NAMES = ("labels", "query_labels")
ARRAY_NAMES = (*EMBEDDING_NAMES, "gold", *QRELS_NAMES, "qrels", *ID_NAMES, *LABEL_NAMES, "dev_queries")
FILE_SUFFIXES = (".npz", ".safetensors", ".npy", ".parquet", ".fvecs", ".bvecs", ".ivecs")
EMBEDDING_SUFFIXES = (".npy", ".parquet", ".safetensors", ".fvecs", ".bvecs", ".ivecs")
"""Suffixes of a folder's ``corpus`` / ``queries`` file."""
HOLDOUT_MAX_QUERIES = 1000
HOLDOUT_FRACTION = 0.1
HOLDOUT_NEIGHBOURS = 10
_PARQUET_ID_COLUMNS = {
    "corpus": ("id", "_id", "corpus-id", "corpus_id"),
    "queries": ("id", "_id", "query-id", "query_id"),
}


def read_dataset(path: str | Path, *, name: str | None = None, seed: int = 0) -> Dataset:
    """Read a dataset file or folder (``adaptemb.datasets.load_dataset`` also takes built-in names).

    ``seed`` picks the held-out queries of a corpus-only source (format (c)).
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"no dataset file or folder {str(path)!r}")
    arrays, header = read_folder(path) if path.is_dir() else read_file(path)
    title = name or header.get("name") or (path.stem if path.is_file() else path.name)
    dataset = dataset_from_arrays(arrays, name=title, seed=seed)
    dataset.description = str(header.get("description", dataset.description))
    dataset.metadata = {**dataset.metadata, **header.get("metadata", {}), "path": str(path)}
    return dataset


def save_dataset(dataset: Dataset, path: str | Path) -> Path:
    """Write ``dataset`` as one format (a) file (``.npz`` or ``.safetensors``), atomically.

    Relevance is stored as ``gold`` when every query has exactly one relevant row of grade 1,
    else as ``qrels_query``/``qrels_corpus``/``qrels_grade`` row numbers. Embedding dtypes are kept.
    """
    target = Path(path).expanduser()
    if target.suffix.lower() not in (".npz", ".safetensors"):
        raise ValueError(f"save_dataset writes .npz or .safetensors files; got {target.name!r}")
    arrays = dataset_arrays(dataset)
    header = {
        "format": DATASET_FORMAT,
        "format_version": "1",
        "name": dataset.name,
        "description": dataset.description,
        "metadata": dict(dataset.metadata),
    }
    if target.suffix.lower() == ".npz":
        arrays[HEADER_KEY] = np.array(json.dumps(header))
        atomic_write(target, lambda tmp: _write_npz(tmp, arrays))
    else:
        atomic_write(target, lambda tmp: _write_safetensors(tmp, arrays, header))
    return target


def dataset_arrays(dataset: Dataset) -> dict[str, np.ndarray]:
    """The format (a) arrays of ``dataset`` (row-number relevance, no ids)."""
    arrays: dict[str, np.ndarray] = {
        "corpus": np.ascontiguousarray(dataset.corpus),
        "queries": np.ascontiguousarray(dataset.queries),
    }
    qrels = dataset.qrels.tocsr(copy=True)
    qrels.eliminate_zeros()
    qrels.sort_indices()
    if np.all(np.diff(qrels.indptr) == 1) and np.all(qrels.data == 1):
        arrays["gold"] = qrels.indices.astype(np.int64)
    else:
        coo = qrels.tocoo()
        arrays.update(
            qrels_query=coo.row.astype(np.int64),
            qrels_corpus=coo.col.astype(np.int64),
            qrels_grade=coo.data.astype(np.float32),
        )
    for key in LABEL_NAMES:
        if getattr(dataset, key) is not None:
            arrays[key] = np.ascontiguousarray(getattr(dataset, key)).astype(np.int64)
    if dataset.dev_queries is not None:
        arrays["dev_queries"] = np.ascontiguousarray(dataset.dev_queries)
    return arrays


def read_file(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The named arrays and the adaptemb header (``{}`` when absent) of one dataset file."""
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return _read_npz(path)
    if suffix == ".safetensors":
        return _read_safetensors(path)
    if suffix in (*SINGLE_ARRAY_SUFFIXES, ".parquet"):
        return {"corpus": load_embeddings(path)}, {}
    raise ValueError(
        f"cannot read {path.name}: a dataset file is one of {', '.join(FILE_SUFFIXES)}, or a folder"
    )


def read_folder(folder: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The named arrays of a format (b) folder (see the module docstring for the file names)."""
    arrays: dict[str, np.ndarray] = {}
    for part in EMBEDDING_NAMES:
        found = [folder / f"{part}{suffix}" for suffix in EMBEDDING_SUFFIXES]
        found = [file for file in found if file.is_file()]
        if len(found) > 1:
            raise ValueError(
                f"{folder} holds {len(found)} {part} files ({', '.join(f.name for f in found)}); keep one"
            )
        if found:
            arrays[part] = load_embeddings(found[0])
            if found[0].suffix == ".parquet":
                arrays.update(_parquet_ids(found[0], part))
    for part in ("gold", *QRELS_NAMES, "qrels", *ID_NAMES, *LABEL_NAMES):
        if (folder / f"{part}.npy").is_file():
            arrays[part] = open_rows(folder / f"{part}.npy").read_all()
    for part in ID_NAMES:
        if (folder / f"{part}.txt").is_file():
            arrays[part] = np.array((folder / f"{part}.txt").read_text(encoding="utf-8").splitlines())
    if (folder / "qrels.tsv").is_file():
        arrays.update(read_qrels_tsv(folder / "qrels.tsv"))
    if "corpus" not in arrays:
        raise ValueError(
            f"{folder} holds no corpus.npy, corpus.parquet, corpus.safetensors or corpus.fvecs; a dataset folder "
            "needs one"
        )
    return arrays, {}


def read_qrels_tsv(path: Path) -> dict[str, np.ndarray]:
    """BEIR qrels: a header line, then ``query-id<TAB>corpus-id<TAB>score`` lines (ids kept as strings)."""
    lines = [line.rstrip("\r\n") for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    queries, docs, grades = [], [], []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != 3:
            raise ValueError(
                f"{path.name} line {number}: expected 3 tab-separated fields "
                f"(query-id, corpus-id, score), got {len(fields)}: {line[:80]!r}"
            )
        try:
            grades.append(float(fields[2]))
        except ValueError:
            raise ValueError(f"{path.name} line {number}: score {fields[2]!r} is not a number") from None
        queries.append(fields[0].strip())
        docs.append(fields[1].strip())
    if not queries:
        raise ValueError(f"{path.name} has no qrels lines after its header (query-id, corpus-id, score)")
    return {
        "qrels_query": np.array(queries),
        "qrels_corpus": np.array(docs),
        "qrels_grade": np.array(grades, dtype=np.float32),
    }


def dataset_from_arrays(arrays: Mapping[str, np.ndarray], *, name: str, seed: int = 0) -> Dataset:
    """Validate named arrays (see the module docstring) and build the Dataset they describe."""
    ignored = sorted(set(arrays) - set(ARRAY_NAMES))
    if ignored:
        warnings.warn(
            f"dataset {name!r}: ignoring array(s) {', '.join(ignored)} (not dataset arrays; the valid names are "
            f"{', '.join(ARRAY_NAMES)})", UserWarning, stacklevel=2,
        )
        arrays = {key: value for key, value in arrays.items() if key in ARRAY_NAMES}
    if "corpus" not in arrays:
        raise ValueError(
            f"dataset {name!r}: missing array 'corpus' (n, d); it has: {', '.join(arrays) or 'nothing'}"
        )
    corpus = as_embeddings(arrays["corpus"], "corpus")
    labels = _labels(arrays.get("labels"), len(corpus), "labels")
    if "queries" not in arrays:
        extra = sorted(set(arrays) - {"corpus", "labels", "corpus_ids"})
        if extra:
            raise ValueError(f"dataset {name!r}: {', '.join(extra)} given without 'queries' (q, d)")
        return holdout_dataset(corpus, name=name, labels=labels, seed=seed, ids=arrays.get("corpus_ids"))
    queries = as_embeddings(arrays["queries"], "queries", dim=corpus.shape[1])
    try:
        qrels = _relevance(arrays, len(queries), len(corpus))
    except ValueError as err:
        if not ignored:
            raise
        raise ValueError(f"{err} (ignored unknown array(s): {', '.join(ignored)})") from None
    query_labels = _labels(arrays.get("query_labels"), len(queries), "query_labels")
    metadata = {"ignored_arrays": ", ".join(ignored)} if ignored else {}
    dev = arrays.get("dev_queries")
    return Dataset(name, corpus, queries, qrels, labels=labels, query_labels=query_labels, metadata=metadata,
                   query_ids=arrays.get("query_ids"), corpus_ids=arrays.get("corpus_ids"),
                   dev_queries=None if dev is None else as_embeddings(dev, "dev_queries", dim=corpus.shape[1]))


def as_embeddings(array: np.ndarray, what: str, dim: int | None = None) -> np.ndarray:
    """Check a float (rows, d) embedding array and return it as float32."""
    if array.dtype.kind != "f":
        raise TypeError(
            f"{what} must hold floats (float16/32/64); got dtype {array.dtype}. "
            "Integer codes are not embeddings: convert them with .astype(np.float32) if they are"
        )
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{what} must be a non-empty 2-D array (rows, d); got shape {array.shape}")
    if dim is not None and array.shape[1] != dim:
        raise ValueError(
            f"{what} have dimension {array.shape[1]} but corpus has dimension {dim}; they must match"
        )
    out = np.ascontiguousarray(array, dtype=np.float32)
    bad = ~np.isfinite(out).all(axis=1)
    if bad.any():
        raise ValueError(
            f"{what} contain NaN or infinite values in {int(bad.sum())} rows (first: row "
            f"{int(np.argmax(bad))}); all values must be finite"
        )
    return out


def holdout_split(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Format (c)'s split: ``min(1000, n // 10)`` seeded random rows become queries, the rest the corpus.

    Returns (query rows, corpus rows), each sorted.
    """
    n_queries = min(HOLDOUT_MAX_QUERIES, int(n * HOLDOUT_FRACTION))
    if n_queries < 1 or n - n_queries < HOLDOUT_NEIGHBOURS:
        raise ValueError(
            f"a corpus-only dataset needs at least 20 rows (10% become queries, each judged against "
            f"its top-{HOLDOUT_NEIGHBOURS}); got {n}"
        )
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[:n_queries]), np.sort(order[n_queries:])


def holdout_dataset(
    corpus: np.ndarray, *, name: str, labels: np.ndarray | None = None, seed: int = 0, ids: np.ndarray | None = None
) -> Dataset:
    """Format (c): held-out rows become queries; relevant = their exact top-10 inner-product neighbours (``ids``:
    the rows' ids, split alongside)."""
    query_rows, corpus_rows = holdout_split(len(corpus), seed)
    queries, rest = corpus[query_rows], corpus[corpus_rows]
    top = exact_top_k(queries, rest, HOLDOUT_NEIGHBOURS)
    qrels = sp.csr_matrix(
        (np.ones(top.size, np.float32), (np.repeat(np.arange(len(queries)), top.shape[1]), top.ravel())),
        shape=(len(queries), len(rest)),
    )
    return Dataset(
        name,
        rest,
        queries,
        qrels,
        labels=None if labels is None else labels[corpus_rows],
        query_labels=None if labels is None else labels[query_rows],
        query_ids=None if ids is None else np.asarray(ids)[query_rows],
        corpus_ids=None if ids is None else np.asarray(ids)[corpus_rows],
        description=f"corpus only: {len(queries)} held-out rows (seed {seed}) judged against their exact "
        f"top-{HOLDOUT_NEIGHBOURS} inner-product neighbours",
        metadata={"relevance": f"exact top-{HOLDOUT_NEIGHBOURS} inner product", "holdout_seed": str(seed)},
    )


def _relevance(arrays: Mapping[str, np.ndarray], n_queries: int, n_corpus: int) -> sp.csr_matrix:
    has_gold = "gold" in arrays
    has_qrels = any(key in arrays for key in ("qrels", *QRELS_NAMES))
    if has_gold == has_qrels:
        raise ValueError(
            "give exactly one kind of relevance: 'gold' (q,) or qrels "
            f"('qrels_query', 'qrels_corpus'[, 'qrels_grade'] or 'qrels' (m, 3)); "
            f"got {'both' if has_gold else 'neither'}"
        )
    if has_gold:
        gold = _integers(arrays["gold"], "gold", (n_queries,))
        if gold.size and (gold.min() < 0 or gold.max() >= n_corpus):
            raise ValueError(
                f"gold holds corpus rows outside 0..{n_corpus - 1} (min {gold.min()}, max {gold.max()})"
            )
        return sp.csr_matrix(
            (np.ones(n_queries, np.float32), (np.arange(n_queries), gold)), shape=(n_queries, n_corpus)
        )
    query_refs, corpus_refs, grades = _qrels_columns(arrays)
    rows = _resolve(query_refs, arrays.get("query_ids"), n_queries, "qrels_query", "query_ids")
    cols = _resolve(corpus_refs, arrays.get("corpus_ids"), n_corpus, "qrels_corpus", "corpus_ids")
    keep = grades > 0
    pairs = rows[keep] * n_corpus + cols[keep]
    if len(np.unique(pairs)) != len(pairs):
        raise ValueError("qrels judge the same (query, corpus) pair more than once; keep one grade per pair")
    return sp.csr_matrix((grades[keep], (rows[keep], cols[keep])), shape=(n_queries, n_corpus))


def _qrels_columns(arrays: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if "qrels" in arrays:
        if any(key in arrays for key in QRELS_NAMES):
            raise ValueError(
                "give qrels either as one 'qrels' (m, 3) array or as qrels_query/qrels_corpus/qrels_grade"
            )
        return _qrels_table(arrays["qrels"])
    missing = [key for key in QRELS_NAMES[:2] if key not in arrays]
    if missing:
        raise ValueError(f"qrels need both 'qrels_query' and 'qrels_corpus'; missing {', '.join(missing)}")
    query_refs, corpus_refs = arrays["qrels_query"], arrays["qrels_corpus"]
    grades = arrays.get("qrels_grade", np.ones(len(query_refs)))
    if not (query_refs.ndim == corpus_refs.ndim == grades.ndim == 1) or not (
        len(query_refs) == len(corpus_refs) == len(grades)
    ):
        raise ValueError(
            f"qrels_query, qrels_corpus and qrels_grade must be 1-D and equally long; got shapes "
            f"{query_refs.shape}, {corpus_refs.shape}, {grades.shape}"
        )
    return query_refs, corpus_refs, _grades(grades)


def _qrels_table(table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Columns of a one-array qrels table: numeric or string (m, 2|3), or a structured array of 2-3 fields."""
    if table.dtype.names is not None and table.ndim == 1 and len(table.dtype.names) in (2, 3):
        columns = [table[field] for field in table.dtype.names]
    elif table.ndim == 2 and table.shape[1] in (2, 3) and table.dtype.kind in "iufUS":
        columns = list(table.T)
    else:
        raise ValueError(
            "'qrels' must be an (m, 3) array of [query, corpus, grade] rows (or (m, 2), grade 1), numeric or "
            f"string ids, or a structured array with those fields; got shape {table.shape}, dtype {table.dtype}"
        )
    refs = [
        column if column.dtype.kind in "US" else _whole(column, f"qrels column {i}")
        for i, column in enumerate(columns[:2])
    ]
    grades = columns[2] if len(columns) == 3 else np.ones(len(table))
    if grades.dtype.kind in "US":
        try:
            grades = grades.astype(np.float64)
        except ValueError:
            raise ValueError("qrels grades (third column) must be numbers") from None
    return refs[0], refs[1], _grades(grades)


def _grades(grades: np.ndarray) -> np.ndarray:
    if grades.dtype.kind not in "iuf" or not np.isfinite(grades.astype(np.float64)).all():
        raise ValueError(f"qrels grades must be finite numbers; got dtype {grades.dtype}")
    return grades.astype(np.float32)


def _whole(values: np.ndarray, what: str) -> np.ndarray:
    if values.dtype.kind == "f" and not np.array_equal(values, np.round(values)):
        raise ValueError(f"{what} must hold whole numbers (row numbers or integer ids)")
    return values.astype(np.int64)


def _resolve(refs: np.ndarray, ids: np.ndarray | None, rows: int, what: str, id_name: str) -> np.ndarray:
    """Row numbers of ``refs``: looked up in ``ids`` when given, else read as row numbers."""
    if ids is None:
        numbers = _row_numbers(refs, what, id_name)
        bad = (numbers < 0) | (numbers >= rows)
        if bad.any():
            raise ValueError(
                f"{what} holds row numbers outside 0..{rows - 1} (e.g. {numbers[bad][0]}); "
                f"give {id_name} to use ids instead of row numbers"
            )
        return numbers
    keys = _id_strings(ids, id_name)
    if keys.shape != (rows,):
        raise ValueError(f"{id_name} must have one id per row: shape ({rows},); got {ids.shape}")
    lookup = {key: row for row, key in enumerate(keys.tolist())}
    if len(lookup) != rows:
        raise ValueError(f"{id_name} holds duplicate ids; each row needs its own id")
    wanted = _id_strings(refs, what).tolist()
    missing = [ref for ref in dict.fromkeys(wanted) if ref not in lookup]
    if missing:
        raise ValueError(
            f"{len(missing)} id(s) in {what} are not in {id_name}: {', '.join(map(repr, missing[:5]))}"
        )
    return np.array([lookup[ref] for ref in wanted], dtype=np.int64)


def _row_numbers(refs: np.ndarray, what: str, id_name: str) -> np.ndarray:
    if refs.dtype.kind in "iu":
        return refs.astype(np.int64)
    if refs.dtype.kind in "US":
        try:
            return np.array([int(ref) for ref in _id_strings(refs, what).tolist()], dtype=np.int64)
        except ValueError:
            pass
    raise ValueError(
        f"{what} holds {refs.dtype} values that are not row numbers; give {id_name} "
        f"(one id per row) so they can be resolved"
    )


def _id_strings(ids: np.ndarray, what: str) -> np.ndarray:
    if ids.ndim != 1 or ids.dtype.kind not in "iuUS":
        raise TypeError(
            f"{what} must be a 1-D array of integer or string ids; got shape {ids.shape}, dtype {ids.dtype}"
        )
    if ids.dtype.kind == "S":
        ids = np.char.decode(ids, "utf-8")
    return ids.astype(str)


def _integers(array: np.ndarray, what: str, shape: tuple[int, ...]) -> np.ndarray:
    if array.dtype.kind not in "iu":
        raise TypeError(f"{what} must hold integers; got dtype {array.dtype}")
    if array.shape != shape:
        raise ValueError(f"{what} must have shape {shape}; got {array.shape}")
    return array.astype(np.int64)


def _labels(array: np.ndarray | None, rows: int, what: str) -> np.ndarray | None:
    return None if array is None else _integers(array, what, (rows,))


def _parquet_ids(path: Path, part: str) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    names = pq.read_schema(path).names
    column = next((name for name in _PARQUET_ID_COLUMNS[part] if name in names), None)
    if column is None:
        return {}
    ids = pq.read_table(path, columns=[column]).column(0).to_numpy(zero_copy_only=False)
    return {
        "corpus_ids" if part == "corpus" else "query_ids": ids.astype(str) if ids.dtype == object else ids
    }


def _read_npz(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    arrays, _ = read_arrays(path)
    header = _parse_header(str(arrays.pop(HEADER_KEY))) if HEADER_KEY in arrays else {}
    return arrays, header


def _read_safetensors(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    arrays, metadata = read_arrays(path)
    return arrays, _parse_header(metadata[HEADER_KEY]) if HEADER_KEY in metadata else {}


def _parse_header(text: str) -> dict[str, Any]:
    try:
        header = json.loads(text)
    except json.JSONDecodeError:
        raise CorruptFileError(f"dataset header {HEADER_KEY!r} is not valid JSON") from None
    if not isinstance(header, dict):
        raise CorruptFileError(f"dataset header {HEADER_KEY!r} must be a JSON object")
    return header


def _write_npz(tmp: Path, arrays: dict[str, np.ndarray]) -> None:
    with open(tmp, "wb") as handle:
        np.savez_compressed(handle, **arrays)


def _write_safetensors(tmp: Path, arrays: dict[str, np.ndarray], header: dict[str, Any]) -> None:
    import torch
    from safetensors.torch import save_file

    tensors = {key: torch.from_numpy(np.ascontiguousarray(value)) for key, value in arrays.items()}
    save_file(tensors, str(tmp), metadata={HEADER_KEY: json.dumps(header)})
