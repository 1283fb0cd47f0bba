"""A 768-d real-text stand-in for the benchmarks (no 768-d text model installs offline).

Embeddings: the mean-pooled hidden states of layers 3 and 6 of the bundled all-MiniLM-L6-v2, each
L2-normalised, concatenated and normalised again (768-d). Two data sets are built from WordNet 3.0 and
cached next to the built-in datasets (``adaptemb.datasets.builtin.cache_dir()``):

* ``definitions_768()``: 40,000 distinct WordNet definitions, (40000, 768) float32 (~15 min on 2 cores);
* ``wordnet_examples_768()``: the ``wordnet-examples`` task (corpus = every definition with an example,
  5,000 example-sentence queries, gold = the example's own definition, lexicographer-class labels), embedded
  with the stand-in encoder (~15 min on 2 cores);
* ``wordnet_titled(768)`` / ``wordnet_titled(384)``: the same queries against titled documents
  (``"lemma, lemma: definition"``), with the stand-in or with all-MiniLM-L6-v2's own sentence embedding.

Usage (builds both caches): ``python benchmarks/standin768.py``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from adaptemb.datasets import Dataset, load_dataset, save_dataset
from adaptemb.datasets.builtin import cache_dir
from adaptemb.serialization import atomic_write

PROXY_TEXTS = 40_000
PROXY_LAYERS = (3, 6)
EXAMPLE_QUERIES = 5000


def minilm_two_layer_embeddings(texts: list[str], batch_size: int = 256) -> np.ndarray:
    """768-d embeddings: mean-pooled layer-3 and layer-6 states of all-MiniLM-L6-v2, normalised, concatenated."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModel, AutoTokenizer

    from adaptemb.encoders.text import bundled_minilm_path

    path = str(bundled_minilm_path())
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    parts = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(texts[start : start + batch_size], padding=True, truncation=True, max_length=128,
                              return_tensors="pt")
            states = model(**batch, output_hidden_states=True).hidden_states
            mask = batch["attention_mask"][..., None].float()
            pooled = [F.normalize((states[layer] * mask).sum(1) / mask.sum(1), dim=1) for layer in PROXY_LAYERS]
            parts.append(F.normalize(torch.cat(pooled, dim=1), dim=1).numpy())
    return np.concatenate(parts).astype(np.float32)


def definitions_768() -> np.ndarray:
    """40,000 distinct WordNet definitions embedded with the stand-in (cached)."""
    path = cache_dir() / "datasets" / "wordnet-definitions-minilm-l3l6-768.npy"
    if path.is_file():
        return np.load(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from adaptemb.datasets.wordnet import read_wordnet

    definitions = list(dict.fromkeys(s.definition for s in read_wordnet() if s.definition))
    order = np.random.default_rng(0).permutation(len(definitions))[:PROXY_TEXTS]
    embeddings = minilm_two_layer_embeddings([definitions[i] for i in order])

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:  # a handle: np.save would append ".npy" to the temporary name
            np.save(handle, embeddings)

    atomic_write(path, write)
    return embeddings


def wordnet_examples_768() -> Dataset:
    """The ``wordnet-examples`` retrieval task embedded with the 768-d stand-in (cached)."""
    return _example_task("wordnet-examples-768", lambda synset: synset.definition, minilm_two_layer_embeddings,
                         "WordNet example sentence -> definition, 768-d stand-in (MiniLM layers 3 + 6, mean-pooled)",
                         "all-MiniLM-L6-v2 layers 3+6")


def wordnet_titled(dim: int) -> Dataset:
    """Example sentence -> its synset's *titled* document ``"lemma, lemma: definition"`` (a document with its
    title, as search corpora have), embedded with the 768-d stand-in (``dim=768``) or with the all-MiniLM-L6-v2
    sentence embedding itself (``dim=384``); cached. The lemmas make this task far easier than ``wordnet-examples``
    (full NDCG@10 about 0.57 instead of 0.22 at 768-d), closer to the regime of a real retrieval corpus."""
    if dim == 768:
        embed, model = minilm_two_layer_embeddings, "all-MiniLM-L6-v2 layers 3+6"
    elif dim == 384:
        embed, model = _minilm_sentence_embeddings, "all-MiniLM-L6-v2"
    else:
        raise ValueError(f"dim must be 768 (the stand-in) or 384 (all-MiniLM-L6-v2); got {dim}")
    return _example_task(f"wordnet-titled-{dim}", lambda synset: f"{', '.join(synset.lemmas)}: {synset.definition}",
                         embed, f"WordNet example sentence -> 'lemmas: definition', {dim}-d ({model})", model)


def _minilm_sentence_embeddings(texts: list[str]) -> np.ndarray:
    from adaptemb.encoders.text import load_text_encoder

    return load_text_encoder(None).encode(texts, batch_size=256, normalize=True, progress=False)


def _example_task(name: str, document: Callable[[Any], str], embed: Callable[[list[str]], np.ndarray],
                  description: str, model: str) -> Dataset:
    """The example-sentence queries of ``wordnet-examples`` against ``document(synset)`` texts (cached by name)."""
    path = cache_dir() / "datasets" / f"{name}.npz"
    if path.is_file():
        return load_dataset(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from adaptemb.datasets.wordnet import corpus_synsets, example_queries, read_wordnet

    corpus = corpus_synsets(read_wordnet())
    texts, gold = example_queries(corpus, EXAMPLE_QUERIES)
    labels = np.array([synset.lexname_id for synset in corpus], dtype=np.int64)
    dataset = Dataset.from_gold(
        name, embed([document(synset) for synset in corpus]), embed(texts), gold, labels=labels,
        query_labels=labels[gold], description=description,
        metadata={"source": "WordNet 3.0 (Debian wordnet-base)", "model": model},
    )
    save_dataset(dataset, path)
    return dataset


if __name__ == "__main__":
    print("definitions", definitions_768().shape)
    data = wordnet_examples_768()
    print(data.name, data.corpus.shape, data.queries.shape)
