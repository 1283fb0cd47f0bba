"""Command-line argument types the benchmark scripts share."""

from __future__ import annotations

import argparse


def integers(text: str) -> list[int]:
    """An argparse ``type``: a comma-separated list of whole numbers (``--bytes 16,32,64``); anything else is a
    usage error that says what was wrong."""
    try:
        return [int(item) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, e.g. 16,32,64; got {text!r}") from None
