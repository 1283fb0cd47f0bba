"""The bench on text: a BEIR folder built from WordNet (graded judgements), a JSONL file of texts, the embedding cache,
saved TREC runs checked by pytrec_eval on every row, and one clear error for each kind of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from adaptemb.cli import app
from adaptemb.datasets import load_dataset
from adaptemb.datasets.beir import document_text, read_beir
from adaptemb.datasets.embedding_cache import CacheKey, model_sha256, read_cache, write_cache
from adaptemb.datasets.wordnet import WORDNET_DIR
from adaptemb.datasets.wordnet_beir import build_wordnet_beir
from adaptemb.evaluate.runner import BenchConfig, run_bench
from adaptemb.evaluate.runs import save_runs
from adaptemb.evaluate.trec import read_run, trec_metrics

pytest.importorskip("beir")
pytest.importorskip("pytrec_eval")
needs_wordnet = pytest.mark.skipif(not (WORDNET_DIR / "data.noun").is_file(), reason="wordnet-base not installed")
runner = CliRunner()
FAST = BenchConfig(methods=["svd", "int8", "binary"], budgets=[16, 64], rounds=1, warmup=0, batch_size=32,
                   device="cpu", keep_rankings=True, fit_progress=False)


def _write(folder: Path, corpus: list[dict], queries: list[dict], qrels: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    for split, lines in qrels.items():
        (folder / "qrels").mkdir(exist_ok=True)
        (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + lines)
    return folder


def _tiny(folder: Path, qrels: str = "q1\td1\t2\nq1\td2\t1\n", split: str = "test") -> Path:
    corpus = [{"_id": f"d{i}", "title": f"t{i}", "text": f"text {i}"} for i in range(12)]
    return _write(folder, corpus, [{"_id": "q1", "text": "a query"}, {"_id": "q2", "text": "unjudged"}], {split: qrels})


def _error(args: list[str]) -> str:
    result = runner.invoke(app, ["bench", *args, "--methods", "svd", "--quiet"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.fixture(scope="module")
def wordnet_beir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small WordNet BEIR folder, plus one query judged only not relevant (it must count 0 in every mean)."""
    folder = build_wordnet_beir(tmp_path_factory.mktemp("wnb") / "wordnet-beir", corpus_size=300, test_queries=30,
                                dev_queries=8, seed=1)
    with open(folder / "queries.jsonl", "a") as handle:
        handle.write(json.dumps({"_id": "only-zero", "text": "a sentence nobody judged relevant"}) + "\n")
    first_doc = json.loads((folder / "corpus.jsonl").read_text().splitlines()[0])["_id"]
    with open(folder / "qrels" / "test.tsv", "a") as handle:
        handle.write(f"only-zero\t{first_doc}\t0\n")
    return folder


@needs_wordnet
def test_read_beir_keeps_judged_queries_graded_grades_and_beirs_document_text(wordnet_beir: Path) -> None:
    from beir.datasets.data_loader import GenericDataLoader

    task = read_beir(wordnet_beir, "test", progress=False)
    corpus, queries, _ = GenericDataLoader(str(wordnet_beir)).load("test")
    assert task.corpus_ids == list(corpus) and task.query_ids == list(queries) and len(task.query_ids) == 31
    assert task.corpus_texts == [(d["title"] + " " + d["text"]).strip() for d in corpus.values()]  # beir's join
    assert document_text(None, " x ") == "x"
    assert sorted(set(task.qrels.data.tolist())) == [1.0, 2.0]  # grade 0 judgements are not relevant
    row = task.query_ids.index("only-zero")
    assert task.qrels[row].nnz == 0 and task.judged.all()
    own = task.query_ids[0].split("-x")[0]
    assert task.qrels[0, task.corpus_ids.index(own)] == 2.0  # the example's own synset
    assert any("8 of the queries" in note for note in task.notes)  # the dev queries, not judged in test
    assert any("1 queries are judged only not relevant" in note for note in task.notes)
    assert read_beir(wordnet_beir, "dev", progress=False).query_ids != task.query_ids


@pytest.fixture(scope="module")
def benched(wordnet_beir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    out = tmp_path_factory.mktemp("bench-out")
    dataset = load_dataset(wordnet_beir, cache_dir=out / "embeddings", device="cpu", progress=False)
    result = run_bench(dataset, FAST)
    return dataset, result, save_runs(result, dataset, out), out


@needs_wordnet
@pytest.mark.slow
def test_every_row_agrees_with_pytrec_eval_on_the_original_qrels(wordnet_beir: Path, benched: tuple) -> None:
    """Each saved run, read back and scored by pytrec_eval against qrels/test.tsv as beir reads it (grade-0 lines
    included), gives the table's NDCG@10, Recall@100 and MRR@10 to 1e-6, on every row."""
    from beir.datasets.data_loader import GenericDataLoader

    _, result, saved, _ = benched
    _, _, qrels = GenericDataLoader(str(wordnet_beir)).load("test")
    assert [row["method"] for row, _ in result.rankings] == ["float32", "svd", "svd", "int8", "binary"]
    assert set(saved.files) == {"float32", "svd-k16", "svd-k64", "int8", "binary"}
    for (row, _), path in zip(result.rankings, saved.files.values()):
        theirs = trec_metrics(read_run(path), qrels)
        assert theirs["ndcg_cut_10"] == pytest.approx(row["ndcg_at_10"], abs=1e-6), path.name
        assert theirs["recall_100"] == pytest.approx(row["recall_at_100"], abs=1e-6), path.name
        assert theirs["recip_rank_10"] == pytest.approx(row["mrr_at_10"], abs=1e-6), path.name
        assert row["queries"] == 31
    assert all(entry["max_abs_diff"] <= 1e-6 for entry in saved.check.values())
    assert any("agrees with the table within 1e-06 on every row" in note for note in saved.notes)


@needs_wordnet
@pytest.mark.slow
def test_the_binary_run_ties_and_reads_back_as_the_benchs_ranking(benched: tuple) -> None:
    dataset, result, saved, _ = benched
    (scores, ids), = [ranking for row, ranking in result.rankings if row["method"] == "binary"]
    assert (np.diff(scores, axis=1) == 0).sum() > 100  # binary codes tie a lot
    run = read_run(saved.files["binary"])
    for query, qid in enumerate(dataset.row_ids("queries")):
        by_trec = [doc for doc, _ in sorted(run[qid].items(), key=lambda item: (item[1], item[0]), reverse=True)]
        assert by_trec == [dataset.corpus_ids[i] for i in ids[query]]
    assert len(run[dataset.row_ids("queries")[0]]) == 100  # depth 100: Recall@100 is computable


@needs_wordnet
@pytest.mark.slow
def test_a_second_load_reads_the_cache_and_a_foreign_cache_is_never_reused(wordnet_beir: Path, benched: tuple) -> None:
    dataset, _, _, out = benched
    again = load_dataset(wordnet_beir, cache_dir=out / "embeddings", device="cpu", progress=False)
    np.testing.assert_array_equal(again.corpus, dataset.corpus)
    assert any("read 300 from the cache" in note for note in again.notes)
    cache = out / "embeddings" / "queries-test.npz"
    key = CacheKey("other", "0" * 64, "x", len(dataset.queries), {})
    write_cache(cache, key, np.zeros_like(dataset.queries), {})  # a cache another model wrote
    third = load_dataset(wordnet_beir, cache_dir=out / "embeddings", device="cpu", progress=False)
    assert any("written by another model (other" in note for note in third.notes)
    np.testing.assert_allclose(third.queries, dataset.queries, atol=1e-5)  # embedded again, not the zeros


@needs_wordnet
@pytest.mark.slow
def test_cli_second_run_reads_the_cache_and_writes_runs(wordnet_beir: Path, benched: tuple) -> None:
    dataset, result, _, out = benched
    args = ["bench", "--data", str(wordnet_beir), "--methods", "int8", "--save-runs", "--out", str(out), "--rounds",
            "1", "--warmup", "0", "--device", "cpu", "--quiet"]
    cli = runner.invoke(app, args)
    assert cli.exit_code == 0, cli.output
    notes = json.loads((out / "results.json").read_text())["notes"]
    assert any("read 300 from the cache" in note for note in notes) and (out / "runs" / "int8.trec").is_file()
    line = (out / "runs" / "float32.trec").read_text().splitlines()[0].split()
    top = result.rankings[0][1][1][0, 0]  # the reference row's best document for the first query
    assert line[:4] == [dataset.row_ids("queries")[0], "Q0", dataset.corpus_ids[top], "1"] and line[5] == "float32"


def test_cache_key_mismatches_are_named(tmp_path: Path) -> None:
    key = CacheKey("m", "a" * 64, "t", 2, {"corpus.jsonl": "1"})
    write_cache(tmp_path / "c.npz", key, np.ones((2, 3), np.float32), {})
    assert read_cache(tmp_path / "c.npz", key)[0] is not None
    assert "another model" in read_cache(tmp_path / "c.npz", CacheKey("n", "b" * 64, "t", 2, key.files))[1]
    assert "other files (corpus.jsonl changed)" in read_cache(
        tmp_path / "c.npz", CacheKey("m", "a" * 64, "t", 2, {"corpus.jsonl": "2"}))[1]
    assert "other texts" in read_cache(tmp_path / "c.npz", CacheKey("m", "a" * 64, "u", 2, key.files))[1]
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    assert "not a readable embedding cache" in read_cache(tmp_path / "bad.npz", key)[1]


def test_model_hash_follows_content_not_path(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name / "onnx").mkdir(parents=True)
        (tmp_path / name / "config.json").write_text("{}")
        (tmp_path / name / "README.md").write_text(name)  # documentation is not the model
        (tmp_path / name / "onnx" / "model.onnx").write_text(name)  # nor another runtime's copy
    assert model_sha256(tmp_path / "a") == model_sha256(tmp_path / "b")
    (tmp_path / "b" / "config.json").write_text('{"hidden_size": 1}')
    assert model_sha256(tmp_path / "a") != model_sha256(tmp_path / "b")


def test_beir_folder_errors_are_one_clear_line(tmp_path: Path) -> None:
    no_qrels = _tiny(tmp_path / "no-qrels")
    for split in (no_qrels / "qrels").iterdir():
        split.unlink()
    assert "has no qrels" in _error(["--data", str(no_qrels)])
    line = _error(["--data", str(_tiny(tmp_path / "dev-only", split="dev"))])
    assert "no split 'test'" in line and "its splits: dev" in line
    line = _error(["--data", str(_tiny(tmp_path / "ghost-query", "q9\td1\t1\n"))])
    assert "query id 'q9'" in line and "queries.jsonl" in line
    line = _error(["--data", str(_tiny(tmp_path / "ghost-doc", "q1\td99\t1\n"))])
    assert "'d99'" in line and "corpus.jsonl does not hold" in line
    line = _error(["--data", str(_tiny(tmp_path / "float-grade", "q1\td1\t0.5\n"))])
    assert "whole-number scores" in line
    line = _error(["--data", str(_tiny(tmp_path / "ok")), "--backbone", str(tmp_path / "no-model")])
    assert "does not exist" in line and "--backbone takes" in line
    (tmp_path / "lonely").mkdir()
    (tmp_path / "lonely" / "queries.jsonl").write_text("")
    assert "lacks corpus.jsonl" in _error(["--data", str(tmp_path / "lonely")])


def test_text_options_on_embeddings_and_bad_texts_are_clear_errors(tmp_path: Path) -> None:
    assert "applies to text data" in _error(["--data", "default", "--backbone", "all-MiniLM-L6-v2"])
    assert "applies to text data" in _error(["--data", "default", "--split", "dev"])
    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(json.dumps({"text": f"t{i}"}) + "\n" for i in range(25)))
    assert "applies to a BEIR folder" in _error(["--data", str(texts), "--split", "dev"])
    texts.write_text('{"text": "a"}\nnot json\n')
    assert "line 2 is not JSON" in _error(["--data", str(texts)])
    texts.write_text("".join(json.dumps({"text": f"t{i}", **({"label": "x"} if i else {})}) + "\n" for i in range(25)))
    assert "label every text or none" in _error(["--data", str(texts)])


@pytest.mark.slow
def test_a_jsonl_file_of_texts_is_a_corpus_with_held_out_queries_and_its_own_ids(tmp_path: Path) -> None:
    words = ["cat", "dog", "car", "bus", "tree"]
    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(json.dumps({"_id": f"doc-{i}", "text": f"a {words[i % 5]} number {i}",
                                         "label": words[i % 5]}) + "\n" for i in range(40)))
    dataset = load_dataset(texts, device="cpu", progress=False)
    assert len(dataset.queries) == 4 and len(dataset.corpus) == 36  # format (c): 10% held out
    assert dataset.query_labels is not None and dataset.labels.max() == 4  # labels numbered in sorted order
    assert set(dataset.row_ids("queries")) | set(dataset.row_ids("corpus")) == {f"doc-{i}" for i in range(40)}
    assert json.loads(dataset.metadata["label_names"]) == sorted(words)
