"""Evaluation datasets: the Dataset type, file formats and the built-in real datasets."""

from adaptemb.datasets.base import Dataset
from adaptemb.datasets.builtin import (
    BUILTIN_DATASETS,
    build_builtin,
    builtin_path,
    cache_dir,
    is_available,
    load_builtin,
)
from adaptemb.datasets.formats import (
    dataset_arrays,
    dataset_from_arrays,
    holdout_split,
    read_dataset,
    save_dataset,
)
from adaptemb.datasets.loading import load_dataset
from adaptemb.ranking import exact_top_k

__all__ = [
    "BUILTIN_DATASETS",
    "Dataset",
    "build_builtin",
    "builtin_path",
    "cache_dir",
    "dataset_arrays",
    "dataset_from_arrays",
    "exact_top_k",
    "holdout_split",
    "is_available",
    "load_builtin",
    "load_dataset",
    "read_dataset",
    "save_dataset",
]
