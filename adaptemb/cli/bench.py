"""``adaptemb bench``: every method × budget on one dataset: quality, storage, latency; table, JSON, CSV, plots."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from adaptemb.cli.app import app
from adaptemb.cli.errors import friendly_errors
from adaptemb.cli.options import TextBackboneOption, flag, parse_ints
from adaptemb.config import parse_params
from adaptemb.devices import Device

if TYPE_CHECKING:
    from adaptemb.datasets import Dataset
    from adaptemb.evaluate.context import BenchConfig, BenchResult
    from adaptemb.evaluate.scale import ScaleConfig

DEFAULT_BUDGETS = "16,32,64"
DEFAULT_BYTES = "16,32,64"


def method_params(items: list[str]) -> dict[str, dict[str, Any]]:
    """``["csr.epochs=5"]`` → ``{"csr": {"epochs": 5}}`` (values parsed as JSON when they parse)."""
    grouped: dict[str, dict[str, Any]] = {}
    for name, value in parse_params(items).items():
        method, dot, key = name.partition(".")
        if not dot or not method or not key:
            raise ValueError(f"--param {name}=... must name its method: METHOD.NAME=VALUE, e.g. csr.epochs=5")
        grouped.setdefault(method, {})[key] = value
    return grouped


def default_methods(supervision: Collection[str] = (), *, matryoshka: bool = False) -> list[str]:
    """Every registered method, built-in or third-party, in name order, then the default compositions
    (``default_compositions``): the honest default comparison."""
    from adaptemb.registry import get_registry

    return get_registry().names() + default_compositions(supervision, matryoshka=matryoshka)


def default_compositions(supervision: Collection[str] = (), *, matryoshka: bool = False) -> list[str]:
    """Every ``"projection+quantizer"`` of the registered methods whose parts both declare themselves default
    partners under the run's conditions (``Compressor.bench_partner``): ``"always"``; ``"supervised"`` when
    ``supervision`` (what the dataset brings: ``"pairs"``, ``"labels"``) meets the method's ``fit_inputs``;
    ``"matryoshka"`` when the embeddings are Matryoshka-trained."""
    from adaptemb.registry import COMPOSE_SEPARATOR, get_registry

    registry = get_registry()

    def partners(role: str) -> list[str]:
        return [name for name in registry.with_role(role) if _partners(registry.get(name), set(supervision), matryoshka)]

    return [f"{p}{COMPOSE_SEPARATOR}{q}" for p in partners("projection") for q in partners("quantizer")]


def _partners(cls: Any, supervision: set[str], matryoshka: bool) -> bool:
    when = getattr(cls, "bench_partner", None)
    return when == "always" or (when == "supervised" and bool(supervision & cls.fit_inputs)) or (
        when == "matryoshka" and matryoshka)


def _check_names(names: list[str], params: list[str]) -> None:
    """A clear error for an empty or unknown method, or a ``--param`` of a method not benchmarked."""
    from adaptemb.evaluate.runner import check_methods

    if not names:
        raise ValueError("--methods is empty; name at least one registered method")
    check_methods(names)
    unknown = sorted(set(method_params(params)) - set(names))
    if unknown:
        raise ValueError(f"--param names method(s) {', '.join(unknown)} that are not in --methods ({', '.join(names)})")


DataOption = Annotated[str, typer.Option("--data", help="Dataset file, folder or built-in name; or text data, embedded "
                                         "with --backbone: a BEIR folder or a .jsonl file of texts.")]
SplitOption = Annotated[str | None, typer.Option("--split", help="BEIR folder: the qrels split to evaluate "
                                                 "(qrels/SPLIT.tsv; default test).")]
SaveRunsOption = Annotated[bool, flag("save-runs", "Write each row's ranking (depth 100) as a TREC run file, "
                                      "OUT/runs/NAME.trec, and check them with pytrec_eval.")]
MethodsOption = Annotated[str | None, typer.Option(
    "--methods", help="Comma list of registered methods or compositions such as svd+binary (default: every "
    "registered method and the default compositions, see docs/bench.md; `adaptemb plugins` lists them).")]
MatryoshkaOption = Annotated[bool, flag("matryoshka", "The embeddings are Matryoshka-trained: the default method list "
                                        "adds the compositions of projections made for them (mrl+binary, ...).")]
FitLabelsOption = Annotated[bool, flag("fit-labels", "Fit the methods that learn from labels (csr, cllr, ...) with the "
                                       "dataset's corpus labels; the default list then adds cllr+binary, ...")]
FitQueriesOption = Annotated[int, typer.Option(
    "--fit-queries", min=0, help="Real queries never evaluated that judge the fits' choices (csr, svd+binary, ...: "
    "fit(x, queries=...)): the dataset's dev_queries, else this many of its queries held out of the evaluation; "
    "0 (default): fits choose without queries.")]
BudgetsOption = Annotated[str | None, typer.Option(
    "--budgets", help="Comma list of budgets k in each method's own unit (active dims, bits, sub-quantisers); "
    "instead of --bytes.")]
BytesOption = Annotated[str | None, typer.Option(
    "--bytes", help="Comma list of byte budgets per vector (default 16,32,64; add 128 or more as you need): each method encodes at its "
    "largest k whose codes fit, so every method is compared at equal bytes.")]
DeviceOption = Annotated[Device, typer.Option("--device", help="Where to fit and search: auto (CUDA when present), cpu or cuda.")]
OutOption = Annotated[Path, typer.Option("--out", help="Folder for results.json/.csv, plots and report.md.")]
RerankOption = Annotated[bool, flag("rerank", "Add funnel rows: shortlist with codes, rerank with float32 / int8.")]
ShortlistOption = Annotated[int, typer.Option("--shortlist", min=1, help="Shortlist size for --rerank.")]
SeedOption = Annotated[int, typer.Option("--seed", min=0, help="Seed for fitting and sampling.")]
ScaleOption = Annotated[int, typer.Option(
    "--scale", min=0, help="Also search every method through its own index at N rows (the corpus plus "
    "noise-perturbed copies), beside faiss flat / HNSW / IVF-PQ; 0: off.")]
ScaleBudgetsOption = Annotated[str, typer.Option(
    "--scale-budgets", help="Budgets k for --scale: 'default' (each method's default) or a comma list.")]
ScaleNoiseOption = Annotated[float, typer.Option(
    "--scale-noise", min=0.0, help="--scale copies: Gaussian noise norm relative to the row's norm.")]
ScaleBaselinesOption = Annotated[str, typer.Option(
    "--scale-baselines", help="faiss baselines for --scale: any of flat,hnsw,ivfpq (flat always runs).")]
ScaleCheckOption = Annotated[int, typer.Option(
    "--scale-check", min=0, help="--scale: check each index's top-10 against brute force through score() "
    "on this many queries.")]
AnnOption = Annotated[bool, flag("ann", "With --scale: also sweep each method's approximate index (recall@10 against QPS) "
                                  "beside faiss IVF-RaBitQ (with and without refine), IVF-PQ with refine and HNSW; "
                                  "a table, ann.png and a recommendation per budget and target recall.")]
RoundsOption = Annotated[int, typer.Option("--rounds", min=1, help="Timed rounds per latency measurement (the median is "
                                                              "reported; more for a tighter spread).")]
WarmupOption = Annotated[int, typer.Option("--warmup", min=0, help="Warm-up rounds before timing (the quality search over "
                                                                "every query runs first and warms the index).")]
BatchSizeOption = Annotated[int, typer.Option("--batch-size", min=1, help="Queries per timed batch.")]
FitWorkersOption = Annotated[int | None, typer.Option(
    "--fit-workers", min=1, help="Processes fitting the methods side by side before the rows are timed "
    "(1: one fit at a time in this process); by default one per core on the CPU.")]
ParamOption = Annotated[list[str] | None, typer.Option(
    "--param", "-p", help="A method parameter as METHOD.NAME=VALUE (repeatable), e.g. -p csr.epochs=5.")]
QuietOption = Annotated[bool, flag("quiet", "Only the final table (no progress).", "-q")]
WideOption = Annotated[bool, flag("wide", "Every column, one line per row (needs about 160 columns); "
                                          "by default a compact table that fits 100.")]
AllRowsOption = Annotated[bool, flag("all-rows", "Every row in the terminal; by default each method family's best "
                                                  "row per byte budget (report.md and results.json keep every row).")]


@dataclass(frozen=True)
class MethodChoice:
    """Which methods run, with which ``--param`` values: ``--methods`` (``None``: the default list, known once
    the dataset is loaded), ``--param``, ``--matryoshka`` and ``--fit-labels``."""

    names: list[str] | None
    params: list[str]
    matryoshka: bool
    fit_labels: bool

    @classmethod
    def parse(cls, methods: str | None, params: list[str], *, matryoshka: bool, fit_labels: bool) -> MethodChoice:
        """Split ``--methods`` and check the names given against the registry and ``--param``."""
        names = None if methods is None else [m.strip() for m in methods.split(",") if m.strip()]
        if names is not None:
            _check_names(names, params)
        return cls(names, params, matryoshka=matryoshka, fit_labels=fit_labels)

    def resolve(self, dataset: Dataset) -> list[str]:
        """The names given, or the default list for what ``dataset`` brings (checked against ``--param``)."""
        from adaptemb.evaluate.runner import fit_supervision

        if self.names is not None:
            return self.names
        names = default_methods(fit_supervision(dataset) if self.fit_labels else (), matryoshka=self.matryoshka)
        _check_names(names, self.params)
        return names


@dataclass(frozen=True)
class ScaleChoice:
    """The ``--scale*`` options: the scale study's rows (0: off), budgets, noise, faiss baselines and check, and
    ``--ann`` (the approximate indexes' sweep, which needs the study's rows)."""

    rows: int
    budgets: str
    noise: float
    baselines: str
    check_queries: int
    ann: bool = False

    def config(self, timing: Timing, *, device: Device, seed: int, progress: bool) -> ScaleConfig | None:
        """The study's ``ScaleConfig`` (at most 3 timed rounds), or ``None`` when ``--scale`` is 0."""
        from adaptemb.evaluate.scale import ScaleConfig

        if self.ann and not self.rows:
            raise ValueError("--ann sweeps approximate indexes in the scale study: give --scale N (rows) with it")
        if not self.rows:
            return None
        ks: tuple[int | None, ...] = (None,) if self.budgets.strip() == "default" else tuple(
            parse_ints(self.budgets, "--scale-budgets"))
        return ScaleConfig(rows=self.rows, noise=self.noise, budgets=ks, device=device, seed=seed,
                           baselines=tuple(b.strip() for b in self.baselines.split(",") if b.strip()),
                           batch_size=timing.batch_size, warmup=timing.warmup, rounds=min(timing.rounds, 3),
                           progress=progress, check_queries=self.check_queries, ann=self.ann)


@dataclass(frozen=True)
class Timing:
    """The latency protocol: ``--rounds`` timed rounds after ``--warmup`` rounds, ``--batch-size`` queries each."""

    rounds: int
    warmup: int
    batch_size: int


@dataclass(frozen=True)
class BenchSettings:
    """One ``adaptemb bench`` call's options, checked and grouped by the step that uses them: the data
    (``--data``, ``--backbone``, ``--split``), the methods, the run's ``BenchConfig`` and the report."""

    data: str
    backbone: str | None
    split: str | None
    choice: MethodChoice
    config: BenchConfig
    out: Path
    save_runs: bool
    quiet: bool
    wide: bool
    all_rows: bool


def bench_config(choice: MethodChoice, budgets: str | None, nbytes: str | None, *, timing: Timing,
                 scale: ScaleConfig | None, device: Device, rerank: bool, shortlist: int, seed: int,
                 save_runs: bool, fit_workers: int | None, fit_queries: int = 0) -> BenchConfig:
    """The run's ``BenchConfig`` (its ``methods`` stay empty until ``MethodChoice.resolve``): ``--bytes`` or
    ``--budgets``, never both; ``--bytes`` defaults to ``DEFAULT_BYTES``."""
    from adaptemb.evaluate.runner import BenchConfig

    if budgets is not None and nbytes is not None:
        raise ValueError("pass --bytes (byte budgets) or --budgets (each method's own k), not both")
    byte_budgets = None if budgets is not None else parse_ints(nbytes or DEFAULT_BYTES, "--bytes")
    return BenchConfig(methods=choice.names or [], budgets=parse_ints(budgets or DEFAULT_BUDGETS, "--budgets"),
                       bytes=byte_budgets, device=device, rerank=rerank, shortlist=shortlist, seed=seed,
                       rounds=timing.rounds, warmup=timing.warmup, batch_size=timing.batch_size,
                       method_params=method_params(choice.params), fit_progress=False,
                       fit_labels=choice.fit_labels, fit_queries=fit_queries, scale=scale, keep_rankings=save_runs,
                       fit_workers=fit_workers)


def load_bench_data(settings: BenchSettings, console: Console) -> Dataset:
    """Load (or embed, for text data) the dataset; with ``--save-runs``, check its ids can name TREC runs."""
    from adaptemb.datasets import load_dataset

    config = settings.config
    log = (lambda msg: console.print(f"[dim]- {msg}[/dim]"))
    log(f"loading dataset {settings.data}")
    with warnings.catch_warnings():  # ignored extra arrays become a note of the report instead
        warnings.simplefilter("ignore", UserWarning)
        dataset = load_dataset(settings.data, seed=config.seed, progress=not settings.quiet,
                               backbone=settings.backbone, split=settings.split,
                               cache_dir=settings.out / "embeddings", device=config.device, log=log)
    if settings.save_runs:
        from adaptemb.evaluate.runs import check_run_ids

        check_run_ids(dataset)
    return dataset


def hold_out_fit_queries(dataset: Dataset, config: BenchConfig) -> Dataset:
    """With ``--fit-queries N``, a dataset without ``dev_queries`` and a method of the run that takes a query sample:
    the dataset with N (at most a third) of its queries held out of the evaluation as that sample (noted);
    else ``dataset``."""
    from adaptemb.evaluate.runner import query_takers

    if not config.fit_queries or dataset.dev_queries is not None or len(dataset.queries) < 3:
        return dataset
    takers = query_takers(config)
    if not takers:
        return dataset
    held = min(config.fit_queries, len(dataset.queries) // 3)
    dataset = dataset.holding_out_queries(held, config.seed)
    dataset.notes.append(f"fit queries: {held:,} of the dataset's queries (seeded) are held out of the evaluation "
                         f"as the query sample of {', '.join(takers)} (the dataset has no dev_queries); "
                         f"{len(dataset.queries):,} evaluated")
    return dataset


def report_bench(result: BenchResult, dataset: Dataset, settings: BenchSettings) -> None:
    """Write the TREC runs (``--save-runs``), report.md, results.json/.csv and plots; print the table."""
    from adaptemb.evaluate.report import evaluated_query_ids, write_report
    from adaptemb.evaluate.terminal import print_summary, print_table

    if settings.save_runs:
        from adaptemb.evaluate.runs import save_runs as write_runs

        result.notes.extend(write_runs(result, dataset, settings.out).notes)
    files = write_report(result, settings.out, query_ids=evaluated_query_ids(dataset))
    # piped output without COLUMNS: do not squeeze the table
    stdout = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 220)
    print_table(result, stdout, wide=settings.wide, all_rows=settings.all_rows)
    print_summary(result, files, stdout)
    if result.ann_recommendation:
        from adaptemb.evaluate.ann_curves import recommendation_lines

        stdout.print("approximate search (recall@10 against the exact float top-10; the fastest index that reaches it):")
        for line in recommendation_lines(result.ann_recommendation):
            stdout.print(f"  {line}", highlight=False)


@app.command("bench")
@friendly_errors
def bench_command(
    data: DataOption = "default",
    backbone: TextBackboneOption = None,
    split: SplitOption = None,
    save_runs: SaveRunsOption = False,
    methods: MethodsOption = None,
    matryoshka: MatryoshkaOption = False,
    fit_labels: FitLabelsOption = False,
    fit_queries: FitQueriesOption = 0,
    budgets: BudgetsOption = None,
    nbytes: BytesOption = None,
    device: DeviceOption = "auto",
    out: OutOption = Path("bench-results"),
    rerank: RerankOption = False,
    shortlist: ShortlistOption = 100,
    seed: SeedOption = 0,
    scale: ScaleOption = 0,
    scale_budgets: ScaleBudgetsOption = "default",
    scale_noise: ScaleNoiseOption = 0.75,
    scale_baselines: ScaleBaselinesOption = "flat,hnsw,ivfpq",
    scale_check: ScaleCheckOption = 0,
    ann: AnnOption = False,
    rounds: RoundsOption = 3,
    warmup: WarmupOption = 0,
    batch_size: BatchSizeOption = 512,
    fit_workers: FitWorkersOption = None,
    param: ParamOption = None,
    quiet: QuietOption = False,
    wide: WideOption = False,
    all_rows: AllRowsOption = False,
) -> None:
    """Benchmark compression methods on a dataset: NDCG@10, recall, MRR, 1-NN, bytes/vector, latency."""
    from adaptemb.cli.steps import StepBar
    from adaptemb.evaluate.runner import run_bench

    choice = MethodChoice.parse(methods, param or [], matryoshka=matryoshka, fit_labels=fit_labels)
    timing = Timing(rounds=rounds, warmup=warmup, batch_size=batch_size)
    scale_config = ScaleChoice(scale, scale_budgets, scale_noise, scale_baselines, scale_check, ann).config(
        timing, device=device, seed=seed, progress=not quiet)
    config = bench_config(choice, budgets, nbytes, timing=timing, scale=scale_config, device=device, rerank=rerank,
                          shortlist=shortlist, seed=seed, save_runs=save_runs, fit_workers=fit_workers,
                          fit_queries=fit_queries)
    settings = BenchSettings(data, backbone, split, choice, config, out, save_runs=save_runs, quiet=quiet, wide=wide,
                             all_rows=all_rows)
    console = Console(stderr=True, quiet=quiet)
    dataset = load_bench_data(settings, console)
    config.methods = choice.resolve(dataset)
    dataset = hold_out_fit_queries(dataset, config)
    result = run_bench(dataset, config, progress=None if quiet else StepBar(console))
    report_bench(result, dataset, settings)
