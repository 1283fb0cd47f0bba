"""The hooks adaptemb calls on plugins. Every hook lives here, typed and documented.

A plugin is a module (or object) with functions marked ``@adaptemb.hookimpl`` whose names match
these specs. Third-party plugins are found through the ``adaptemb`` entry-point group; the built-in
methods are registered through the very same group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from adaptemb.registry import CompressorRegistry

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
