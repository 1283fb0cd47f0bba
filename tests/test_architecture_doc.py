"""docs/architecture.md draws the layers tests/test_import_layers.py enforces: every layer, top down, with its rooms."""

from __future__ import annotations

from pathlib import Path

from test_import_layers import LAYERS

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def test_the_page_draws_the_enforced_layers() -> None:
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| ") and line[2].isdigit()]
    drawn = [(cells[1].strip(), frozenset(cells[2].replace("`", "").split()))
             for cells in (row.strip("|").split("|") for row in rows)]
    assert drawn == list(reversed(LAYERS))
