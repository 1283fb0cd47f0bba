"""``adaptemb datasets list | info | build``, including one-line errors with exit code 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from adaptemb.cli import app  # importing the package registers every command
from adaptemb.datasets import load_dataset
from adaptemb.datasets.fashion_mnist import FASHION_MNIST_DIR, read_fashion_mnist

runner = CliRunner()


def test_list_shows_every_builtin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ADAPTEMB_CACHE", str(tmp_path))
    result = runner.invoke(app, ["datasets", "list"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for name in ("default", "wordnet-examples", "wordnet-lemmas", "fashion-mnist", "shipped", "not built"):
        assert name in result.output


def test_info_reads_a_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    np.savez(
        tmp_path / "d.npz",
        corpus=rng.standard_normal((5, 3)).astype(np.float32),
        queries=rng.standard_normal((2, 3)).astype(np.float32),
        gold=np.array([4, 1]),
    )
    result = runner.invoke(app, ["datasets", "info", str(tmp_path / "d.npz")], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "corpus (5, 3), queries (2, 3)" in result.output


def test_errors_are_one_line_with_exit_code_2(tmp_path: Path) -> None:
    np.savez(
        tmp_path / "bad.npz", corpus=np.ones((3, 2), np.int64), queries=np.ones((1, 2)), gold=np.array([0])
    )
    for args, message in (
        (["datasets", "info", str(tmp_path / "bad.npz")], "corpus must hold floats"),
        (["datasets", "info", "nope"], "built-in datasets: default"),
        (["datasets", "build", "imagenet"], "valid: wordnet, fashion-mnist"),
        (
            ["datasets", "build", "wordnet", "--image-size", "64", "--out", str(tmp_path)],
            "fashion-mnist only",
        ),
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert (
            result.output.startswith("error: ")
            and message in result.output
            and "Traceback" not in result.output
        )


@pytest.mark.slow
def test_build_fashion_mnist_tiny_with_the_real_backbone(tmp_path: Path) -> None:
    pytest.importorskip("efficientnet_lite_pytorch")
    pytest.importorskip("timm")
    if not FASHION_MNIST_DIR.is_dir():
        pytest.skip("dataset-fashion-mnist not installed")
    args = [
        "datasets",
        "build",
        "fashion-mnist",
        "--limit",
        "10",
        "--image-size",
        "32",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--quiet",
    ]
    result = runner.invoke(app, args, terminal_width=200)
    assert result.exit_code == 0, result.output
    dataset = load_dataset(tmp_path / "fashion-mnist.npz")
    assert dataset.corpus.shape == (10, 1280) and dataset.queries.shape == (2, 1280)
    np.testing.assert_array_equal(dataset.labels, read_fashion_mnist("train")[1][:10])
    np.testing.assert_array_equal(dataset.query_labels, [9, 2])
    np.testing.assert_allclose(np.linalg.norm(dataset.corpus, axis=1), 1.0, atol=1e-5)
    for query in range(2):  # relevant rows share the query's class
        assert np.all(dataset.labels[dataset.qrels[query].indices] == dataset.query_labels[query])
    offline = runner.invoke(app, [*args[:-1], "--backbone", "timm:resnet18"])
    assert offline.exit_code == 2 and "give a local path" in offline.output
