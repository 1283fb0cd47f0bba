"""Search through each method's own index at scale, on 768-d real-text embeddings: the index issue's bar.

Usage::

    python benchmarks/index_bar.py [--rows 500000] [--baselines flat] [--check 1000] [--out DIR]

Builds (once) the 768-d ``wordnet-examples`` stand-in (``standin768.py``: 32,663 WordNet definitions,
5,000 example-sentence queries) and runs::

    adaptemb bench --data <it> --methods csr,bsa --budgets 32 --scale ROWS --scale-baselines BASELINES \\
                   --scale-check CHECK --out DIR

so csr (defaults: k = 32, asymmetric scoring) and bsa (defaults: natural mode, asymmetric cosine) are fitted
on the corpus, every one of the ROWS rows (corpus + noise-perturbed copies) is encoded, and each method is
searched through its own index beside faiss ``IndexFlatIP`` on the 768-d float32 rows, in the same run, with
the latency protocol (batches of 512 queries). ``--scale-check`` compares each index's top-10 with brute
force through the method's ``score()`` on CHECK queries. The report (``report.md``, ``results.json`` with the
machine) goes to DIR (default ``benchmarks/results/index-500k-768``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from adaptemb.datasets.builtin import cache_dir

sys.path.insert(0, str(Path(__file__).parent))
from standin768 import wordnet_examples_768  # a sibling benchmark module (benchmarks/ is on sys.path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--baselines", default="flat", help="faiss baselines beside the methods: flat,hnsw,ivfpq")
    parser.add_argument("--check", type=int, default=1000, help="queries checked against brute force through score()")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "index-500k-768")
    args = parser.parse_args()
    wordnet_examples_768()  # built and cached on first use
    data = cache_dir() / "datasets" / "wordnet-examples-768.npz"
    command = [sys.executable, "-m", "adaptemb", "bench", "--data", str(data), "--methods", "csr,bsa", "--budgets", "32",
               "--scale", str(args.rows), "--scale-baselines", args.baselines, "--scale-check", str(args.check),
               "--out", str(args.out)]
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True)


if __name__ == "__main__":
    main()
