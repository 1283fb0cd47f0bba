"""``load_dataset``: a dataset file, a folder, or a built-in name (built into the cache on first use)."""

from __future__ import annotations

from pathlib import Path

from adaptemb.datasets.base import Dataset
from adaptemb.datasets.builtin import BUILTIN_DATASETS, load_builtin, unknown_dataset_message
from adaptemb.datasets.formats import read_dataset


def load_dataset(
    source: str | Path, *, name: str | None = None, seed: int = 0, progress: bool = True
) -> Dataset:
    """Load a dataset from a file, a folder or a built-in name (built on first use).

    ``seed`` picks the held-out queries of a corpus-only source (format (c)); ``progress`` shows
    the progress bar of a built-in dataset's first build.
    """
    path = Path(source).expanduser()
    if path.exists():
        return read_dataset(path, name=name, seed=seed)
    if str(source) in BUILTIN_DATASETS:
        dataset = load_builtin(str(source), progress=progress)
        dataset.name = name or dataset.name
        return dataset
    raise FileNotFoundError(unknown_dataset_message(str(source)))
