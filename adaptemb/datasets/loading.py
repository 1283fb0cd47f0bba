"""``load_dataset``: a dataset file, a folder, a built-in name (built into the cache on first use), or text data
(a BEIR folder or a JSONL file of texts) embedded with a text model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from adaptemb.datasets.base import Dataset
from adaptemb.datasets.builtin import BUILTIN_DATASETS, load_builtin, unknown_dataset_message
from adaptemb.datasets.formats import read_dataset


def load_dataset(
    source: str | Path,
    *,
    name: str | None = None,
    seed: int = 0,
    progress: bool = True,
    backbone: str | Path | None = None,
    split: str | None = None,
    cache_dir: str | Path | None = None,
    device: str | None = None,
    log: Callable[[str], None] | None = None,
) -> Dataset:
    """Load a dataset from a file, a folder or a built-in name (built on first use), or embed text data.

    ``seed`` picks the held-out queries of a corpus-only source (format (c), a file of texts); ``progress`` shows
    the progress bars of a first build or of embedding. Text data (a BEIR folder, ``adaptemb.datasets.beir``; a
    ``.jsonl`` file of texts, ``adaptemb.datasets.texts``) is embedded with ``backbone`` (default: the bundled
    all-MiniLM-L6-v2) on ``device``; a BEIR folder is read at ``split`` (default ``test``); the embeddings are
    cached in ``cache_dir`` (None: not cached); ``log`` gets a line per embedding step.
    """
    path = Path(source).expanduser()
    task = _text_task(path, split, progress)
    if task is not None:
        from adaptemb.datasets.text_task import embed_task

        dataset = embed_task(task, backbone=backbone, cache_dir=cache_dir, device=device, progress=progress, seed=seed,
                             log=log)
        dataset.name = name or dataset.name
        return dataset
    for option, value in (("backbone", backbone), ("split", split)):
        if value is not None and (path.exists() or str(source) in BUILTIN_DATASETS):
            raise ValueError(f"{option} (--{option}) applies to text data (a BEIR folder or a .jsonl file of texts); "
                             f"{source} holds embeddings already")
    if path.exists():
        return read_dataset(path, name=name, seed=seed)
    if str(source) in BUILTIN_DATASETS:
        dataset = load_builtin(str(source), progress=progress)
        dataset.name = name or dataset.name
        return dataset
    raise FileNotFoundError(unknown_dataset_message(str(source)))


def _text_task(path: Path, split: str | None, progress: bool):  # type: ignore[no-untyped-def]
    """The ``TextTask`` of a BEIR folder or a file of texts, None for any other source."""
    if not (path.is_dir() or path.suffix.lower() == ".jsonl"):
        return None
    from adaptemb.datasets.beir import DEFAULT_SPLIT, is_beir_folder, read_beir
    from adaptemb.datasets.texts import is_text_file, read_texts

    if path.is_dir() and is_beir_folder(path):
        return read_beir(path, split or DEFAULT_SPLIT, progress=progress)
    if is_text_file(path):
        if split is not None:
            raise ValueError(f"split (--split) applies to a BEIR folder; {path} is a file of texts")
        return read_texts(path)
    return None
