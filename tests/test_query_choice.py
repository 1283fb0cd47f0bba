"""Fit-time choices judged by a sample of real queries (``fit(x, queries=sample)``, issue 46): a composition before
sign bits keeps the stages it fits without a sample and reports their recall of the sample's exact float top-10,
csr its value tables; methods without such a choice refuse the sample. The contract's share (determinism, save and
load, bad samples) runs over every method in tests/test_contract.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import adaptemb
from adaptemb import InvalidConfigError
from adaptemb.datasets import load_dataset
from adaptemb.ranking import exact_top_k
from adaptemb.serialization import read_tensors


@pytest.fixture(scope="module")
def real() -> Any:
    """1,500 built-in documents and 200 of its real queries as the sample."""
    data = load_dataset("default")
    return np.ascontiguousarray(data.corpus[:1500]), np.ascontiguousarray(data.queries[:200])


@pytest.fixture(scope="module")
def chosen(real: Any) -> adaptemb.Compressor:
    corpus, sample = real
    return adaptemb.fit(corpus, "svd+binary", byte_budgets=[4, 8, 16, 32], queries=sample)


def test_each_width_keeps_the_default_stage_and_reports_its_recall_of_the_samples_top_10(
        chosen: adaptemb.Compressor) -> None:
    report = chosen.fit_report["query_choice"]
    assert sorted(report) == sorted(chosen.fit_report["ranks"])
    assert max(report) > 128  # a width whose rank auto rotates
    for width, choice in report.items():
        for key in choice["recall_at_10"]:  # the stage auto fits without a sample: rotation by rank, 1 bit
            kind, bits = key.split("/")
            assert kind == ("none" if width // int(bits[0]) <= 128 else "itq-tail")
        assert f"{'none' if width <= 128 else 'itq-tail'}/1bit" in choice["recall_at_10"]
        best = max(choice["recall_at_10"].values())
        assert choice["recall_at_10"][f"{choice['rotation']}/{choice['bits']}bit"] == best
        assert chosen.fit_report["rotations"][width] == choice["rotation"]
        assert chosen.fit_report["bits_per_dim"][width] == choice["bits"]
        assert (choice["queries"], choice["documents"]) == (200, 1500)


def test_the_reported_recall_is_the_public_search_path(chosen: adaptemb.Compressor, real: Any) -> None:
    """The chosen candidate's recall@10, recomputed through encode, index and search with the float queries."""
    corpus, sample = real
    exact = exact_top_k(sample, corpus, 10)
    for width, choice in chosen.fit_report["query_choice"].items():
        _, ids = chosen.index(chosen.encode(corpus, k=width), device="cpu").search(sample, 10)
        found = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, exact, strict=True)])
        assert found == pytest.approx(choice["recall_at_10"][f"{choice['rotation']}/{choice['bits']}bit"], abs=2e-3)


def test_a_chosen_stage_without_rotation_saves_and_loads(chosen: adaptemb.Compressor, real: Any, tmp_path: Path) -> None:
    path = chosen.save(tmp_path / "chosen.safetensors")
    _, tensors = read_tensors(path)
    unrotated = sorted(w for w, c in chosen.fit_report["query_choice"].items() if c["rotation"] == "none")
    assert sorted(tensors["unrotated_widths"].tolist() if "unrotated_widths" in tensors else []) == unrotated
    loaded = adaptemb.load(path)
    for width in chosen.fit_report["ranks"]:
        np.testing.assert_array_equal(loaded.encode(real[0][:50], k=width).to_dense(),
                                      chosen.encode(real[0][:50], k=width).to_dense())


def test_a_sample_needs_a_choice_to_judge(real: Any) -> None:
    corpus, sample = real
    with pytest.raises(InvalidConfigError, match="no fit-time choice .* svd\\+binary"):
        adaptemb.fit(corpus, "svd", queries=sample)
    with pytest.raises(InvalidConfigError, match="queries"):  # rotation and bits fixed: nothing to choose
        adaptemb.fit(corpus, "svd+binary", rotation="itq", bits_per_dim=1, queries=sample)
    with pytest.raises(InvalidConfigError, match="queries"):  # the sample never judges the rotation
        adaptemb.fit(corpus, "svd+binary", bits_per_dim=1, queries=sample)
    with pytest.raises(InvalidConfigError, match="queries"):  # rotation='pairs' chooses by the pairs
        adaptemb.fit(corpus, "svd+binary", rotation="pairs", queries=sample, pairs=(sample, corpus[:200]))
    with pytest.raises(InvalidConfigError, match="queries"):
        adaptemb.fit(corpus, "svd+rabitq", queries=sample)


def test_a_fixed_rotation_leaves_the_sample_the_bits(real: Any) -> None:
    corpus, sample = real
    fitted = adaptemb.fit(corpus, "svd+binary", rotation="random", byte_budgets=[8, 16], queries=sample)
    for choice in fitted.fit_report["query_choice"].values():
        assert {key.split("/")[0] for key in choice["recall_at_10"]} == {"random"}


@pytest.mark.slow
def test_csr_judges_its_value_tables_by_the_sample(real: Any) -> None:
    corpus, sample = real
    fitted = adaptemb.fit(corpus, "csr", hidden=256, k=16, epochs=1, progress=False, queries=sample)
    assert fitted.fit_report["extra"]["value_choices_judged_by"] == "the sample of 200 queries"
    without = adaptemb.fit(corpus, "csr", hidden=256, k=16, epochs=1, progress=False)
    assert without.fit_report["extra"]["value_choices_judged_by"] == "a held-out slice of the fit rows"


@pytest.mark.slow
def test_the_cli_fits_with_a_query_file(real: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from adaptemb.cli import app

    corpus, sample = real
    np.save(tmp_path / "docs.npy", corpus)
    np.save(tmp_path / "q.npy", sample)
    result = CliRunner().invoke(app, ["fit", "-m", "svd+binary", "-i", str(tmp_path / "docs.npy"), "-o",
                                      str(tmp_path / "m.safetensors"), "--bytes", "8,16", "--queries",
                                      str(tmp_path / "q.npy"), "--report", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    assert "query_choice" in (tmp_path / "r.json").read_text()
    refused = CliRunner().invoke(app, ["fit", "-m", "svd", "-i", str(tmp_path / "docs.npy"), "-o",
                                       str(tmp_path / "s.safetensors"), "--queries", str(tmp_path / "q.npy")])
    assert refused.exit_code != 0 and "queries" in refused.output
