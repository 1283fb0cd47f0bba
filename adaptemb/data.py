"""Reading an embedding matrix from a file, whole: ``.npy``, ``.npz``, ``.safetensors``, ``.parquet``,
``.fvecs``, ``.bvecs`` and ``.ivecs`` (the readers live in :mod:`adaptemb.io`, shared with streaming)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from adaptemb.io import SUPPORTED_SUFFIXES, open_rows

__all__ = ["SUPPORTED_SUFFIXES", "load_embeddings"]


def load_embeddings(path: str | Path, key: str | None = None) -> np.ndarray:
    """Read one embedding matrix from a file.

    ``key`` names the array in an ``.npz``/``.safetensors`` file or the vector column of a
    ``.parquet`` file; it may be omitted when the file holds exactly one candidate. The array is
    returned as stored (validation happens where it is used), except that bfloat16 is widened to
    float32 (exactly; numpy has no bfloat16).
    """
    return open_rows(path, key).read_all()
