"""``adaptemb datasets list | build | info``: the built-in real datasets and dataset files."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from adaptemb.cli.app import app
from adaptemb.cli.errors import friendly_errors
from adaptemb.cli.options import OldBackboneOption, chosen, flag

datasets_app = typer.Typer(
    help="Built-in real datasets: list them, build them into the cache, inspect a dataset.",
    no_args_is_help=True,
)
app.add_typer(datasets_app, name="datasets")
console = Console()


@datasets_app.command("list")
@friendly_errors
def list_command() -> None:
    """List the built-in datasets, whether each is ready, and its size on disk."""
    from adaptemb.datasets import BUILTIN_DATASETS, builtin_path, cache_dir

    table = Table(title=f"adaptemb datasets (cache: {cache_dir() / 'datasets'})")
    for column in ("name", "build with", "status", "size", "what"):
        table.add_column(column)
    for item in BUILTIN_DATASETS.values():
        path = builtin_path(item.name)
        status = "shipped" if item.builder == "default" else ("cached" if path.is_file() else "not built")
        size = f"{path.stat().st_size / 1e6:.1f} MB" if path.is_file() else "-"
        command = "-" if item.builder == "default" else f"adaptemb datasets build {item.builder}"
        table.add_row(item.name, command, status, size, item.description)
    console.print(table)


@datasets_app.command("build")
@friendly_errors
def build_command(
    name: Annotated[
        str,
        typer.Argument(help="What to build: wordnet (wordnet-examples + wordnet-lemmas) or fashion-mnist."),
    ],
    backbone: Annotated[str | None, typer.Option(
        "--backbone", help="wordnet: a local sentence-transformers/transformers model folder (default: bundled "
        "all-MiniLM-L6-v2). fashion-mnist: efficientnet-lite0 (default), timm:NAME, open_clip:NAME (with --weights) "
        "or a saved timm folder.")] = None,
    limit: Annotated[int | None, typer.Option(
        "--limit", min=5, help="wordnet: corpus rows (default all 32,663). fashion-mnist: training images, test "
        "images = limit/5 (default all 60,000 on GPU, 5,000 on CPU).")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Folder to write NAME.npz into (default: the cache, where `--data NAME` finds it).")] = None,
    device: Annotated[str | None, typer.Option("--device", help="cpu, cuda, cuda:1 (default: CUDA when present).")] = None,
    weights: Annotated[Path | None, typer.Option(
        "--weights", help="fashion-mnist: local weights file for a timm:NAME or open_clip:NAME model.")] = None,
    image_size: Annotated[int | None, typer.Option(
        "--image-size", min=16, help="fashion-mnist: backbone input size in px (default 224 on GPU, 112 on CPU).")] = None,
    quiet: Annotated[bool, flag("quiet", "No progress bars.", "-q")] = False,
    old_model: OldBackboneOption = None,
) -> None:
    """Build a built-in dataset (embedding its raw texts or images) and save it."""
    from adaptemb.datasets import build_builtin

    if name in ("wordnet-examples", "wordnet-lemmas"):
        name = "wordnet"
    model = chosen(backbone, old_model, new="--backbone", old="--model", required=False)
    start = time.perf_counter()
    try:
        written = build_builtin(name, model=model, limit=limit, out=out, device=device, image_size=image_size,
                                weights=weights, progress=not quiet)
    except ImportError as err:
        raise ValueError(str(err)) from None
    for dataset_name, path in written.items():
        console.print(f"built [bold]{dataset_name}[/] -> {path} ({path.stat().st_size / 1e6:.1f} MB)")
    console.print(f"took {time.perf_counter() - start:.0f} s")


@datasets_app.command("info")
@friendly_errors
def info_command(
    source: Annotated[str, typer.Argument(help="A dataset file, folder or built-in name.")],
) -> None:
    """Load a dataset (any format) and print its shapes, relevance and labels."""
    from adaptemb.datasets import load_dataset

    dataset = load_dataset(source)
    per_query = dataset.qrels.getnnz(axis=1)
    console.print(f"[bold]{dataset.name}[/]: {dataset.description}")
    console.print(f"corpus {dataset.corpus.shape}, queries {dataset.queries.shape}, dim {dataset.dim}")
    console.print(
        f"relevant rows per query: min {per_query.min()}, mean {per_query.mean():.2f}, max {per_query.max()}"
    )
    for field in ("labels", "query_labels"):
        labels = getattr(dataset, field)
        console.print(f"{field}: {'none' if labels is None else f'{len(set(labels.tolist()))} classes'}")
    for key, value in dataset.metadata.items():
        console.print(f"  {key}: {value}")
