"""Dataset file formats (a) one file, (b) a folder, (c) a corpus alone: round trips, mappings, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import save_file

from adaptemb.datasets import Dataset, holdout_split, load_dataset, save_dataset
from adaptemb.errors import CorruptFileError

RNG = np.random.default_rng(0)
CORPUS = RNG.standard_normal((6, 4)).astype(np.float32)
QUERIES = RNG.standard_normal((3, 4)).astype(np.float32)
LABELS = np.array([0, 1, 1, 2, 0, 2])
QUERY_LABELS = np.array([2, 0, 1])
# BEIR-style judgements by id, worked out by hand below
CORPUS_IDS = np.array(["d0", "d1", "d2", "d3", "d4", "d5"])
QUERY_IDS = np.array(["q-a", "q-b", "q-c"])
QRELS = [
    ("q-a", "d3", 2.0),
    ("q-a", "d0", 1.0),
    ("q-c", "d5", 1.0),
    ("q-b", "d1", 0.0),
]  # grade 0: not relevant
EXPECTED_QRELS = np.array([[1, 0, 0, 2, 0, 0], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1]], dtype=np.float32)


def _qrel_arrays() -> dict[str, np.ndarray]:
    return {
        "qrels_query": np.array([q for q, _, _ in QRELS]),
        "qrels_corpus": np.array([c for _, c, _ in QRELS]),
        "qrels_grade": np.array([g for _, _, g in QRELS], dtype=np.float32),
        "query_ids": QUERY_IDS,
        "corpus_ids": CORPUS_IDS,
    }


def _assert_same(a: Dataset, b: Dataset) -> None:
    np.testing.assert_array_equal(a.corpus, b.corpus)
    np.testing.assert_array_equal(a.queries, b.queries)
    np.testing.assert_array_equal(a.qrels.toarray(), b.qrels.toarray())
    for field in ("labels", "query_labels"):
        left, right = getattr(a, field), getattr(b, field)
        assert (left is None) == (right is None)
        if left is not None:
            np.testing.assert_array_equal(left, right)


def test_npz_with_gold_maps_each_query_to_its_row(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", corpus=CORPUS, queries=QUERIES, gold=np.array([4, 0, 4]), labels=LABELS)
    dataset = load_dataset(tmp_path / "d.npz")
    expected = np.zeros((3, 6))
    expected[0, 4] = expected[1, 0] = expected[2, 4] = 1
    np.testing.assert_array_equal(dataset.qrels.toarray(), expected)
    np.testing.assert_array_equal(dataset.labels, LABELS)
    assert dataset.query_labels is None and dataset.name == "d" and dataset.corpus.dtype == np.float32


def test_npz_qrels_by_id_resolve_to_rows_and_drop_grade_zero(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", corpus=CORPUS, queries=QUERIES, **_qrel_arrays())
    np.testing.assert_array_equal(load_dataset(tmp_path / "d.npz").qrels.toarray(), EXPECTED_QRELS)


def test_qrels_as_row_numbers_and_as_one_table(tmp_path: Path) -> None:
    rows = {
        "qrels_query": np.array([0, 0, 2]),
        "qrels_corpus": np.array([3, 0, 5]),
        "qrels_grade": np.array([2, 1, 1]),
    }
    np.savez(tmp_path / "rows.npz", corpus=CORPUS, queries=QUERIES, **rows)
    table = np.array([[0, 3, 2], [0, 0, 1], [2, 5, 1]])
    np.savez(tmp_path / "table.npz", corpus=CORPUS, queries=QUERIES, qrels=table)
    for name in ("rows.npz", "table.npz"):
        np.testing.assert_array_equal(load_dataset(tmp_path / name).qrels.toarray(), EXPECTED_QRELS)


def test_qrels_table_of_string_ids_or_structured(tmp_path: Path) -> None:
    ids = {"query_ids": QUERY_IDS, "corpus_ids": CORPUS_IDS}
    table = np.array([[q, c, f"{g:g}"] for q, c, g in QRELS])
    np.savez(tmp_path / "s.npz", corpus=CORPUS, queries=QUERIES, qrels=table, **ids)
    structured = np.array(QRELS, dtype=[("query-id", "U8"), ("corpus-id", "U8"), ("score", "f4")])
    np.savez(tmp_path / "r.npz", corpus=CORPUS, queries=QUERIES, qrels=structured, **ids)
    for name in ("s.npz", "r.npz"):
        np.testing.assert_array_equal(load_dataset(tmp_path / name).qrels.toarray(), EXPECTED_QRELS)


def test_integer_ids_resolve(tmp_path: Path) -> None:
    np.savez(
        tmp_path / "d.npz",
        corpus=CORPUS,
        queries=QUERIES,
        qrels_query=np.array([70, 90]),
        qrels_corpus=np.array([105, 100]),
        query_ids=np.array([70, 80, 90]),
        corpus_ids=np.arange(100, 106),
    )
    qrels = load_dataset(tmp_path / "d.npz").qrels.toarray()
    assert qrels[0, 5] == 1 and qrels[2, 0] == 1 and qrels.sum() == 2


def _write_folder(folder: Path, corpus_format: str) -> None:
    folder.mkdir()
    if corpus_format == "parquet":
        for part, array, ids in (("corpus", CORPUS, CORPUS_IDS), ("queries", QUERIES, QUERY_IDS)):
            table = pa.table({"_id": ids, "embedding": pa.array(list(array), type=pa.list_(pa.float32()))})
            pq.write_table(table, folder / f"{part}.parquet")
    else:
        np.save(folder / "corpus.npy", CORPUS)
        np.save(folder / "queries.npy", QUERIES)
        (folder / "corpus_ids.txt").write_text("\n".join(CORPUS_IDS) + "\n")
        np.save(folder / "query_ids.npy", QUERY_IDS)
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{c}\t{g:g}" for q, c, g in QRELS]
    (folder / "qrels.tsv").write_text("\n".join(lines) + "\n")
    np.save(folder / "labels.npy", LABELS)
    np.save(folder / "query_labels.npy", QUERY_LABELS)


@pytest.mark.parametrize("corpus_format", ["npy", "parquet"])
def test_folder_with_beir_qrels_equals_the_single_file(tmp_path: Path, corpus_format: str) -> None:
    _write_folder(tmp_path / "folder", corpus_format)
    np.savez(
        tmp_path / "one.npz",
        corpus=CORPUS,
        queries=QUERIES,
        labels=LABELS,
        query_labels=QUERY_LABELS,
        **_qrel_arrays(),
    )
    from_folder = load_dataset(tmp_path / "folder")
    _assert_same(from_folder, load_dataset(tmp_path / "one.npz"))
    np.testing.assert_array_equal(from_folder.qrels.toarray(), EXPECTED_QRELS)
    assert from_folder.name == "folder"


def test_folder_with_gold(tmp_path: Path) -> None:
    np.save(tmp_path / "corpus.npy", CORPUS)
    np.save(tmp_path / "queries.npy", QUERIES)
    np.save(tmp_path / "gold.npy", np.array([1, 2, 3]))
    np.testing.assert_array_equal(load_dataset(tmp_path).qrels.nonzero()[1], [1, 2, 3])


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
@pytest.mark.parametrize("relevance", ["gold", "graded"])
def test_save_then_load_gives_the_same_dataset(tmp_path: Path, suffix: str, relevance: str) -> None:
    if relevance == "gold":
        dataset = Dataset.from_gold(
            "tiny",
            CORPUS,
            QUERIES,
            np.array([5, 0, 2]),
            labels=LABELS,
            query_labels=QUERY_LABELS,
            description="by hand",
            metadata={"k": "v"},
        )
    else:
        np.savez(tmp_path / "src.npz", corpus=CORPUS, queries=QUERIES, **_qrel_arrays())
        dataset = load_dataset(tmp_path / "src.npz", name="tiny")
    path = save_dataset(dataset, tmp_path / f"out{suffix}")
    loaded = load_dataset(path)
    _assert_same(loaded, dataset)
    assert loaded.name == "tiny"
    if relevance == "gold":
        assert loaded.description == "by hand" and loaded.metadata["k"] == "v"


def test_save_keeps_float16_and_writes_gold(tmp_path: Path) -> None:
    dataset = Dataset.from_gold(
        "h", CORPUS.astype(np.float16), QUERIES.astype(np.float16), np.array([0, 1, 2])
    )
    save_dataset(dataset, tmp_path / "h.npz")
    with np.load(tmp_path / "h.npz") as archive:
        assert (
            archive["corpus"].dtype == np.float16
            and "gold" in archive.files
            and "qrels_query" not in archive.files
        )


def test_safetensors_written_by_hand(tmp_path: Path) -> None:
    tensors = {
        "corpus": torch.from_numpy(CORPUS).to(torch.bfloat16),
        "queries": torch.from_numpy(QUERIES),
        "gold": torch.tensor([0, 1, 2]),
    }
    save_file(tensors, str(tmp_path / "d.safetensors"))
    dataset = load_dataset(tmp_path / "d.safetensors")
    assert dataset.corpus.dtype == np.float32
    np.testing.assert_allclose(dataset.corpus, CORPUS, rtol=1e-2, atol=1e-2)


def _independent_top10(queries: np.ndarray, corpus: np.ndarray) -> set[tuple[int, int]]:
    pairs = set()
    for i, query in enumerate(queries):
        scores = [(float(np.dot(query.astype(np.float64), row)), j) for j, row in enumerate(corpus)]
        pairs |= {(i, j) for _, j in sorted(scores, key=lambda s: (-s[0], s[1]))[:10]}
    return pairs


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".parquet", ".safetensors"])
def test_corpus_alone_holds_out_queries_judged_by_exact_top10(tmp_path: Path, suffix: str) -> None:
    corpus = np.random.default_rng(1).standard_normal((250, 8)).astype(np.float32)
    path = tmp_path / f"c{suffix}"
    if suffix == ".npy":
        np.save(path, corpus)
    elif suffix == ".npz":
        np.savez(path, corpus=corpus)
    elif suffix == ".parquet":
        pq.write_table(pa.table({"v": pa.array(list(corpus), type=pa.list_(pa.float32()))}), path)
    else:
        save_file({"corpus": torch.from_numpy(corpus)}, str(path))
    dataset = load_dataset(path, seed=3)
    query_rows, corpus_rows = holdout_split(250, seed=3)
    assert len(query_rows) == 25 and len(corpus_rows) == 225 and not set(query_rows) & set(corpus_rows)
    np.testing.assert_array_equal(dataset.queries, corpus[query_rows])
    np.testing.assert_array_equal(dataset.corpus, corpus[corpus_rows])
    query_set = {row.tobytes() for row in dataset.queries}
    assert not any(row.tobytes() in query_set for row in dataset.corpus)
    assert set(zip(*dataset.qrels.nonzero())) == _independent_top10(dataset.queries, dataset.corpus)
    assert dataset.qrels.getnnz(axis=1).tolist() == [10] * 25


def test_corpus_alone_splits_labels_and_caps_queries_at_1000(tmp_path: Path) -> None:
    corpus = np.random.default_rng(2).standard_normal((12_000, 4)).astype(np.float32)
    labels = np.arange(12_000) % 7
    np.savez(tmp_path / "c.npz", corpus=corpus, labels=labels)
    dataset = load_dataset(tmp_path / "c.npz")
    query_rows, corpus_rows = holdout_split(12_000)
    assert dataset.queries.shape == (1000, 4) and dataset.corpus.shape == (11_000, 4)
    np.testing.assert_array_equal(dataset.query_labels, labels[query_rows])
    np.testing.assert_array_equal(dataset.labels, labels[corpus_rows])


BAD_FILES = {
    "no corpus": ({"queries": QUERIES, "gold": np.array([0, 1, 2])}, ValueError, "missing array 'corpus'"),
    "integer corpus": (
        {"corpus": CORPUS.astype(np.int32), "queries": QUERIES, "gold": np.array([0, 1, 2])},
        TypeError,
        "must hold floats",
    ),
    "1-D queries": ({"corpus": CORPUS, "queries": QUERIES[0], "gold": np.array([0])}, ValueError, "2-D"),
    "wrong dim": (
        {"corpus": CORPUS, "queries": QUERIES[:, :3], "gold": np.array([0, 1, 2])},
        ValueError,
        "dimension 3",
    ),
    "NaN": (
        {
            "corpus": np.where(np.arange(24).reshape(6, 4) == 9, np.nan, CORPUS),
            "queries": QUERIES,
            "gold": np.array([0, 1, 2]),
        },
        ValueError,
        "first: row 2",
    ),
    "no relevance": ({"corpus": CORPUS, "queries": QUERIES}, ValueError, "got neither"),
    "both relevances": (
        {"corpus": CORPUS, "queries": QUERIES, "gold": np.array([0, 1, 2]), "qrels": np.array([[0, 1, 1]])},
        ValueError,
        "got both",
    ),
    "gold out of range": (
        {"corpus": CORPUS, "queries": QUERIES, "gold": np.array([0, 1, 6])},
        ValueError,
        "outside 0..5",
    ),
    "gold wrong length": (
        {"corpus": CORPUS, "queries": QUERIES, "gold": np.array([0, 1])},
        ValueError,
        "(3,)",
    ),
    "float gold": (
        {"corpus": CORPUS, "queries": QUERIES, "gold": np.array([0.0, 1, 2])},
        TypeError,
        "integers",
    ),
    "unknown id": (
        {
            "corpus": CORPUS,
            "queries": QUERIES,
            **_qrel_arrays(),
            "qrels_corpus": np.array(["d3", "d0", "zz", "d1"]),
        },
        ValueError,
        "'zz'",
    ),
    "ids without id arrays": (
        {
            "corpus": CORPUS,
            "queries": QUERIES,
            "qrels_query": np.array(["q-a"]),
            "qrels_corpus": np.array(["d1"]),
        },
        ValueError,
        "give query_ids",
    ),
    "duplicate ids": (
        {
            "corpus": CORPUS,
            "queries": QUERIES,
            **_qrel_arrays(),
            "corpus_ids": np.array(["d0", "d0", "d2", "d3", "d4", "d5"]),
        },
        ValueError,
        "duplicate",
    ),
    "duplicate pair": (
        {"corpus": CORPUS, "queries": QUERIES, "qrels": np.array([[0, 1, 1], [0, 1, 2]])},
        ValueError,
        "more than once",
    ),
    "row out of range": (
        {"corpus": CORPUS, "queries": QUERIES, "qrels_query": np.array([3]), "qrels_corpus": np.array([0])},
        ValueError,
        "outside 0..2",
    ),
    "typo": ({"corpus": CORPUS, "queries": QUERIES, "golds": np.array([0, 1, 2])}, ValueError,
             "ignored unknown array(s): golds"),
    "labels wrong length": (
        {"corpus": CORPUS, "queries": QUERIES, "gold": np.array([0, 1, 2]), "labels": np.array([0, 1])},
        ValueError,
        "labels must have shape (6,)",
    ),
}


@pytest.mark.filterwarnings("ignore:dataset 'bad'")
@pytest.mark.parametrize("case", list(BAD_FILES))
def test_malformed_files_say_what_is_wrong(tmp_path: Path, case: str) -> None:
    arrays, error, message = BAD_FILES[case]
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_dataset(tmp_path / "bad.npz")


def test_extra_arrays_are_ignored_with_a_note(tmp_path: Path) -> None:
    names = np.array(["noun.animal", "noun.plant"])
    np.savez(tmp_path / "extra.npz", corpus=CORPUS, queries=QUERIES, gold=np.array([0, 1, 2]), label_names=names)
    with pytest.warns(UserWarning, match="ignoring array\\(s\\) label_names"):
        dataset = load_dataset(tmp_path / "extra.npz")
    assert dataset.corpus.shape == CORPUS.shape and dataset.qrels.nnz == 3
    assert dataset.metadata["ignored_arrays"] == "label_names"


def test_bad_paths_and_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="built-in datasets: default"):
        load_dataset(tmp_path / "missing.npz")
    with pytest.raises(FileNotFoundError, match="did you mean 'default'"):
        load_dataset("defualt")
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(ValueError, match="one of .npz"):
        load_dataset(tmp_path / "x.txt")
    (tmp_path / "broken.npz").write_bytes(b"not a zip")
    with pytest.raises(CorruptFileError, match="not a readable .npz"):
        load_dataset(tmp_path / "broken.npz")
    np.savez(tmp_path / "objects.npz", corpus=np.array([{"a": 1}], dtype=object))
    with pytest.raises(CorruptFileError, match="no pickle"):
        load_dataset(tmp_path / "objects.npz")
    with pytest.raises(ValueError, match="at least 20 rows"):
        np.save(tmp_path / "small.npy", CORPUS)
        load_dataset(tmp_path / "small.npy")
    with pytest.raises(ValueError, match=".npz or .safetensors"):
        save_dataset(Dataset.from_gold("t", CORPUS, QUERIES, np.array([0, 1, 2])), tmp_path / "t.npy")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no corpus.npy"):
        load_dataset(tmp_path / "empty")


def test_bad_qrels_tsv(tmp_path: Path) -> None:
    np.save(tmp_path / "corpus.npy", CORPUS)
    np.save(tmp_path / "queries.npy", QUERIES)
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n0\t1\n")
    with pytest.raises(ValueError, match="line 2: expected 3 tab-separated fields"):
        load_dataset(tmp_path)
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n0\t1\thigh\n")
    with pytest.raises(ValueError, match="'high' is not a number"):
        load_dataset(tmp_path)
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n2\t5\t1\n")
    assert load_dataset(tmp_path).qrels[2, 5] == 1  # row numbers when no id files are given
