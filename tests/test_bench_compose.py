"""The bench's default compositions (declared partners, third-party ones included), the supervision the runner
fits with, and a composition's bench row against the same code through the API."""

from __future__ import annotations

import types
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

import adaptemb
from adaptemb import Budgets, Codes, Compressor, DenseCodes
from adaptemb.cli.bench import default_compositions, default_methods
from adaptemb.datasets import Dataset, load_dataset
from adaptemb.evaluate.metrics import PER_QUERY_NDCG, evaluate_ranking
from adaptemb.evaluate.runner import BenchConfig, run_bench
from adaptemb.registry import CompressorRegistry


class LabelToy(Compressor):
    """Test projection: the first k dims; it records the supervision each fit received."""

    name = "labeltoy"
    role, bench_partner = "projection", "supervised"
    fit_inputs = frozenset({"labels"})
    seen: ClassVar[list[dict[str, Any]]] = []

    def _fit(self, x: torch.Tensor, **supervision: Any) -> None:
        LabelToy.seen.append(supervision)

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        return DenseCodes(x[:, :k].numpy())

    def _budgets(self) -> Budgets:
        assert self.dim is not None
        return Budgets(low=1, high=self.dim, default=self.dim)

    def _state(self) -> dict[str, torch.Tensor]:
        return {}

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        pass


class AlwaysToy(LabelToy):
    """Test projection that declares itself a partner on every dataset."""

    name = "alwaystoy"
    bench_partner = "always"
    fit_inputs = frozenset()


@pytest.fixture
def toys(fresh_plugins: None) -> None:
    @adaptemb.hookimpl
    def register_compressors(registry: CompressorRegistry) -> None:
        registry.add(LabelToy)
        registry.add(AlwaysToy)

    adaptemb.register_plugin(types.SimpleNamespace(register_compressors=register_compressors), name="toys")
    LabelToy.seen.clear()


def test_default_compositions_come_from_declared_partners(toys: None) -> None:
    plain = default_compositions()
    assert plain == ["alwaystoy+binary", "alwaystoy+rabitq", "cllr+binary", "cllr+rabitq", "svd+binary",
                     "svd+rabitq"]  # int8, sq, pq: no partner
    with_labels = default_compositions({"labels"})
    assert set(with_labels) - set(plain) == {"labeltoy+binary", "labeltoy+rabitq"}
    assert default_compositions({"pairs"}) == plain  # labeltoy learns from labels only
    assert set(default_compositions(matryoshka=True)) - set(plain) == {"mrl+binary", "mrl+rabitq"}
    assert default_methods({"labels"}) == sorted(i.name for i in adaptemb.list_compressors()) + with_labels


def test_runner_fits_label_learners_with_the_datasets_labels_when_asked(toys: None) -> None:
    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((200, 16)).astype(np.float32)
    labels = rng.integers(0, 4, 200)
    data = Dataset.from_gold("toy", corpus, corpus[:30] + 0.01, np.arange(30), labels=labels, query_labels=labels[:30])
    # the composition first: fitted after labeltoy's own row, it would share that fit (test below)
    config = BenchConfig(methods=["labeltoy+binary", "alwaystoy", "labeltoy"], budgets=[8], device="cpu", rounds=1,
                         warmup=0, batch_size=16, fit_labels=True)
    result = run_bench(data, config)
    assert [sorted(s) for s in LabelToy.seen] == [["labels"], [], ["labels"]]  # the composition passes them on
    assert np.array_equal(LabelToy.seen[2]["labels"], labels)
    assert "labeltoy: fitted with the dataset's corpus labels" in result.notes
    assert all(len(r[PER_QUERY_NDCG]) == 30 for r in result.rows)  # every judged query, kept for the bootstrap
    LabelToy.seen.clear()
    run_bench(data, BenchConfig(methods=["labeltoy"], budgets=[8], device="cpu", rounds=1, warmup=0, batch_size=16))
    assert LabelToy.seen == [{}]  # by default (no --fit-labels) every method sees the rows only


def test_a_composition_shares_the_projection_its_own_row_fitted(toys: None) -> None:
    data = load_dataset("default")
    config = BenchConfig(methods=["labeltoy", "labeltoy+binary"], bytes=[16], device="cpu", rounds=1, warmup=0,
                         fit_labels=True)
    shared = run_bench(data, config)
    assert len(LabelToy.seen) == 1  # one fit of the projection serves both rows
    alone = run_bench(data, BenchConfig(**{**vars(config), "methods": ["labeltoy+binary"]}))
    assert len(LabelToy.seen) == 2
    (row,), (own,) = ([r for r in result.rows if r["method"] == "labeltoy+binary"] for result in (shared, alone))
    assert row["ndcg_at_10"] == own["ndcg_at_10"] and row["k"] == own["k"]
    (fit,) = [r for r in shared.rows if r["method"] == "labeltoy"]
    assert row["fit_s"] >= fit["fit_s"]  # what fitting it alone costs: the shared fit's seconds included
    assert any(note.startswith("labeltoy+binary: its projection is the labeltoy row's fit") for note in shared.notes)
    other = BenchConfig(**{**vars(config), "method_params": {"labeltoy+binary": {"seed": 1}}})
    run_bench(data, other)  # other settings: no sharing
    assert len(LabelToy.seen) == 4


@pytest.mark.slow
def test_bench_row_of_a_composition_equals_the_api_at_32_bytes() -> None:
    data = load_dataset("default")  # adaptemb bench --methods svd+rabitq,... --bytes 32, against the API
    config = BenchConfig(methods=["svd+rabitq"], bytes=[32], device="cpu", rounds=1, warmup=0, fit_progress=False)
    (row,) = [r for r in run_bench(data, config).rows if r["method"] == "svd+rabitq"]
    compressor = adaptemb.fit(data.corpus, method="svd+rabitq")
    codes = compressor.encode(data.corpus, bytes=32)
    _, ids = compressor.index(codes).search(data.queries, 100)
    api = evaluate_ranking(ids, data.qrels).ndcg_at_10
    assert row["k"] == codes.dim == 224 and row["bytes_per_vector"] == codes.bytes_per_vector <= 32  # 4 B of float16 factors
    assert abs(row["ndcg_at_10"] - api) <= 0.002 and api > 0.15


@pytest.mark.slow
def test_cli_flags_choose_the_default_compositions(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from adaptemb.cli import app
    from adaptemb.cli import bench as bench_cli

    asked: list[tuple[list[str], bool]] = []

    def chosen(supervision: Any = (), *, matryoshka: bool = False) -> list[str]:
        asked.append((sorted(supervision), matryoshka))
        return ["svd"]  # keep the run small: only what the flags ask for is checked

    monkeypatch.setattr(bench_cli, "default_methods", chosen)
    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((120, 8)).astype(np.float32)
    np.savez(tmp_path / "tiny.npz", corpus=corpus, queries=corpus[:20], gold=np.arange(20), labels=np.arange(120) % 3)
    args = ["bench", "--data", str(tmp_path / "tiny.npz"), "--budgets", "4", "--rounds", "1", "--warmup", "0",
            "--device", "cpu", "--quiet"]
    for extra in ([], ["--fit-labels", "--matryoshka"]):
        result = CliRunner().invoke(app, [*args, *extra, "--out", str(tmp_path / str(len(extra)))])
        assert result.exit_code == 0, result.output
    assert asked == [([], False), (["labels"], True)]
