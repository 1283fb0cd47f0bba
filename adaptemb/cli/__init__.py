"""The ``adaptemb`` command line. Each command group lives in its own module."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="adaptemb",
    help="Compress frozen embeddings: fit once, encode at any budget, and benchmark the methods.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def main() -> None:
    """Console-script entry point."""
    from adaptemb.cli import commands  # noqa: F401 - registers the commands on `app`

    app()
