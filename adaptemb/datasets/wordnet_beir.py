"""A BEIR folder built from WordNet 3.0 (Debian ``wordnet-base``): word-sense retrieval with graded judgements.

* corpus: synsets, ``_id`` = ``synset_id`` (``n02084071``), ``title`` = its words (``dog, domestic dog, Canis
  familiaris``), ``text`` = its definition;
* queries: one example sentence of a sampled synset (``"the dog barked all night"``), ``_id`` = ``{synset}-x{j}``;
* qrels: grade 2 for the example's own synset, grade 1 for its hypernyms (a broader sense still answers it),
  grade 0 (judged not relevant) for the other senses of the word the sentence uses: the hard negatives a
  judge would mark, so polysemy is what the task measures;
* splits ``test`` and ``dev`` (disjoint synsets); the corpus holds every judged synset plus a seeded sample of
  others up to ``corpus_size``, in ``synset_id`` order.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from adaptemb.datasets.wordnet import WORDNET_DIR, Synset, read_wordnet
from adaptemb.serialization import atomic_write

SPLITS = ("test", "dev")


def build_wordnet_beir(out: str | Path, *, corpus_size: int = 10_000, test_queries: int = 1_000,
                       dev_queries: int = 300, seed: int = 0, folder: str | Path = WORDNET_DIR) -> Path:
    """Write the WordNet BEIR folder (see the module docstring) to ``out``; returns ``out``."""
    if min(corpus_size, test_queries, dev_queries) < 1:
        raise ValueError("corpus_size, test_queries and dev_queries must be positive")
    synsets = [s for s in read_wordnet(folder) if s.definition]
    by_id = {s.synset_id: s for s in synsets}
    senses = _senses(synsets)
    rng = np.random.default_rng(seed)
    with_examples = [s for s in synsets if s.examples]
    picked = rng.choice(len(with_examples), size=min(test_queries + dev_queries, len(with_examples)), replace=False)
    queries = {split: [with_examples[i] for i in part]
               for split, part in zip(SPLITS, (picked[:test_queries], picked[test_queries:]))}
    judgements = {split: [_judge(s, j, by_id, senses) for s in chosen for j in [int(rng.integers(len(s.examples)))]]
                  for split, chosen in queries.items()}
    needed = {doc for split in judgements.values() for _, _, grades in split for doc in grades}
    others = [s.synset_id for s in synsets if s.synset_id not in needed]
    extra = max(0, corpus_size - len(needed))
    fill = rng.choice(len(others), size=min(extra, len(others)), replace=False)
    corpus = sorted(needed | {others[i] for i in fill})
    root = Path(out)
    _write_jsonl(root / "corpus.jsonl", [
        {"_id": doc, "title": ", ".join(by_id[doc].lemmas), "text": by_id[doc].definition} for doc in corpus])
    _write_jsonl(root / "queries.jsonl", [
        {"_id": qid, "text": text} for split in judgements.values() for qid, text, _ in split])
    for split, judged in judgements.items():
        _write_text(root / "qrels" / f"{split}.tsv", "query-id\tcorpus-id\tscore\n" + "".join(
            f"{qid}\t{doc}\t{grade}\n" for qid, _, grades in judged for doc, grade in grades.items()))
    return root


def _senses(synsets: Sequence[Synset]) -> dict[str, list[str]]:
    """Lower-cased word -> the ids of every synset holding it."""
    senses: dict[str, list[str]] = defaultdict(list)
    for synset in synsets:
        for lemma in dict.fromkeys(lemma.lower() for lemma in synset.lemmas):
            senses[lemma].append(synset.synset_id)
    return senses


def _judge(synset: Synset, example: int, by_id: dict[str, Synset],
           senses: dict[str, list[str]]) -> tuple[str, str, dict[str, int]]:
    """(query id, sentence, {doc: grade}) of one example sentence of ``synset``."""
    sentence = synset.examples[example]
    grades = {synset.synset_id: 2}
    for parent in synset.hypernyms:
        if parent in by_id:
            grades.setdefault(parent, 1)
    for word in _words_used(synset, sentence):
        for other in senses[word]:
            grades.setdefault(other, 0)
    return f"{synset.synset_id}-x{example}", sentence, grades


def _words_used(synset: Synset, sentence: str) -> list[str]:
    """The synset's words that the sentence holds as whole words (lower-cased)."""
    text = sentence.lower()
    return [word for word in dict.fromkeys(lemma.lower() for lemma in synset.lemmas)
            if re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text)]


def _write_jsonl(path: Path, records: list[dict[str, str]]) -> None:
    _write_text(path, "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records))


def _write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
