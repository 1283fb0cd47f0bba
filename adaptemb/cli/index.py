"""``adaptemb index build``: an approximate index from the code shards ``adaptemb encode`` wrote, in bounded memory;
re-run the same command to resume a killed build."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from adaptemb.cli.app import app
from adaptemb.cli.errors import friendly_errors
from adaptemb.cli.options import CompressorOption
from adaptemb.cli.output import console
from adaptemb.cli.stream import INTERRUPTED

index_app = typer.Typer(help="Approximate indexes over code shards: build one (resumable).", no_args_is_help=True)
app.add_typer(index_app, name="index")


@index_app.command("build")
@friendly_errors
def build_command(
    codes: Annotated[Path, typer.Option("--codes", help="Folder of document code shards from `adaptemb encode`.")],
    compressor: CompressorOption = None,
    out: Annotated[Path | None, typer.Option("--out", help="The index file to write (.safetensors).")] = None,
    cells: Annotated[int | None, typer.Option("--cells", min=1, help="Coarse cells (default: from the row count).")] = None,
    recall: Annotated[float, typer.Option("--recall", help="The recall@10 searches aim at by default, in (0, 1].")] = 0.95,
) -> None:
    """Build the approximate index of encoded shards one shard at a time; re-run the same command to resume."""
    from adaptemb.ann import AnnConfig
    from adaptemb.index_build import build_index_from_shards

    if compressor is None or out is None:
        raise typer.BadParameter("give the compressor (--compressor/-c) and the index file (--out)")
    config = AnnConfig(recall=recall, **({} if cells is None else {"cells": cells}))
    start = time.perf_counter()
    try:
        path = build_index_from_shards(codes, compressor, out, ann=config)
    except KeyboardInterrupt:
        print(f"\ninterrupted: the finished steps are kept in {out}.building; run the same command again to resume:"
              f"\n  {shlex.join(['adaptemb', *sys.argv[1:]])}", file=sys.stderr)
        raise typer.Exit(code=INTERRUPTED) from None
    console.print(f"built {path} in {time.perf_counter() - start:.1f} s (open it with adaptemb.load_index)")
