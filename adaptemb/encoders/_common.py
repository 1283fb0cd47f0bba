"""Shared pieces of the encoders: device choice, batching, normalisation and the offline-model error."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

import numpy as np

from adaptemb.errors import AdaptembError

T = TypeVar("T")


class ModelNotFoundError(AdaptembError, FileNotFoundError):
    """A model that is neither a local path nor available without the internet."""


def offline_hint(model: str, err: BaseException | None = None) -> ModelNotFoundError:
    """The error to raise when ``model`` cannot be loaded from local files."""
    cause = (
        f" ({type(err).__name__}: {str(err).splitlines()[0][:200]})" if err is not None and str(err) else ""
    )
    return ModelNotFoundError(
        f"cannot load model {model!r} from local files{cause}; adaptemb never downloads weights: "
        "give a local path (a folder or weights file) or install a package that bundles the model"
    )


def batched(items: Sequence[T], batch_size: int) -> Iterator[Sequence[T]]:
    """Consecutive slices of ``items`` of at most ``batch_size`` elements."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer; got {batch_size}")
    for start in range(0, len(items), batch_size):
        yield items[start : start + batch_size]


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, np.finfo(x.dtype).tiny)
