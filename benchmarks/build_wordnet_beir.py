"""Write the WordNet BEIR folder (word-sense retrieval with graded judgements; docs/datasets.md, "The example").

Usage::

    python benchmarks/build_wordnet_beir.py OUT [--corpus 10000] [--test-queries 1000] [--dev-queries 300] [--seed 0]

Then ``adaptemb bench --data OUT --methods csr,svd,int8 --save-runs``. Reads Debian's ``wordnet-base``
(``/usr/share/wordnet``); nothing is downloaded.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from adaptemb.datasets.wordnet_beir import build_wordnet_beir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--corpus", type=int, default=10_000, help="documents (every judged synset, then a sample)")
    parser.add_argument("--test-queries", type=int, default=1_000)
    parser.add_argument("--dev-queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    folder = build_wordnet_beir(args.out, corpus_size=args.corpus, test_queries=args.test_queries,
                                dev_queries=args.dev_queries, seed=args.seed)
    print(f"wrote {folder}: corpus.jsonl, queries.jsonl, qrels/test.tsv, qrels/dev.tsv")


if __name__ == "__main__":
    main()
