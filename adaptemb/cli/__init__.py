"""The ``adaptemb`` command line. Each command group lives in its own module and registers itself on
``adaptemb.cli.app.app``; importing this package registers them all."""

from __future__ import annotations

from adaptemb.cli import (
    bench,  # noqa: F401  bench
    datasets,  # noqa: F401  datasets list, build, info
    index,  # noqa: F401  index build
    models,  # noqa: F401  plugins, fit, compress, export, info
    stream,  # noqa: F401  encode, export-codes
)
from adaptemb.cli.app import app

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point."""
    app()
