"""One colour per method in every bench plot (quality vs bytes, quality vs latency, Pareto, scale).

The colour of a method depends only on the registered method names: they are sorted, and the i-th name gets
the i-th colour of one fixed qualitative palette (third-party methods included, so a plugin takes a slot like a
built-in one). References have fixed colours of their own: the float32 reference and faiss' exact
``IndexFlatIP`` (the same search) are black, the other faiss baselines are greys, which no method uses. A name
that is not registered (a result file read where its plugin is not installed) gets a palette colour chosen by a
stable hash of the name (``method_colour``), or, when a whole report is coloured at once (``method_colours``),
the palette slots after the registered methods.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

PALETTE: tuple[str, ...] = (
    # matplotlib's tab10 without its grey (kept for the references), then Dark2 / Set1-like extras
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
    "#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#000080", "#800000",
)
"""The qualitative palette methods draw from, in order (it repeats past its length)."""

REFERENCE_COLOURS: dict[str, str] = {
    "float32": "#000000",
    "faiss-flat": "#000000",
    "faiss-hnsw": "#555555",
    "faiss-ivfpq": "#999999",
}
"""Fixed colours of the reference rows: exact float search in black, faiss' approximate baselines in grey."""


def registered_methods() -> list[str]:
    """The registered method names, sorted (built-in and third-party alike)."""
    from adaptemb.registry import get_registry

    return sorted(get_registry().names())


def method_colour(name: str, methods: Sequence[str] | None = None) -> str:
    """The hex colour of method ``name``: its slot among the sorted ``methods`` (default: every registered
    method) in ``PALETTE``; references have fixed colours (``REFERENCE_COLOURS``)."""
    if name in REFERENCE_COLOURS:
        return REFERENCE_COLOURS[name]
    names = sorted(methods) if methods is not None else registered_methods()
    if name in names:
        return PALETTE[names.index(name) % len(PALETTE)]
    return PALETTE[zlib.crc32(name.encode()) % len(PALETTE)]


def method_colours(names: Sequence[str], methods: Sequence[str] | None = None) -> dict[str, str]:
    """``{name: colour}`` for ``names``, reading the registry once: registered methods and references as
    ``method_colour``; names that are not registered take the palette slots after the registered ones, in
    name order (so that within one set of figures they never share a method's colour)."""
    registered = sorted(methods) if methods is not None else registered_methods()
    extras = sorted(set(names) - set(registered) - set(REFERENCE_COLOURS))
    out = {name: method_colour(name, registered) for name in names}
    for i, name in enumerate(extras):
        out[name] = PALETTE[(len(registered) + i) % len(PALETTE)]
    return out
