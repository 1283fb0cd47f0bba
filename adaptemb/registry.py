"""The plugin manager and the registry of compressors it fills.

Plugins come from the ``adaptemb`` entry-point group (the built-in methods ship there too) and from
``register_plugin`` calls. Set ``ADAPTEMB_DISABLE_PLUGINS`` to a comma-separated list of entry-point
names or distribution names to skip them, or to ``all`` to load no entry point at all.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import os
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pluggy

from adaptemb import hookspecs
from adaptemb.compressor import Compressor
from adaptemb.errors import DuplicateCompressorError, UnknownCompressorError

ENTRY_POINT_GROUP = "adaptemb"
DISABLE_ENV_VAR = "ADAPTEMB_DISABLE_PLUGINS"


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


@dataclass(frozen=True)
class CompressorInfo:
    """One registered compressor, as ``adaptemb.list_compressors()`` reports it."""

    name: str
    cls: type[Compressor]
    source: PluginSource
    summary: str
    budgets: str


class CompressorRegistry:
    """Maps method names to Compressor classes; filled by the ``register_compressors`` hook."""

    def __init__(self) -> None:
        self._entries: dict[str, CompressorInfo] = {}
        self._current = PluginSource(plugin="<direct>")

    def add(self, cls: type[Compressor]) -> None:
        """Register a Compressor subclass under its ``name``."""
        if not (inspect.isclass(cls) and issubclass(cls, Compressor)) or inspect.isabstract(cls):
            raise TypeError(f"registry.add needs a concrete Compressor subclass; got {cls!r}")
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name.isidentifier() or name != name.lower():
            raise ValueError(f"{cls.__qualname__}.name must be a lower-case identifier; got {name!r}")
        if name in self._entries:
            first = self._entries[name]
            raise DuplicateCompressorError(
                f"compressor {name!r} is registered twice: by {first.source} "
                f"({first.cls.__module__}.{first.cls.__qualname__}) and by {self._current} "
                f"({cls.__module__}.{cls.__qualname__}); disable one with {DISABLE_ENV_VAR}"
            )
        summary = (inspect.getdoc(cls) or "").split("\n", 1)[0]
        self._entries[name] = CompressorInfo(name, cls, self._current, summary, cls.budget_help)

    def get(self, name: str) -> type[Compressor]:
        """The class registered as ``name``; an unknown name lists what exists."""
        if not isinstance(name, str) or name not in self._entries:
            raise UnknownCompressorError(str(name), self._entries)
        return self._entries[name].cls

    def info(self, name: str) -> CompressorInfo:
        self.get(name)
        return self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def infos(self) -> list[CompressorInfo]:
        return [self._entries[name] for name in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    @contextmanager
    def adding_from(self, source: PluginSource) -> Iterator[None]:
        """Attribute the ``add`` calls made inside the block to ``source``."""
        previous, self._current = self._current, source
        try:
            yield
        finally:
            self._current = previous


class _Plugins:
    """Process-wide plugin manager and the registry built from it (built lazily, once)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._manager: pluggy.PluginManager | None = None
        self._sources: dict[str, PluginSource] = {}
        self._registry: CompressorRegistry | None = None

    def manager(self) -> pluggy.PluginManager:
        with self._lock:
            if self._manager is None:
                manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
                manager.add_hookspecs(hookspecs)
                self._manager = manager
                self._load_entry_points()
            return self._manager

    def registry(self) -> CompressorRegistry:
        with self._lock:
            if self._registry is None:
                registry = CompressorRegistry()
                manager = self.manager()
                # call each plugin's hook separately so every add() is attributed to its plugin
                for impl in reversed(manager.hook.register_compressors.get_hookimpls()):
                    source = self._sources.get(impl.plugin_name, PluginSource(impl.plugin_name))
                    with registry.adding_from(source):
                        impl.function(registry=registry)
                self._registry = registry
            return self._registry

    def register(self, plugin: Any, name: str | None = None) -> str:
        with self._lock:
            manager = self.manager()
            plugin_name = manager.register(plugin, name=name)
            if plugin_name is None:
                raise ValueError(f"plugin {name or plugin!r} is blocked by {DISABLE_ENV_VAR}")
            manager.check_pending()
            self._sources.setdefault(plugin_name, PluginSource(plugin_name))
            self._registry = None
            return plugin_name

    def unregister(self, name: str) -> None:
        with self._lock:
            self.manager().unregister(name=name)
            self._sources.pop(name, None)
            self._registry = None

    def reset(self) -> None:
        with self._lock:
            self._manager = None
            self._sources = {}
            self._registry = None

    def _load_entry_points(self) -> None:
        assert self._manager is not None
        disabled = {item.strip() for item in os.environ.get(DISABLE_ENV_VAR, "").split(",") if item.strip()}
        if "all" in disabled:
            return
        for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = entry_point.dist
            package = dist.metadata["Name"] if dist is not None else None
            if entry_point.name in disabled or package in disabled:
                continue
            plugin_name = f"{package}:{entry_point.name}" if package else entry_point.name
            if self._manager.get_plugin(plugin_name) is not None:
                continue  # the same distribution seen twice on sys.path
            try:
                plugin = entry_point.load()
            except Exception as err:  # noqa: BLE001 - a broken third-party plugin must not break adaptemb
                warnings.warn(
                    f"adaptemb: skipping plugin {entry_point.name!r} from {package}: it failed to import "
                    f"({type(err).__name__}: {err}); silence with {DISABLE_ENV_VAR}={entry_point.name}",
                    RuntimeWarning,
                    stacklevel=2,
                )
                continue
            self._manager.register(plugin, name=plugin_name)
            self._sources[plugin_name] = PluginSource(entry_point.name, package, dist.version if dist else None)
        self._manager.check_pending()


_PLUGINS = _Plugins()


def get_registry() -> CompressorRegistry:
    """The registry of every compressor the loaded plugins provide."""
    return _PLUGINS.registry()


def plugin_manager() -> pluggy.PluginManager:
    """The pluggy plugin manager (entry points loaded)."""
    return _PLUGINS.manager()


def register_plugin(plugin: Any, name: str | None = None) -> str:
    """Register a plugin object or module at run time; returns its plugin name."""
    return _PLUGINS.register(plugin, name)


def unregister_plugin(name: str) -> None:
    """Remove a plugin registered with ``register_plugin`` (or by entry point)."""
    _PLUGINS.unregister(name)


def reset_plugins() -> None:
    """Forget every loaded plugin; the next use reloads entry points (and re-reads the env var)."""
    _PLUGINS.reset()
