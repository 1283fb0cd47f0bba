"""A retrieval task held as text (a BEIR folder, a JSONL file of texts), embedded once into a ``Dataset``.

``embed_task`` embeds the corpus and the queries with a text model (``--backbone``: a sentence-transformers or
transformers folder, or the bundled all-MiniLM-L6-v2), L2-normalised (inner product = cosine), on CUDA when
present, with a progress bar, and caches the embeddings in ``cache_dir`` (``adaptemb.datasets.embedding_cache``)
so a second run reads them back. A task without queries (a JSONL file) becomes a corpus-only dataset: held-out
rows are the queries, judged against their exact top-10 neighbours, as for a corpus of embeddings (format (c)).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from adaptemb.datasets.base import Dataset
from adaptemb.datasets.embedding_cache import (
    CacheKey,
    file_sha256,
    model_sha256,
    read_cache,
    texts_sha256,
    write_cache,
)
from adaptemb.datasets.formats import holdout_dataset
from adaptemb.encoders._common import ModelNotFoundError

if TYPE_CHECKING:
    from adaptemb.encoders.text import TextEncoder

Log = Callable[[str], None]


@dataclass
class TextTask:
    """Texts and their relevance, before embedding. ``query_texts`` None: a corpus-only task (see the module
    docstring); ``files`` are the source files (their hashes key the embedding cache)."""

    name: str
    corpus_texts: list[str]
    corpus_ids: list[str]
    files: list[Path]
    query_texts: list[str] | None = None
    query_ids: list[str] | None = None
    qrels: sp.csr_matrix | None = None
    judged: np.ndarray | None = None
    labels: np.ndarray | None = None
    description: str = ""
    notes: list[str] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)


def resolve_backbone(backbone: str | Path | None) -> Path:
    """The folder of a text model: ``None`` or ``all-MiniLM-L6-v2`` is the bundled MiniLM, else an existing folder
    (its files are hashed to key the cache); anything else is a clear ``ModelNotFoundError``."""
    from adaptemb.encoders.text import MINILM_NAMES, bundled_minilm_path

    if backbone is None or str(backbone) in MINILM_NAMES:
        return bundled_minilm_path()
    folder = Path(str(backbone)).expanduser()
    if folder.is_dir():
        return folder
    what = "is a file, not a model folder" if folder.exists() else "does not exist"
    raise ModelNotFoundError(
        f"text model {str(backbone)!r} {what}: --backbone takes a sentence-transformers or transformers model folder, "
        "or all-MiniLM-L6-v2 for the bundled one; nothing is downloaded")


def embed_task(task: TextTask, *, backbone: str | Path | None = None, cache_dir: str | Path | None = None,
               device: str | None = None, progress: bool = True, seed: int = 0, log: Log | None = None) -> Dataset:
    """Embed ``task`` (see the module docstring) and return the ``Dataset`` the bench runs on; ``cache_dir`` None:
    no cache. ``log`` gets one line per step (embedding, cache read or replaced)."""
    folder = resolve_backbone(backbone)
    embedder = _Embedder(folder, model_sha256(folder), device, progress, log or (lambda _line: None), task.notes)
    files = {path.name: file_sha256(path) for path in task.files}
    cache = None if cache_dir is None else Path(cache_dir)
    corpus = embedder.embed(task.corpus_texts, "corpus", files, cache and cache / "corpus.npz")
    metadata = {**task.metadata, "model": str(folder), "model_sha256": embedder.sha256}
    if task.query_texts is None:
        return _corpus_only(task, corpus, seed, metadata)
    split = task.metadata.get("split", "queries")
    queries = embedder.embed(task.query_texts, "query", files, cache and cache / f"queries-{split}.npz")
    assert task.qrels is not None
    return Dataset(task.name, corpus, queries, task.qrels, labels=task.labels, description=task.description,
                   metadata=metadata, query_ids=np.array(task.query_ids), corpus_ids=np.array(task.corpus_ids),
                   judged=task.judged, notes=list(task.notes))


def _corpus_only(task: TextTask, corpus: np.ndarray, seed: int, metadata: dict[str, str]) -> Dataset:
    """Held-out rows become the queries (``holdout_dataset``); ids follow their rows."""
    dataset = holdout_dataset(corpus, name=task.name, labels=task.labels, seed=seed, ids=np.array(task.corpus_ids))
    return dataclasses.replace(dataset, description=f"{task.description}; {dataset.description}",
                               metadata={**dataset.metadata, **metadata}, notes=list(task.notes))


@dataclass
class _Embedder:
    """Embeds texts with one model, loaded on first need, through the cache."""

    folder: Path
    sha256: str
    device: str | None
    progress: bool
    log: Log
    notes: list[str]
    encoder: TextEncoder | None = None

    def embed(self, texts: Sequence[str], what: str, files: dict[str, str], cache: Path | None) -> np.ndarray:
        key = CacheKey(str(self.folder), self.sha256, texts_sha256(texts), len(texts), files)
        if cache is not None:
            cached, why = read_cache(cache, key)
            if cached is not None:
                self._say(f"{what} embeddings: read {len(texts):,} from the cache {cache}")
                return cached
            if why:
                self._say(f"{what} embeddings: {why}")
        encoder = self._encoder()
        self.log(f"embedding {len(texts):,} {what} texts with {self.folder.name} on {encoder.device}")
        start = time.perf_counter()
        batch = 256 if str(encoder.device).startswith("cuda") else 64
        embeddings = encoder.encode(texts, batch_size=batch, normalize=True, progress=self.progress)
        seconds = time.perf_counter() - start
        self._say(f"{what} embeddings: {len(texts):,} texts embedded in {seconds:.1f} s on {encoder.device}"
                  + (f", cached at {cache}" if cache is not None else ""))
        if cache is not None:
            write_cache(cache, key, embeddings, {"seconds": round(seconds, 3), "device": str(encoder.device)})
        return embeddings

    def _encoder(self) -> TextEncoder:
        """The text encoder, loaded on first need (a run that reads every embedding from the cache loads none)."""
        from adaptemb.encoders.text import load_text_encoder

        if self.encoder is None:
            start = time.perf_counter()
            with _loading_bars(self.progress):
                self.encoder = load_text_encoder(self.folder, device=self.device)
            self.log(f"loaded {self.folder} in {time.perf_counter() - start:.1f} s")
        return self.encoder

    def _say(self, line: str) -> None:
        self.notes.append(line)
        self.log(line)


@contextlib.contextmanager
def _loading_bars(shown: bool) -> Iterator[None]:
    """transformers' weight-loading bar, off unless ``shown`` (restored afterwards)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    if not shown:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
