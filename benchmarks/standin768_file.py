"""Write the 768-d stand-in's benchmark subset as a dataset file for ``adaptemb bench --data FILE``.

Usage::

    python benchmarks/standin768_file.py [--out /tmp/standin768-5000.npz] [--docs 5000] [--dev 500]

The subset is the one every benchmark uses (``subset(wordnet_examples_768(), DOCS, 1000, 0)``: 1,000 evaluated
queries); ``dev_queries`` are ``--dev`` seeded queries of the other 4,000 (real queries, never evaluated, whose
own definitions may lie outside the subset): the sample the bench's fits judge their choices by (issue 46).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from adaptemb.datasets import save_dataset

sys.path.insert(0, str(Path(__file__).parent))
from faiss_parity import subset
from standin768 import wordnet_examples_768


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/standin768-5000.npz"))
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--dev", type=int, default=500)
    args = parser.parse_args()
    full = wordnet_examples_768()
    data = subset(full, args.docs, 1000, 0)
    chosen = np.sort(np.random.default_rng(0).choice(len(full.queries), 1000, replace=False))  # subset's draw
    others = np.setdiff1d(np.arange(len(full.queries)), chosen)
    dev = np.sort(np.random.default_rng((0, args.dev)).choice(others, args.dev, replace=False))
    data.dev_queries = np.ascontiguousarray(full.queries[dev], dtype=np.float32)
    assert not any((data.queries == row).all(axis=1).any() for row in data.dev_queries[:50])
    print(f"wrote {save_dataset(data, args.out)}")


if __name__ == "__main__":
    main()
