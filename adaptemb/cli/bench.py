"""``adaptemb bench``: every method × budget on one dataset: quality, storage, latency; table, JSON, CSV, plots."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Collection
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from adaptemb.cli.app import app
from adaptemb.cli.errors import friendly_errors
from adaptemb.cli.options import TextBackboneOption, flag, parse_ints
from adaptemb.config import parse_params
from adaptemb.devices import Device

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


@app.command("bench")
@friendly_errors
def bench_command(
    data: Annotated[str, typer.Option("--data", help="Dataset file, folder or built-in name; or text data, embedded "
                                      "with --backbone: a BEIR folder or a .jsonl file of texts.")] = "default",
    backbone: TextBackboneOption = None,
    split: Annotated[str | None, typer.Option("--split", help="BEIR folder: the qrels split to evaluate "
                                              "(qrels/SPLIT.tsv; default test).")] = None,
    save_runs: Annotated[bool, flag("save-runs", "Write each row's ranking (depth 100) as a TREC run file, "
                                    "OUT/runs/NAME.trec, and check them with pytrec_eval.")] = False,
    methods: Annotated[str | None, typer.Option(
        "--methods", help="Comma list of registered methods or compositions such as svd+binary (default: every "
        "registered method and the default compositions, see docs/bench.md; `adaptemb plugins` lists them).")] = None,
    matryoshka: Annotated[bool, flag("matryoshka", "The embeddings are Matryoshka-trained: the default method list "
                                     "adds the compositions of projections made for them (mrl+binary, ...).")] = False,
    fit_labels: Annotated[bool, flag("fit-labels", "Fit the methods that learn from labels (csr, cllr, ...) with the "
                                     "dataset's corpus labels; the default list then adds cllr+binary, ...")] = False,
    budgets: Annotated[str | None, typer.Option(
        "--budgets", help="Comma list of budgets k in each method's own unit (active dims, bits, sub-quantisers); "
        "instead of --bytes.")] = None,
    nbytes: Annotated[str | None, typer.Option(
        "--bytes", help="Comma list of byte budgets per vector (default 16,32,64; add 128 or more as you need): each method encodes at its "
        "largest k whose codes fit, so every method is compared at equal bytes.")] = None,
    device: Annotated[Device, typer.Option("--device", help="Where to fit and search: auto (CUDA when present), cpu or cuda.")] = "auto",
    out: Annotated[Path, typer.Option("--out", help="Folder for results.json/.csv, plots and report.md.")] = Path("bench-results"),
    rerank: Annotated[bool, flag("rerank", "Add funnel rows: shortlist with codes, rerank with float32 / int8.")] = False,
    shortlist: Annotated[int, typer.Option("--shortlist", min=1, help="Shortlist size for --rerank.")] = 100,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed for fitting and sampling.")] = 0,
    scale: Annotated[int, typer.Option(
        "--scale", min=0, help="Also search every method through its own index at N rows (the corpus plus "
        "noise-perturbed copies), beside faiss flat / HNSW / IVF-PQ; 0: off.")] = 0,
    scale_budgets: Annotated[str, typer.Option(
        "--scale-budgets", help="Budgets k for --scale: 'default' (each method's default) or a comma list.")] = "default",
    scale_noise: Annotated[float, typer.Option(
        "--scale-noise", min=0.0, help="--scale copies: Gaussian noise norm relative to the row's norm.")] = 0.75,
    scale_baselines: Annotated[str, typer.Option(
        "--scale-baselines", help="faiss baselines for --scale: any of flat,hnsw,ivfpq (flat always runs).")] = "flat,hnsw,ivfpq",
    scale_check: Annotated[int, typer.Option(
        "--scale-check", min=0, help="--scale: check each index's top-10 against brute force through score() "
        "on this many queries.")] = 0,
    ann: Annotated[bool, flag("ann", "With --scale: also sweep each method's approximate index (recall@10 against QPS) "
                              "beside faiss IVF-RaBitQ (with and without refine), IVF-PQ with refine and HNSW; "
                              "a table, ann.png and a recommendation per budget and target recall.")] = False,
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Timed rounds per latency measurement (the median is "
                                                           "reported; more for a tighter spread).")] = 3,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Warm-up rounds before timing.")] = 1,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Queries per timed batch.")] = 512,
    param: Annotated[list[str] | None, typer.Option(
        "--param", "-p", help="A method parameter as METHOD.NAME=VALUE (repeatable), e.g. -p csr.epochs=5.")] = None,
    quiet: Annotated[bool, flag("quiet", "Only the final table (no progress).", "-q")] = False,
    wide: Annotated[bool, flag("wide", "Every column, one line per row (needs about 160 columns); "
                                       "by default a compact table that fits 100.")] = False,
    all_rows: Annotated[bool, flag("all-rows", "Every row in the terminal; by default each method family's best "
                                               "row per byte budget (report.md and results.json keep every row).")] = False,
) -> None:
    """Benchmark compression methods on a dataset: NDCG@10, recall, MRR, 1-NN, bytes/vector, latency."""
    from adaptemb.cli.steps import StepBar
    from adaptemb.datasets import load_dataset
    from adaptemb.evaluate.report import evaluated_query_ids, write_report
    from adaptemb.evaluate.runner import BenchConfig, fit_supervision, run_bench
    from adaptemb.evaluate.scale import ScaleConfig
    from adaptemb.evaluate.terminal import print_summary, print_table

    console = Console(stderr=True, quiet=quiet)
    names = None if methods is None else [m.strip() for m in methods.split(",") if m.strip()]
    if names is not None:  # the default list is known once the dataset is loaded
        _check_names(names, param or [])
    scale_config = None
    if ann and not scale:
        raise ValueError("--ann sweeps approximate indexes in the scale study: give --scale N (rows) with it")
    if scale:
        scale_ks: tuple[int | None, ...] = (None,) if scale_budgets.strip() == "default" else tuple(
            parse_ints(scale_budgets, "--scale-budgets"))
        scale_config = ScaleConfig(rows=scale, noise=scale_noise, budgets=scale_ks, device=device, seed=seed,
                                   baselines=tuple(b.strip() for b in scale_baselines.split(",") if b.strip()),
                                   batch_size=batch_size, warmup=warmup, rounds=min(rounds, 3), progress=not quiet,
                                   check_queries=scale_check, ann=ann)
    if budgets is not None and nbytes is not None:
        raise ValueError("pass --bytes (byte budgets) or --budgets (each method's own k), not both")
    byte_budgets = None if budgets is not None else parse_ints(nbytes or DEFAULT_BYTES, "--bytes")
    config = BenchConfig(methods=names or [], budgets=parse_ints(budgets or DEFAULT_BUDGETS, "--budgets"), bytes=byte_budgets,
                         device=device, rerank=rerank, shortlist=shortlist, seed=seed, rounds=rounds, warmup=warmup,
                         batch_size=batch_size, method_params=method_params(param or []), fit_progress=False,
                         fit_labels=fit_labels, scale=scale_config, keep_rankings=save_runs)
    log = (lambda msg: console.print(f"[dim]- {msg}[/dim]"))
    log(f"loading dataset {data}")
    with warnings.catch_warnings():  # ignored extra arrays become a note of the report instead
        warnings.simplefilter("ignore", UserWarning)
        dataset = load_dataset(data, seed=seed, progress=not quiet, backbone=backbone, split=split,
                               cache_dir=out / "embeddings", device=device, log=log)
    if save_runs:
        from adaptemb.evaluate.runs import check_run_ids

        check_run_ids(dataset)
    if names is None:
        config.methods = default_methods(fit_supervision(dataset) if fit_labels else (), matryoshka=matryoshka)
        _check_names(config.methods, param or [])
    result = run_bench(dataset, config, progress=None if quiet else StepBar(console))
    if save_runs:
        from adaptemb.evaluate.runs import save_runs as write_runs

        result.notes.extend(write_runs(result, dataset, out).notes)
    files = write_report(result, out, query_ids=evaluated_query_ids(dataset))
    # piped output without COLUMNS: do not squeeze the table
    stdout = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 220)
    print_table(result, stdout, wide=wide, all_rows=all_rows)
    print_summary(result, files, stdout)
    if result.ann_recommendation:
        from adaptemb.evaluate.ann_curves import recommendation_lines

        stdout.print("approximate search (recall@10 against the exact float top-10; the fastest index that reaches it):")
        for line in recommendation_lines(result.ann_recommendation):
            stdout.print(f"  {line}", highlight=False)
