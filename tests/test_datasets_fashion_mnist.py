"""Fashion-MNIST: the IDX reader by hand, same-class relevance by hand, a tiny real build."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from adaptemb.datasets.fashion_mnist import (
    FASHION_MNIST_DIR,
    read_fashion_mnist,
    read_idx,
    same_class_neighbours,
)

needs_data = pytest.mark.skipif(not FASHION_MNIST_DIR.is_dir(), reason="dataset-fashion-mnist not installed")


def test_idx_reader_by_hand(tmp_path: Path) -> None:
    header = bytes([0, 0, 0x08, 3]) + (2).to_bytes(4, "big") + (2).to_bytes(4, "big") + (3).to_bytes(4, "big")
    (tmp_path / "x.idx").write_bytes(header + bytes(range(12)))
    np.testing.assert_array_equal(
        read_idx(tmp_path / "x.idx"), np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    )
    ints = (
        bytes([0, 0, 0x0C, 1])
        + (2).to_bytes(4, "big")
        + (-5).to_bytes(4, "big", signed=True)
        + (7).to_bytes(4, "big")
    )
    with gzip.open(tmp_path / "y.idx.gz", "wb") as handle:
        handle.write(ints)
    np.testing.assert_array_equal(read_idx(tmp_path / "y.idx.gz"), [-5, 7])
    (tmp_path / "bad.idx").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(tmp_path / "bad.idx")
    (tmp_path / "short.idx").write_bytes(header + bytes(5))
    with pytest.raises(ValueError, match="promises 28 bytes"):
        read_idx(tmp_path / "short.idx")


@needs_data
def test_reads_debians_files() -> None:
    images, labels = read_fashion_mnist("test")
    assert images.shape == (10_000, 28, 28) and images.dtype == np.uint8
    assert labels[:5].tolist() == [9, 2, 1, 1, 6]  # ankle boot, pullover, trouser, trouser, shirt
    assert np.bincount(labels).tolist() == [1000] * 10
    with pytest.raises(ValueError, match="valid: train, test"):
        read_fashion_mnist("val")


def test_same_class_neighbours_by_hand() -> None:
    corpus = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.5, 0.5]], dtype=np.float32)
    labels = np.array([0, 1, 0, 0])
    queries = np.array([[1.0, 0.05]], dtype=np.float32)
    # scores: 1.0, 0.905, 0.05, 0.525 -> top-3 rows 0, 1, 3; same class (0) among them: rows 0 and 3
    qrels = same_class_neighbours(queries, corpus, np.array([0]), labels, depth=3)
    assert qrels.toarray().tolist() == [[1, 0, 0, 1]]
