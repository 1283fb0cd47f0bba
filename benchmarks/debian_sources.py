"""Getting sentences out of Debian: download, extract, read, merge (the first stages of ``debian_corpus.py``).

Every output is written atomically and a stage whose output exists is skipped, so a killed run resumes.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from debian_formats import description_paragraphs
from debian_text import Deduplicator, package_sentences, sentences_of

from adaptemb.serialization import atomic_write

DESCRIPTIONS = "descriptions"


def _run(command: list[str], cwd: Path | None = None) -> str:
    """Run a command; a failure raises one line naming the command and its last line of error output."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["(no output)"]
        raise RuntimeError(f"`{' '.join(command)}` failed ({done.returncode}): {lines[-1]}")
    return done.stdout


def deb_version(deb: Path) -> str:
    """The version in a ``NAME_VERSION_ARCH.deb`` file name (``%3a`` unquoted to the epoch's colon)."""
    return urllib.parse.unquote(deb.name.split("_")[1])


def download_packages(packages: list[str], out: Path) -> dict[str, Path]:
    """``apt-get download`` each package not yet in ``out/debs`` (into a scratch folder first, then moved)."""
    debs_dir = out / "debs"
    debs_dir.mkdir(parents=True, exist_ok=True)
    found: dict[str, Path] = {}
    for package in packages:
        if package == DESCRIPTIONS:
            continue
        existing = sorted(debs_dir.glob(f"{package}_*.deb"))
        if not existing:
            with tempfile.TemporaryDirectory(dir=debs_dir, prefix=".download-") as scratch:
                try:
                    _run(["apt-get", "download", "-q", package], cwd=Path(scratch))
                except RuntimeError as err:
                    raise SystemExit(f"cannot download Debian package {package!r}: {err}; check the name with "
                                     f"`apt-cache policy {package}` (after `apt-get update`) or leave it out of "
                                     "--packages") from err
                for deb in Path(scratch).glob("*.deb"):
                    os.replace(deb, debs_dir / deb.name)
            existing = sorted(debs_dir.glob(f"{package}_*.deb"))
        found[package] = existing[-1]
    return found


def _write_sentences(path: Path, sentences: list[str]) -> None:
    def write(tmp: Path) -> None:
        with gzip.open(tmp, "wt", encoding="utf-8") as handle:
            handle.writelines(sentence + "\n" for sentence in sentences)

    atomic_write(path, write)


def _read_sentences(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def _package_job(package: str, deb: str, out: str) -> dict[str, Any]:
    """Extract one .deb into a scratch folder, read its sentences, write them; the scratch folder is removed."""
    start = time.perf_counter()
    target = Path(out) / "sentences"
    scratch = Path(tempfile.mkdtemp(dir=out, prefix=f".extract-{package}-"))
    try:
        _run(["dpkg-deb", "-x", deb, str(scratch)])
        seen = Deduplicator()
        sentences = list(package_sentences(scratch, seen))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _write_sentences(target / f"{package}.txt.gz", sentences)
    return {"package": package, "version": deb_version(Path(deb)), "deb": Path(deb).name,
            "deb_bytes": Path(deb).stat().st_size, "sentences": len(sentences),
            "duplicates_in_package": seen.offered - len(sentences),
            "seconds": round(time.perf_counter() - start, 1)}


def _descriptions_job(out: str) -> dict[str, Any]:
    """The long descriptions of Debian's ``Translation-en`` indexes, fetched by a private ``apt-get update``."""
    start = time.perf_counter()
    lists = Path(out) / "apt-lists"
    (lists / "partial").mkdir(parents=True, exist_ok=True)
    options = ["-o", "Acquire::Languages=en", "-o", f"Dir::State::Lists={lists}",
               "-o", f"Dir::Cache={Path(out) / 'apt-cache'}"]
    if os.geteuid() == 0:
        options += ["-o", "APT::Sandbox::User=root"]
    _run(["apt-get", "update", "-q", *options])
    files = _run(["apt-get", "indextargets", *options, "--format", "$(FILENAME)",
                  "Identifier: Translations"]).split()
    if not files:
        raise RuntimeError("apt-get update fetched no Translation-en index; is a Debian mirror reachable?")
    seen, sentences = Deduplicator(), []
    for file in sorted(files):
        text = _run(["/usr/lib/apt/apt-helper", "cat-file", file])
        sentences.extend(sentence for sentence in sentences_of(description_paragraphs(text)) if seen.is_new(sentence))
    _write_sentences(Path(out) / "sentences" / f"{DESCRIPTIONS}.txt.gz", sentences)
    return {"package": DESCRIPTIONS, "version": "+".join(sorted(Path(file).name.split("_")[3] for file in files)),
            "indexes": [Path(file).name for file in sorted(files)], "sentences": len(sentences),
            "duplicates_in_package": seen.offered - len(sentences),
            "seconds": round(time.perf_counter() - start, 1)}


def build_sentences(packages: list[str], debs: dict[str, Path], out: Path, jobs: int = 2) -> dict[str, Any]:
    """Each package's sentences in ``out/sentences`` (skipped where already there); their records by package."""
    target = out / "sentences"
    target.mkdir(parents=True, exist_ok=True)
    todo = [package for package in packages if not (target / f"{package}.json").is_file()]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {package: (pool.submit(_descriptions_job, str(out)) if package == DESCRIPTIONS
                             else pool.submit(_package_job, package, str(debs[package]), str(out)))
                   for package in todo}
        for package, future in futures.items():
            record = future.result()
            atomic_write(target / f"{package}.json", lambda tmp, r=record: tmp.write_text(json.dumps(r) + "\n"))
            print(f"{package}: {record['sentences']:,} sentences in {record['seconds']} s", flush=True)
    if todo:
        stage = out / "stages" / "sentences.json"
        atomic_write(stage, lambda tmp: tmp.write_text(json.dumps(
            {"packages_read": len(todo), "seconds": round(time.perf_counter() - start, 1), "jobs": jobs,
             "load_after": [round(x, 2) for x in os.getloadavg()]}) + "\n"))
    return {package: json.loads((target / f"{package}.json").read_text()) for package in packages}


def merge_sentences(packages: list[str], out: Path, target_rows: int, seed: int) -> tuple[list[str], dict[str, Any]]:
    """All packages' sentences deduplicated (first package wins), shuffled with ``seed``, cut to ``target_rows``,
    in ``out/sentences.parquet``; returns the texts in row order and the counts."""
    path = out / "sentences.parquet"
    summary_path = out / "stages" / "merge.json"
    settings = {"packages": list(packages), "target_rows": target_rows, "seed": seed}
    if path.is_file() and summary_path.is_file():
        summary = json.loads(summary_path.read_text())
        if {key: summary.get(key) for key in settings} != settings:
            raise SystemExit(f"{path} was built with other settings ({ {k: summary.get(k) for k in settings} }); "
                             f"delete it and {summary_path} to rebuild it, or use another --out")
        return pq.read_table(path, columns=["text"]).column("text").to_pylist(), summary
    seen, rows, read = Deduplicator(), [], {}
    for package in packages:
        sentences = _read_sentences(out / "sentences" / f"{package}.txt.gz")
        read[package] = len(sentences)
        rows.extend((sentence, package) for sentence in sentences if seen.is_new(sentence))
    distinct = len(rows)
    random.Random(seed).shuffle(rows)
    rows = rows[:target_rows]
    kept: dict[str, int] = {package: 0 for package in packages}
    for _, package in rows:
        kept[package] += 1
    table = pa.table({"id": pa.array(range(len(rows)), pa.int64()), "text": [text for text, _ in rows],
                      "source": pa.array([package for _, package in rows]).dictionary_encode()})
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))
    summary = {**settings, "sentences_read": sum(read.values()), "distinct": distinct,
               "duplicates_across_packages": sum(read.values()) - distinct, "rows": len(rows),
               "per_source_read": read, "per_source_kept": kept}
    atomic_write(summary_path, lambda tmp: tmp.write_text(json.dumps(summary, indent=1) + "\n"))
    if distinct < target_rows:
        print(f"warning: only {distinct:,} distinct sentences for --target-rows {target_rows:,}", flush=True)
    return [text for text, _ in rows], summary
