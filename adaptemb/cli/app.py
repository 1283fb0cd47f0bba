"""The typer application every command module registers its commands on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="adaptemb",
    help="Compress frozen embeddings: fit once, encode at any budget, and benchmark the methods.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
