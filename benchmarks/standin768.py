"""A 768-d real-text stand-in for the benchmarks (no 768-d text model installs offline).

Embeddings: the mean-pooled hidden states of layers 3 and 6 of the bundled all-MiniLM-L6-v2, each
L2-normalised, concatenated and normalised again (768-d). Two data sets are built from WordNet 3.0 and
cached next to the built-in datasets (``adaptemb.datasets.builtin.cache_dir()``):

* ``definitions_768()``: 40,000 distinct WordNet definitions, (40000, 768) float32 (~15 min on 2 cores);
* ``wordnet_examples_768()``: the ``wordnet-examples`` task (corpus = every definition with an example,
  5,000 example-sentence queries, gold = the example's own definition, lexicographer-class labels), embedded
  with the stand-in encoder (~15 min on 2 cores).

Usage (builds both caches): ``python benchmarks/standin768.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

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
    path = cache_dir() / "datasets" / "wordnet-examples-768.npz"
    if path.is_file():
        return load_dataset(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from adaptemb.datasets.wordnet import corpus_synsets, example_queries, read_wordnet

    corpus = corpus_synsets(read_wordnet())
    texts, gold = example_queries(corpus, EXAMPLE_QUERIES)
    labels = np.array([synset.lexname_id for synset in corpus], dtype=np.int64)
    dataset = Dataset.from_gold(
        "wordnet-examples-768",
        minilm_two_layer_embeddings([synset.definition for synset in corpus]),
        minilm_two_layer_embeddings(texts),
        gold,
        labels=labels,
        query_labels=labels[gold],
        description="WordNet example sentence -> definition, 768-d stand-in (MiniLM layers 3 + 6, mean-pooled)",
        metadata={"source": "WordNet 3.0 (Debian wordnet-base)", "model": "all-MiniLM-L6-v2 layers 3+6"},
    )
    save_dataset(dataset, path)
    return dataset


if __name__ == "__main__":
    print("definitions", definitions_768().shape)
    data = wordnet_examples_768()
    print(data.name, data.corpus.shape, data.queries.shape)
