"""Command-line argument types the benchmark scripts share."""

from __future__ import annotations

import argparse
from pathlib import Path


def integers(text: str) -> list[int]:
    """An argparse ``type``: a comma-separated list of whole numbers (``--bytes 16,32,64``); anything else is a
    usage error that says what was wrong."""
    try:
        return [int(item) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, e.g. 16,32,64; got {text!r}") from None


def data_set_parser(description: str, *, bytes_default: str) -> argparse.ArgumentParser:
    """The parser of a benchmark run on one data set at byte budgets: ``--data`` (``default`` or
    ``wordnet-examples-768``), ``--docs`` (documents of the 768-d subset), ``--bytes``, ``--seed`` and ``--out``
    (the record's path; None: the script's own)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", default="default", help="default, or wordnet-examples-768 (the 768-d stand-in)")
    parser.add_argument("--docs", type=int, default=5000, help="documents of the 768-d subset")
    parser.add_argument("--bytes", type=integers, default=bytes_default, help="byte budgets per vector")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="where the JSON record goes")
    return parser


def sweep_parser(description: str, *, bytes_default: str, seeds: int, method: str = "svd+binary") -> argparse.ArgumentParser:
    """``data_set_parser`` plus ``--seeds`` (fits per setting) and ``--method`` (svd+binary, or cllr+binary fitted
    without pairs): the parser of a seed sweep over a composition's settings."""
    parser = data_set_parser(description, bytes_default=bytes_default)
    parser.add_argument("--seeds", type=int, default=seeds)
    parser.add_argument("--method", default=method, help="svd+binary or cllr+binary (without pairs)")
    return parser
