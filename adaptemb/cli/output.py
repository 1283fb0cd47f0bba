"""What the commands print: one console, counts with correct plurals, the fit report as a short table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from adaptemb.serialization import atomic_write

console = Console(soft_wrap=True)
"""Standard output of every command (soft wrap: long paths are not cut)."""


def print_report(report: dict[str, Any]) -> None:
    """Print a fit report as a short table: its scalar entries and one line per group of scalars (losses,
    statistics); nested details stay in the JSON (``--report``, or ``compressor.fit_report`` in Python)."""
    table = Table(title="fit report", show_header=False)
    table.add_column("", style="bold")
    table.add_column("", overflow="fold")
    hidden = []
    for name, value in _report_items(report):
        text = _short(value)
        if text is None:
            hidden.append(name)
        else:
            table.add_row(name, text)
    console.print(table)
    if hidden:
        console.print(f"[dim]not shown: {', '.join(hidden)} (--report FILE writes every entry)[/dim]")


def _report_items(report: dict[str, Any]) -> list[tuple[str, Any]]:
    """The report's entries with ``extra`` merged in (its entries are as much the method's as the top level's)."""
    items = [(name, value) for name, value in report.items() if name != "extra" and value is not None]
    items += [(name, value) for name, value in (report.get("extra") or {}).items() if value is not None]
    return items


def _short(value: Any) -> str | None:
    """A number rounded to 4 significant digits, a flat dict as ``name value, ...``; None for nested values."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return f"{value:,}" if isinstance(value, int) else f"{value:.4g}"
    if isinstance(value, dict) and value and all(isinstance(v, (int, float, str, bool)) for v in value.values()):
        return ", ".join(f"{name} {_short(v)}" for name, v in value.items())
    if isinstance(value, list) and len(value) <= 8 and all(isinstance(v, (int, float)) for v in value):
        return ", ".join(str(_short(v)) for v in value)
    return None


def write_json(path: Path, value: Any) -> None:
    """Write ``value`` as indented JSON, atomically, creating the folder."""
    text = json.dumps(value, indent=2, default=str)
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def plural(count: int, noun: str) -> str:
    """``plural(1, "shard")`` → ``"1 shard"``, ``plural(3, "shard")`` → ``"3 shards"`` (counts with thousands commas)."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"
