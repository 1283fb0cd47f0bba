"""The hooks adaptemb calls on every plugin, declared once (typed, documented), and their markers.

A plugin implements a hook with a function marked ``@adaptemb.hookimpl`` and named as the spec below; a misspelled
name fails at registration (``check_pending``). ``adds_compressors`` / ``adds_index_backends`` write the usual
implementation for a plugin that only adds classes.
"""

from __future__ import annotations

from collections.abc import Callable

import pluggy

from adaptemb.index.base import Index
from adaptemb.registry.compressors import CompressorRegistry
from adaptemb.registry.indexes import IndexRegistry
from adaptemb.registry.sources import PROJECT_NAME

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def register_compressors(registry: CompressorRegistry) -> None:
    """Add this plugin's compressors with ``registry.add(CompressorClass)``.

    Called once per plugin when the registry is first built (the first ``adaptemb.fit``,
    ``adaptemb.load``, ``adaptemb.list_compressors``, ...). Returns nothing. Adding a name that
    another plugin already added raises ``DuplicateCompressorError`` naming both plugins. A plugin that
    composes methods adds its factory with ``registry.add_composer(factory)`` (``adaptemb.compose`` does).
    """


@hookspec
def register_index_backends(registry: IndexRegistry) -> None:
    """Add this plugin's search backends with ``registry.add(IndexClass)``.

    ``IndexClass`` subclasses ``adaptemb.index.Index`` and declares ``name`` and ``pairs``, the
    (query code kind, document code kind) pairs it searches; ``Compressor.index`` looks backends up by
    the kinds a compressor declares. Called once per plugin when the index registry is first built.
    Returns nothing. A name or a kind pair that another plugin already registered raises
    ``DuplicateIndexError`` naming both.
    """


def adds_compressors(*classes: type) -> Callable[[CompressorRegistry], None]:
    """A ``register_compressors`` implementation that adds ``classes``, for a plugin that has nothing else to do
    in it: ``register_compressors = adds_compressors(MyCompressor)`` at module level."""

    @hookimpl
    def register_compressors(registry: CompressorRegistry) -> None:
        for cls in classes:
            registry.add(cls)

    return register_compressors


def adds_index_backends(*classes: type[Index]) -> Callable[[IndexRegistry], None]:
    """A ``register_index_backends`` implementation that adds ``classes``:
    ``register_index_backends = adds_index_backends(MyIndex)`` at module level."""

    @hookimpl
    def register_index_backends(registry: IndexRegistry) -> None:
        for cls in classes:
            registry.add(cls)

    return register_index_backends
