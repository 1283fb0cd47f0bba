"""BSA against its issue's bar, by amount of fit data: held-out reconstruction, natural count, dead features.

Usage::

    python benchmarks/bsa_bar.py --data wordnet-384 --rows 5000,15000,29663
    python benchmarks/bsa_bar.py --data wordnet-768 --rows 5000,15000 -p code_dropout=0 -p epochs=20

BSA is fitted with its defaults except ``h = 8 d``, ``k = 64`` (the bar's setting) and any ``-p NAME=VALUE``
overrides, on the first ``n`` rows of a seeded permutation; the last 3,000 rows of that permutation are
never fitted on and are where reconstruction and the natural count are measured. Dead features are
those that never fire (natural mode) on the fit rows, as the fit report counts them.

Data:

* ``wordnet-384``: the built-in ``wordnet-examples`` corpus (32,663 WordNet glosses, all-MiniLM-L6-v2).
* ``wordnet-768``: a 768-d real-text stand-in (no 768-d text model is installable offline): the mean-pooled
  hidden states of layers 3 and 6 of the bundled all-MiniLM-L6-v2, each L2-normalised, concatenated, for
  40,000 distinct WordNet definitions; built once (~15 min on 2 cores) and cached next to the built-in
  datasets.
* a ``.npy`` path: any (n, d) float32 embeddings.

Results go to ``<out>/bsa_bar_<data>.json`` (one record per run appended, with the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import adaptemb
from adaptemb.cli.models import parse_params
from adaptemb.datasets import load_dataset
from adaptemb.datasets.builtin import cache_dir
from adaptemb.evaluate.machine import machine_info
from adaptemb.serialization import atomic_write

HELD_OUT = 3000
PROXY_TEXTS = 40_000
PROXY_LAYERS = (3, 6)


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


def wordnet_768() -> np.ndarray:
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


def load_rows(name: str) -> np.ndarray:
    if name == "wordnet-384":
        return np.asarray(load_dataset("wordnet-examples").corpus, dtype=np.float32)
    if name == "wordnet-768":
        return wordnet_768()
    return np.load(name).astype(np.float32, copy=False)


@torch.no_grad()
def held_out_measures(compressor: adaptemb.Compressor, held: np.ndarray) -> dict[str, float]:
    """Natural-mode reconstruction cosine distance and active count on rows the fit never saw."""
    codes = compressor.encode(held)
    reconstruction = torch.as_tensor(np.asarray(compressor.decode(codes), dtype=np.float32))
    distance = adaptemb.cosine_distance(reconstruction, torch.from_numpy(held))
    counts = codes.active_counts()
    return {"reconstruction_cosine_distance": round(float(distance), 4),
            "active_mean": round(float(counts.mean()), 2), "active_std": round(float(counts.std()), 2)}


def run(rows: np.ndarray, n: int, overrides: dict[str, object], seed: int) -> dict[str, object]:
    order = np.random.default_rng(seed).permutation(len(rows))
    if n + HELD_OUT > len(rows):
        raise SystemExit(f"{n} fit rows + {HELD_OUT} held-out rows > {len(rows)} rows in the data")
    fit, held = rows[order[:n]], rows[order[-HELD_OUT:]]
    d = rows.shape[1]
    started = time.perf_counter()
    compressor = adaptemb.fit(fit, method="bsa", h=8 * d, k=64, seed=seed, progress=False, **overrides)
    seconds = time.perf_counter() - started
    report = compressor.fit_report
    return {"fit_rows": n, "dim": d, "h": 8 * d, "k": 64, "seed": seed, "overrides": overrides,
            "fit_seconds": round(seconds, 1), "epochs_run": report["epochs"],
            "dead_fraction": round(report["dead_fraction"], 5), **held_out_measures(compressor, held)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="wordnet-384", help="wordnet-384, wordnet-768 or an (n, d) .npy path")
    parser.add_argument("--rows", default="5000,15000", help="comma-separated fit sizes")
    parser.add_argument("-p", "--param", action="append", default=[], help="BSA config override NAME=VALUE (value read as JSON when it parses)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    rows = load_rows(args.data)
    overrides = parse_params(args.param)
    if {"h", "k"} & overrides.keys():
        raise SystemExit("h and k are fixed by the bar (h = 8 d, k = 64); -p overrides any other BSA parameter")
    label = Path(args.data).stem if args.data.endswith(".npy") else args.data
    out = args.out / f"bsa_bar_{label}.json"
    records = json.loads(out.read_text()) if out.is_file() else []
    for n in (int(size) for size in args.rows.split(",")):
        machine = machine_info()
        record = {**run(rows, n, overrides, args.seed), "data": label, "machine": machine}
        print(json.dumps({k: v for k, v in record.items() if k != "machine"}), flush=True)
        records.append(record)
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write(out, lambda tmp: tmp.write_text(json.dumps(records, indent=1) + "\n"))


if __name__ == "__main__":
    main()
