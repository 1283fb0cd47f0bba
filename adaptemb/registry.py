"""The plugin manager and the registries it fills (compressors, index backends).

Plugins come from the ``adaptemb`` entry-point group (the built-in methods ship there too) and from
``register_plugin`` calls; the core's index backends (``adaptemb.index.builtin``) are registered first,
through the same ``pm.register`` door. Set ``ADAPTEMB_DISABLE_PLUGINS`` to a comma-separated list of
entry-point names or distribution names to skip them, or to ``all`` to load no entry point at all.
"""

from __future__ import annotations

import importlib.metadata
import os
import threading
import warnings
from typing import Any

import pluggy

from adaptemb import hookspecs
from adaptemb._version import __version__
from adaptemb.codes import Codes
from adaptemb.index import builtin as builtin_index_backends
from adaptemb.index.base import Index
from adaptemb.registries import (
    DISABLE_ENV_VAR,
    CompressorInfo,
    CompressorRegistry,
    IndexBackendInfo,
    IndexRegistry,
    PluginSource,
)

__all__ = [
    "DISABLE_ENV_VAR",
    "ENTRY_POINT_GROUP",
    "CompressorInfo",
    "CompressorRegistry",
    "IndexBackendInfo",
    "IndexRegistry",
    "PluginSource",
    "build_index",
    "get_index_registry",
    "get_registry",
    "plugin_manager",
    "register_plugin",
    "reset_plugins",
    "unregister_plugin",
]

ENTRY_POINT_GROUP = "adaptemb"
BUILTIN_INDEX_PLUGIN = "adaptemb-index-backends"


class _Plugins:
    """Process-wide plugin manager and the registry built from it (built lazily, once)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._manager: pluggy.PluginManager | None = None
        self._sources: dict[str, PluginSource] = {}
        self._registry: CompressorRegistry | None = None
        self._index_registry: IndexRegistry | None = None

    def manager(self) -> pluggy.PluginManager:
        with self._lock:
            if self._manager is None:
                manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
                manager.add_hookspecs(hookspecs)
                manager.register(builtin_index_backends, name=BUILTIN_INDEX_PLUGIN)
                self._sources[BUILTIN_INDEX_PLUGIN] = PluginSource(BUILTIN_INDEX_PLUGIN, "adaptemb", __version__)
                self._manager = manager
                self._load_entry_points()
            return self._manager

    def registry(self) -> CompressorRegistry:
        with self._lock:
            if self._registry is None:
                registry = CompressorRegistry()
                manager = self.manager()
                self._fill(registry, manager.hook.register_compressors)
                self._registry = registry
            return self._registry

    def index_registry(self) -> IndexRegistry:
        with self._lock:
            if self._index_registry is None:
                registry = IndexRegistry()
                self._fill(registry, self.manager().hook.register_index_backends)
                self._index_registry = registry
            return self._index_registry

    def _fill(self, registry: CompressorRegistry | IndexRegistry, hook: Any) -> None:
        """Call each plugin's implementation of ``hook`` separately so every add() is attributed to it."""
        for impl in reversed(hook.get_hookimpls()):
            source = self._sources.get(impl.plugin_name, PluginSource(impl.plugin_name))
            with registry.adding_from(source):
                impl.function(registry=registry)

    def register(self, plugin: Any, name: str | None = None) -> str:
        with self._lock:
            manager = self.manager()
            plugin_name = manager.register(plugin, name=name)
            if plugin_name is None:
                raise ValueError(f"plugin {name or plugin!r} is blocked by {DISABLE_ENV_VAR}")
            manager.check_pending()
            self._sources.setdefault(plugin_name, PluginSource(plugin_name))
            self._registry = self._index_registry = None
            return plugin_name

    def unregister(self, name: str) -> None:
        with self._lock:
            self.manager().unregister(name=name)
            self._sources.pop(name, None)
            self._registry = self._index_registry = None

    def reset(self) -> None:
        with self._lock:
            self._manager = None
            self._sources = {}
            self._registry = self._index_registry = None

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


def get_index_registry() -> IndexRegistry:
    """The registry of every index backend the core and the loaded plugins provide."""
    return _PLUGINS.index_registry()


def build_index(docs: Codes, *, query_kind: str | None = None, device: str = "auto", **options: Any) -> Index:
    """An index over ``docs`` from the backend registered for (``query_kind``, ``docs.kind``).

    ``query_kind`` defaults to the documents' kind; ``device`` is ``"auto"``, ``"cpu"`` or ``"cuda"``;
    ``options`` go to the backend (``query_batch``, ``backend``, ...). An unserved pair raises
    ``ValueError`` listing the served ones. ``Compressor.index`` is the usual way in: it knows the kinds.
    """
    pair = (query_kind or docs.kind, docs.kind)
    registry = get_index_registry()
    backend = registry.for_kinds(*pair)
    if backend is None:
        known = ", ".join(f"{q}→{d}" for q, d in registry.pairs())
        raise ValueError(f"no index backend for {pair[0]} queries against {pair[1]} documents; served: {known}")
    return backend(docs, device=device, query_kind=pair[0], **options)


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
