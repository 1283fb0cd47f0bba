"""The hooks adaptemb calls on plugins. Every hook lives here, typed and documented.

A plugin is a module (or object) with functions marked ``@adaptemb.hookimpl`` whose names match
these specs. Third-party plugins are found through the ``adaptemb`` entry-point group; the built-in
methods are registered through the very same group, and the core's own index backends through the
same ``register_index_backends`` hook.
"""

from __future__ import annotations

import pluggy

from adaptemb.registries import CompressorRegistry, IndexRegistry

PROJECT_NAME = "adaptemb"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def register_compressors(registry: CompressorRegistry) -> None:
    """Add this plugin's compressors with ``registry.add(CompressorClass)``.

    Called once per plugin when the registry is first built (the first ``adaptemb.fit``,
    ``adaptemb.load``, ``adaptemb.list_compressors``, ...). Returns nothing. Adding a name that
    another plugin already added raises ``DuplicateCompressorError`` naming both plugins.
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
