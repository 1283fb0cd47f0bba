"""The plugin manager: the core's built-in plugins, then the ``adaptemb`` entry points, and the registries they fill.

Every plugin goes through the same door, ``pm.register``: first the core's own (its index backends, and
``BUILTIN_PLUGINS``, the composer of ``"projection+quantizer"``), then the entry points of the group ``adaptemb``
(the built-in methods ship there too), then whatever ``register_plugin`` adds at run time. Set
``ADAPTEMB_DISABLE_PLUGINS`` to a comma-separated list of entry-point or distribution names to skip them, or to
``all`` to load no entry point (the core's plugins always load). Each registry is built lazily, once, by calling
every plugin's hook.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import threading
import warnings
from typing import Any, TypeVar

import pluggy

from adaptemb._version import __version__
from adaptemb.codes import Codes
from adaptemb.index.base import Index
from adaptemb.index.dense import DenseIndex
from adaptemb.index.float_binary import FloatBinaryIndex
from adaptemb.index.packed import PackedSparseIndex
from adaptemb.index.quantized import BinaryIndex, Int8Index
from adaptemb.index.sparse import SparseIndex
from adaptemb.registry import hookspecs
from adaptemb.registry.compressors import CompressorRegistry
from adaptemb.registry.hookspecs import hookimpl
from adaptemb.registry.indexes import IndexRegistry
from adaptemb.registry.sources import (
    DISABLE_ENV_VAR,
    ENTRY_POINT_GROUP,
    PROJECT_NAME,
    Attributed,
    PluginSource,
)

BUILTIN_INDEX_PLUGIN = "adaptemb-index-backends"
BUILTIN_PLUGINS: dict[str, str] = {"adaptemb-compositions": "adaptemb.compose.plugin"}
"""The core's plugins built on the registry (plugin name: module), registered by module name as entry points
are (the registry, below them, imports none of them); no module imports them."""


class _CoreIndexBackends:
    """The core's own index backends, a plugin like any other (the manager registers it first)."""

    @hookimpl
    def register_index_backends(self, registry: IndexRegistry) -> None:
        for backend in (DenseIndex, SparseIndex, PackedSparseIndex, BinaryIndex, Int8Index, FloatBinaryIndex):
            registry.add(backend)


_Filled = TypeVar("_Filled", bound=Attributed)


class _Plugins:
    """Process-wide plugin manager and the registries built from it (built lazily, once)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._manager: pluggy.PluginManager | None = None
        self._sources: dict[str, PluginSource] = {}
        self._registry: CompressorRegistry | None = None
        self._index_registry: IndexRegistry | None = None

    def manager(self) -> pluggy.PluginManager:
        with self._lock:
            if self._manager is None:
                manager = pluggy.PluginManager(PROJECT_NAME)
                manager.add_hookspecs(hookspecs)
                core = {BUILTIN_INDEX_PLUGIN: _CoreIndexBackends()}
                core.update({name: importlib.import_module(module) for name, module in BUILTIN_PLUGINS.items()})
                for name, plugin in core.items():
                    manager.register(plugin, name=name)
                    self._sources[name] = PluginSource(name, "adaptemb", __version__)
                self._manager = manager
                self._load_entry_points()
            return self._manager

    def registry(self) -> CompressorRegistry:
        with self._lock:
            if self._registry is None:
                self._registry = self._fill(CompressorRegistry(), self.manager().hook.register_compressors)
            return self._registry

    def index_registry(self) -> IndexRegistry:
        with self._lock:
            if self._index_registry is None:
                self._index_registry = self._fill(IndexRegistry(), self.manager().hook.register_index_backends)
            return self._index_registry

    def _fill(self, registry: _Filled, hook: Any) -> _Filled:
        """Call each plugin's implementation of ``hook`` separately so every add() is attributed to it."""
        for impl in reversed(hook.get_hookimpls()):
            source = self._sources.get(impl.plugin_name, PluginSource(impl.plugin_name))
            with registry.adding_from(source):
                impl.function(registry=registry)
        return registry

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
    return get_index_registry().build(docs, query_kind=query_kind, device=device, **options)


def plugin_manager() -> pluggy.PluginManager:
    """The pluggy plugin manager, every plugin loaded (the core's and the entry points; plugins may define code
    kinds, so a file of codes is read after this)."""
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
