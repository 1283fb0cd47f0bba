"""The typer application every command module registers its commands on."""

from __future__ import annotations

import typer

from adaptemb.cli.errors import set_debug

app = typer.Typer(
    name="adaptemb",
    help="Compress frozen embeddings: fit once, encode at any budget, and benchmark the methods.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def options(
    debug: bool = typer.Option(False, "--debug", help="On an error, show the full traceback instead of one `error:` line."),
) -> None:
    """Compress frozen embeddings: fit once, encode at any budget, and benchmark the methods."""
    set_debug(debug)
