"""Every relative link in the README, docs/ and the records' Markdown leads somewhere: the file exists, and an
#anchor into a Markdown file names one of its headings (GitHub's heading ids)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _without_code(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.DOTALL)


def _heading_ids(markdown: Path) -> set[str]:
    """GitHub's ids: the heading lower-cased, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.*)$", _without_code(markdown.read_text()), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_relative_link_and_anchor_resolves() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "benchmarks" / "results").glob("*.md"))]
    broken = []
    for page in pages:
        for target in LINK.findall(_without_code(page.read_text())):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            dest = page.parent / path if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _heading_ids(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert len(pages) > 10 and not broken, "\n".join(broken)
