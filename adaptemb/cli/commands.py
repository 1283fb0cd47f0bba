"""Imports every command group so that each registers its commands on ``adaptemb.cli.app``."""

from adaptemb.cli import (
    bench,  # noqa: F401  bench
    datasets,  # noqa: F401  datasets list, build, info
    models,  # noqa: F401  plugins, fit, compress, info
)
