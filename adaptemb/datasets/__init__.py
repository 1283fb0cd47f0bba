"""Evaluation datasets: the Dataset type, file formats and the built-in real datasets."""

from adaptemb.datasets.base import Dataset

__all__ = ["Dataset"]
