"""The WordNet parser on the real Debian data files, and the task construction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from adaptemb.datasets.wordnet import (
    LEXNAMES,
    WORDNET_DIR,
    Synset,
    corpus_synsets,
    example_queries,
    lemma_queries,
    parse_data_line,
    read_wordnet,
)

needs_wordnet = pytest.mark.skipif(
    not (WORDNET_DIR / "data.noun").is_file(), reason="wordnet-base not installed"
)


@pytest.fixture(scope="module")
def synsets() -> list[Synset]:
    return read_wordnet()


def _line(offset: str, pos: str = "noun") -> str:
    with open(WORDNET_DIR / f"data.{pos}", encoding="utf-8") as handle:
        return next(line for line in handle if line.startswith(offset))


@needs_wordnet
def test_parses_the_real_dog_synset() -> None:
    dog = parse_data_line(_line("02084071"))
    assert dog.offset == 2084071 and dog.pos == "n"
    assert dog.lemmas == ("dog", "domestic dog", "Canis familiaris")
    assert dog.lexname == "noun.animal" and dog.lexname_id == 5
    assert dog.definition.startswith("a member of the genus Canis (probably descended from the common wolf)")
    assert dog.definition.endswith("occurs in many breeds")
    assert dog.examples == ("the dog barked all night",)


@needs_wordnet
def test_parses_verbs_and_adjective_markers() -> None:
    run = parse_data_line(_line("01926329", "verb"))  # run: move fast by using one's feet
    assert run.lemmas[0] == "run" and run.lexname == "verb.motion"
    assert run.definition.startswith("move fast by using one's feet")
    assert all('"' not in example for example in run.examples) and run.examples


def test_parse_line_by_hand() -> None:
    line = (
        "00001740 00 a 02 able(a) 0 unable_to 1 000 | (usually followed by `to') having means; "
        '"able to swim"; "she was able to program"  \n'
    )
    synset = parse_data_line(line)
    assert synset.lemmas == ("able", "unable to") and synset.lexname == "adj.all"
    assert synset.definition == "(usually followed by `to') having means"
    assert synset.examples == ("able to swim", "she was able to program")
    with pytest.raises(ValueError, match="not a WordNet synset line"):
        parse_data_line("  1 This software and database is being provided")


@pytest.mark.slow
@needs_wordnet
def test_whole_wordnet_counts(synsets: list[Synset]) -> None:
    assert len(synsets) == 117_659  # WordNet 3.0
    corpus = corpus_synsets(synsets)
    assert len(corpus) >= 30_000 and len({s.definition for s in corpus}) == len(corpus)
    assert {s.lexname_id for s in corpus} == set(range(len(LEXNAMES))) and len(LEXNAMES) == 45


def test_missing_folder_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="apt-get install wordnet-base"):
        read_wordnet(tmp_path)


@needs_wordnet
def test_queries_point_at_their_synsets(synsets: list[Synset]) -> None:
    corpus = corpus_synsets(synsets, limit=300, seed=1)
    assert corpus == corpus_synsets(synsets, limit=300, seed=1)  # seeded
    texts, gold = example_queries(corpus, 40, seed=1)
    assert len(set(gold.tolist())) == 40
    assert all(text in corpus[row].examples for text, row in zip(texts, gold))
    lemmas, qrels = lemma_queries(corpus, 40, seed=1)
    assert len(set(lemmas)) == len(lemmas) == 40
    for query, lemma in enumerate(lemmas):
        relevant = set(qrels[query].indices.tolist())
        holders = {row for row, s in enumerate(corpus) if lemma in {x.lower() for x in s.lemmas}}
        assert relevant == holders and relevant
    assert np.all(qrels.data == 1)
