"""Where a registered compressor, composer or index backend came from, and the attribution both registries share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

PROJECT_NAME = ENTRY_POINT_GROUP = "adaptemb"
"""The pluggy project name and the entry-point group plugins (the built-in methods too) are found in."""
DISABLE_ENV_VAR = "ADAPTEMB_DISABLE_PLUGINS"
"""Comma-separated entry-point or distribution names to skip, or ``all`` to load no entry point."""


@dataclass(frozen=True)
class PluginSource:
    """Where a plugin came from: its plugin name, and the distribution that ships it (if any)."""

    plugin: str
    package: str | None = None
    version: str | None = None

    def __str__(self) -> str:
        if self.package is None:
            return f"plugin {self.plugin!r}"
        return f"plugin {self.plugin!r} from {self.package} {self.version}"


class Attributed:
    """Shared by the registries: attribute ``add`` calls to the plugin whose hook is running."""

    def __init__(self) -> None:
        self._current = PluginSource(plugin="<direct>")

    @contextmanager
    def adding_from(self, source: PluginSource) -> Iterator[None]:
        """Attribute the ``add`` calls made inside the block to ``source``."""
        previous, self._current = self._current, source
        try:
            yield
        finally:
            self._current = previous
