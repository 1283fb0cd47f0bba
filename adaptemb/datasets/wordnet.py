"""WordNet 3.0 retrieval tasks, read from the Debian ``wordnet-base`` data files.

Corpus: the definitions of the synsets that have at least one example sentence (32,923 synsets in
WordNet 3.0; a definition shared by two synsets is kept once), labelled with the synset's
lexicographer class (45 classes, ``LEXNAMES``). Two query sets share that corpus:

* ``wordnet-examples``: one example sentence per sampled synset; gold = that synset's definition;
  ``query_labels`` = its lexicographer class.
* ``wordnet-lemmas``: one lemma (the synset's first word, underscores as spaces) per sampled synset,
  deduplicated; relevant = every corpus definition of a synset holding that lemma (all senses,
  grade 1), so polysemous words have several relevant rows; no ``query_labels`` (the sense is open).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from adaptemb.datasets.base import Dataset
from adaptemb.serialization import existing_file

WORDNET_DIR = Path("/usr/share/wordnet")
POS_FILES = ("noun", "verb", "adj", "adv")
LEXNAMES: tuple[str, ...] = (
    "adj.all",
    "adj.pert",
    "adv.all",
    "noun.Tops",
    "noun.act",
    "noun.animal",
    "noun.artifact",
    "noun.attribute",
    "noun.body",
    "noun.cognition",
    "noun.communication",
    "noun.event",
    "noun.feeling",
    "noun.food",
    "noun.group",
    "noun.location",
    "noun.motive",
    "noun.object",
    "noun.person",
    "noun.phenomenon",
    "noun.plant",
    "noun.possession",
    "noun.process",
    "noun.quantity",
    "noun.relation",
    "noun.shape",
    "noun.state",
    "noun.substance",
    "noun.time",
    "verb.body",
    "verb.change",
    "verb.cognition",
    "verb.communication",
    "verb.competition",
    "verb.consumption",
    "verb.contact",
    "verb.creation",
    "verb.emotion",
    "verb.motion",
    "verb.perception",
    "verb.possession",
    "verb.social",
    "verb.stative",
    "verb.weather",
    "adj.ppl",
)
TASKS = ("examples", "lemmas")
_EXAMPLE = re.compile(r'"([^"]+)"')
_SYNSET_HEAD = re.compile(r"^\d{8} \d{2} [nvasr] [0-9a-f]{2} ")
_ADJ_MARKER = re.compile(r"\((?:a|p|ip)\)$")


@dataclass(frozen=True)
class Synset:
    """One WordNet synset: where it is, its words, its definition and its example sentences."""

    offset: int
    pos: str
    lexname_id: int
    lemmas: tuple[str, ...]
    definition: str
    examples: tuple[str, ...]
    hypernyms: tuple[str, ...] = ()
    """``synset_id`` of each hypernym (``@``) and instance hypernym (``@i``) of this synset."""

    @property
    def lexname(self) -> str:
        return LEXNAMES[self.lexname_id]

    @property
    def synset_id(self) -> str:
        """``n02084071``: the file's part of speech (satellites ``s`` are in ``data.adj``: ``a``) and the offset."""
        return synset_id(self.pos, self.offset)


def synset_id(pos: str, offset: int) -> str:
    """A synset's id across the four data files: ``{n|v|a|r}{offset:08d}``."""
    return f"{'a' if pos == 's' else pos}{offset:08d}"


def parse_data_line(line: str) -> Synset:
    """Parse one synset line of a WordNet ``data.*`` file (the wndb(5) format)."""
    head, _, gloss = line.partition(" | ")
    fields = head.split()
    if not _SYNSET_HEAD.match(head):
        raise ValueError(f"not a WordNet synset line: {line[:60]!r}")
    word_count = int(fields[3], 16)
    words = fields[4 : 4 + 2 * word_count : 2]
    lemmas = tuple(_ADJ_MARKER.sub("", word).replace("_", " ") for word in words)
    definition = gloss.split('"', 1)[0].strip().rstrip(";").strip()
    examples = tuple(example.strip() for example in _EXAMPLE.findall(gloss) if example.strip())
    start = 5 + 2 * word_count  # after the words: the pointer count, then (symbol, offset, pos, source/target)
    pointers = [fields[start + 4 * i : start + 4 * i + 3] for i in range(int(fields[start - 1]))]
    hypernyms = tuple(synset_id(pos, int(offset)) for symbol, offset, pos in pointers if symbol in ("@", "@i"))
    return Synset(int(fields[0]), fields[2], int(fields[1]), lemmas, definition, examples, hypernyms)


def read_wordnet(folder: str | Path = WORDNET_DIR) -> list[Synset]:
    """Every synset of the four ``data.*`` files in ``folder``, in file order."""
    root = Path(folder)
    synsets: list[Synset] = []
    for pos in POS_FILES:
        path = root / f"data.{pos}"
        existing_file(path, f"WordNet data file {path} not found; install it with `apt-get install wordnet-base` "
                            "or point to a folder holding data.noun, data.verb, data.adj and data.adv")
        with open(path, encoding="utf-8", errors="replace") as handle:
            synsets.extend(parse_data_line(line) for line in handle if not line.startswith("  "))
    return synsets


def corpus_synsets(synsets: Sequence[Synset], limit: int | None = None, seed: int = 0) -> list[Synset]:
    """Synsets with a definition and an example, one per distinct definition; a seeded sample of ``limit``."""
    seen: set[str] = set()
    chosen = []
    for synset in synsets:
        if synset.definition and synset.examples and synset.definition not in seen:
            seen.add(synset.definition)
            chosen.append(synset)
    if limit is not None and limit < len(chosen):
        keep = np.sort(np.random.default_rng(seed).choice(len(chosen), size=limit, replace=False))
        chosen = [chosen[i] for i in keep]
    return chosen


def example_queries(corpus: Sequence[Synset], n_queries: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """``n_queries`` example sentences of distinct corpus synsets and the corpus row of each (gold)."""
    rng = np.random.default_rng(seed + 1)
    gold = np.sort(rng.choice(len(corpus), size=min(n_queries, len(corpus)), replace=False))
    texts = [corpus[row].examples[rng.integers(len(corpus[row].examples))] for row in gold]
    return texts, gold.astype(np.int64)


def lemma_queries(corpus: Sequence[Synset], n_queries: int, seed: int = 0) -> tuple[list[str], sp.csr_matrix]:
    """Distinct lemmas of sampled corpus synsets, each relevant to every corpus synset that holds it."""
    senses: dict[str, list[int]] = defaultdict(list)
    for row, synset in enumerate(corpus):
        for lemma in dict.fromkeys(lemma.lower() for lemma in synset.lemmas):
            senses[lemma].append(row)
    rng = np.random.default_rng(seed + 2)
    picked: dict[str, None] = {}  # insertion-ordered set
    for row in rng.permutation(len(corpus)):
        picked.setdefault(corpus[row].lemmas[0].lower())
        if len(picked) == n_queries:
            break
    texts = list(picked)
    rows = [query for query, lemma in enumerate(texts) for _ in senses[lemma]]
    cols = [col for lemma in texts for col in senses[lemma]]
    qrels = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(texts), len(corpus)))
    return texts, qrels


def build_wordnet(
    *,
    tasks: Sequence[str] = TASKS,
    limit: int | None = None,
    max_queries: int = 5000,
    model: str | Path | None = None,
    device: str | None = None,
    batch_size: int = 64,
    seed: int = 0,
    folder: str | Path = WORDNET_DIR,
    progress: bool = True,
) -> dict[str, Dataset]:
    """Embed the WordNet tasks; returns ``{"wordnet-examples": ..., "wordnet-lemmas": ...}`` (those asked for).

    ``limit`` caps the corpus (a seeded sample of synsets), ``max_queries`` each query set.
    """
    from adaptemb.encoders.text import load_text_encoder

    unknown = sorted(set(tasks) - set(TASKS))
    if unknown or not tasks:
        raise ValueError(f"unknown WordNet task(s) {unknown}; valid tasks: {', '.join(TASKS)}")
    corpus = corpus_synsets(read_wordnet(folder), limit, seed)
    encoder = load_text_encoder(model, device=device)

    def embed(texts: list[str]) -> np.ndarray:
        return encoder.encode(texts, batch_size=batch_size, normalize=True, progress=progress)

    corpus_emb = embed([synset.definition for synset in corpus])
    labels = np.array([synset.lexname_id for synset in corpus], dtype=np.int64)
    meta = {
        "source": "WordNet 3.0 (Debian wordnet-base)",
        "model": encoder.name,
        "seed": str(seed),
        "limit": str(limit),
        "max_queries": str(max_queries),
    }
    out: dict[str, Dataset] = {}
    if "examples" in tasks:
        texts, gold = example_queries(corpus, max_queries, seed)
        out["wordnet-examples"] = Dataset.from_gold(
            "wordnet-examples",
            corpus_emb,
            embed(texts),
            gold,
            labels=labels,
            query_labels=labels[gold],
            description="WordNet example sentence -> its synset's definition; labels: 45 lexicographer classes",
            metadata={**meta, "task": "examples"},
        )
    if "lemmas" in tasks:
        texts, qrels = lemma_queries(corpus, max_queries, seed)
        out["wordnet-lemmas"] = Dataset(
            "wordnet-lemmas",
            corpus_emb,
            embed(texts),
            qrels,
            labels=labels,
            description="WordNet lemma -> the definitions of all its senses; labels: 45 lexicographer classes",
            metadata={**meta, "task": "lemmas"},
        )
    return out
