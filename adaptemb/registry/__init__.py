"""The plugin manager: the hooks it calls, the registries they fill (compressors, index backends), the manager.

Plugins (functions marked ``@adaptemb.hookimpl`` named as the hook specs below) come from the ``adaptemb``
entry-point group (the built-in methods ship there too) and from ``register_plugin``; the core's own index
backends are registered first, through the same door and hook. Set ``ADAPTEMB_DISABLE_PLUGINS`` to a
comma-separated list of entry-point or distribution names to skip them, or to ``all`` to load no entry point.
Both registries refuse duplicates with an error naming the two sources; a miss lists what exists.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pluggy
import pydantic

from adaptemb._version import __version__
from adaptemb.codes import Codes
from adaptemb.errors import (
    DuplicateCompressorError,
    DuplicateIndexError,
    UnknownCompositionError,
    UnknownCompressorError,
)
from adaptemb.index.base import Index
from adaptemb.index.dense import DenseIndex
from adaptemb.index.float_binary import FloatBinaryIndex
from adaptemb.index.packed import PackedSparseIndex
from adaptemb.index.quantized import BinaryIndex, Int8Index
from adaptemb.index.sparse import SparseIndex

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
    "hookimpl",
    "hookspec",
    "plugin_manager",
    "register_compressors",
    "register_index_backends",
    "register_plugin",
    "reset_plugins",
    "unregister_plugin",
]

PROJECT_NAME = ENTRY_POINT_GROUP = "adaptemb"
DISABLE_ENV_VAR = "ADAPTEMB_DISABLE_PLUGINS"
BUILTIN_INDEX_PLUGIN = "adaptemb-index-backends"

# -- the registries -------------------------------------------------------------------------------

COMPOSE_SEPARATOR = "+"
"""Joins a projection and a quantiser into one method name: ``"svd+rabitq"``."""
_COMPOSER: Callable[[type, type], type] | None = None


def set_composer(composer: Callable[[type, type], type]) -> None:
    """Install the function that builds the class of ``"projection+quantizer"`` from the two registered classes
    (``adaptemb.compose`` installs it; the registry, below the compressors, cannot import it)."""
    global _COMPOSER  # one composer per process, installed once by adaptemb.compose
    _COMPOSER = composer


COMPRESSOR_INTERFACE = ("fit", "encode", "encode_queries", "score", "budgets", "index", "save")
"""What a registered compressor class must offer: what ``adaptemb.Compressor`` subclasses inherit."""


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
    cls: type
    """The ``adaptemb.Compressor`` subclass."""
    source: PluginSource
    summary: str
    budgets: str


class _Attributed:
    """Shared: attribute ``add`` calls to the plugin whose hook is running."""

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


class CompressorRegistry(_Attributed):
    """Maps method names to Compressor classes; filled by the ``register_compressors`` hook."""

    def __init__(self) -> None:
        super().__init__()
        self._entries: dict[str, CompressorInfo] = {}

    def add(self, cls: type) -> None:
        """Register a ``Compressor`` subclass under its ``name``."""
        if not _is_compressor_class(cls):
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
        self._entries[name] = CompressorInfo(name, cls, self._current, summary, getattr(cls, "budget_help", ""))

    def get(self, name: str) -> Any:
        """The class registered as ``name``, or the composed class of ``"projection+quantizer"``; an unknown
        name lists what exists."""
        if isinstance(name, str) and COMPOSE_SEPARATOR in name:
            return self.info(name).cls
        if not isinstance(name, str) or name not in self._entries:
            raise UnknownCompressorError(str(name), self._entries)
        return self._entries[name].cls

    def info(self, name: str) -> CompressorInfo:
        if isinstance(name, str) and COMPOSE_SEPARATOR in name:
            return self._composed(name)
        self.get(name)
        return self._entries[name]

    def with_role(self, role: str) -> list[str]:
        """The registered methods that declare ``role`` (``"projection"`` or ``"quantizer"``), sorted."""
        return [name for name in self.names() if getattr(self._entries[name].cls, "role", None) == role]

    def compositions(self) -> list[str]:
        """Every ``"projection+quantizer"`` name the registered methods compose."""
        return [f"{p}{COMPOSE_SEPARATOR}{q}" for p in self.with_role("projection") for q in self.with_role("quantizer")]

    def _composed(self, name: str) -> CompressorInfo:
        """The info of a composed method: its parts looked up by name and checked for their declared roles."""
        parts = name.split(COMPOSE_SEPARATOR)
        problems = [] if len(parts) == 2 else [f"a composed method has two parts, got {len(parts)}"]
        for part, role in zip(parts, ("projection", "quantizer")):
            entry = self._entries.get(part)
            if not problems and entry is None:
                problems.append(f"{part!r} is not a registered method")
            elif not problems and getattr(entry.cls, "role", None) != role:  # type: ignore[union-attr]
                problems.append(f"{part!r} is not a {role}")
        if problems or _COMPOSER is None:
            raise UnknownCompositionError(name, problems[0] if problems else "no composer is loaded",
                                          self.with_role("projection"), self.with_role("quantizer"))
        projection, quantizer = self._entries[parts[0]], self._entries[parts[1]]
        cls = _COMPOSER(projection.cls, quantizer.cls)
        source = PluginSource(f"{projection.source.plugin}{COMPOSE_SEPARATOR}{quantizer.source.plugin}",
                              projection.source.package, projection.source.version)
        return CompressorInfo(name, cls, source, (inspect.getdoc(cls) or "").split("\n", 1)[0], cls.budget_help)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def infos(self) -> list[CompressorInfo]:
        return [self._entries[name] for name in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._entries


@dataclass(frozen=True)
class IndexBackendInfo:
    """One registered index backend and the plugin that registered it."""

    name: str
    cls: type[Index]
    source: PluginSource


class IndexRegistry(_Attributed):
    """Index backends by name and by the (query kind, document kind) pairs they serve; filled by the
    ``register_index_backends`` hook. A pair has exactly one backend."""

    def __init__(self) -> None:
        super().__init__()
        self._by_name: dict[str, IndexBackendInfo] = {}
        self._by_pair: dict[tuple[str, str], IndexBackendInfo] = {}

    def add(self, cls: type[Index]) -> None:
        """Register an ``adaptemb.index.Index`` subclass for every pair in its ``pairs``."""
        if not (inspect.isclass(cls) and issubclass(cls, Index)) or inspect.isabstract(cls):
            raise TypeError(f"index registry.add needs a concrete adaptemb.index.Index subclass; got {cls!r}")
        name, pairs = getattr(cls, "name", None), getattr(cls, "pairs", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"{cls.__qualname__}.name must be a non-empty string; got {name!r}")
        if not pairs or not all(isinstance(p, tuple) and len(p) == 2 and all(isinstance(k, str) for k in p) for p in pairs):
            raise ValueError(f"{cls.__qualname__}.pairs must list (query kind, document kind) string pairs; got {pairs!r}")
        info = IndexBackendInfo(name, cls, self._current)
        for clash in [self._by_name.get(name)] + [self._by_pair.get(pair) for pair in pairs]:
            if clash is not None:
                raise DuplicateIndexError(
                    f"index backend {cls.__qualname__} ({name!r}, {self._current}) clashes with "
                    f"{clash.cls.__qualname__} ({clash.name!r}, {clash.source}): a name and each (query, document) "
                    f"kind pair have one backend; disable one plugin with {DISABLE_ENV_VAR}"
                )
        self._by_name[name] = info
        self._by_pair.update({pair: info for pair in pairs})

    def for_kinds(self, query_kind: str, doc_kind: str) -> type[Index] | None:
        """The backend serving ``query_kind`` queries against ``doc_kind`` documents, or None."""
        info = self._by_pair.get((query_kind, doc_kind))
        return None if info is None else info.cls

    def get(self, name: str) -> type[Index]:
        """The backend registered as ``name`` (how saved indexes name theirs)."""
        if name not in self._by_name:
            raise ValueError(f"unknown index backend {name!r}; registered: {', '.join(sorted(self._by_name)) or 'none'}")
        return self._by_name[name].cls

    def pairs(self) -> list[tuple[str, str]]:
        """Every served (query kind, document kind) pair, sorted."""
        return sorted(self._by_pair)

    def infos(self) -> list[IndexBackendInfo]:
        return [self._by_name[name] for name in sorted(self._by_name)]


def _is_compressor_class(cls: Any) -> bool:
    """A concrete class offering the Compressor interface with a pydantic config (checked by shape, so
    this module stays below ``adaptemb.compressor`` in the import layers)."""
    if not inspect.isclass(cls) or inspect.isabstract(cls):
        return False
    config = getattr(cls, "Config", None)
    if not (inspect.isclass(config) and issubclass(config, pydantic.BaseModel)):
        return False
    return all(callable(getattr(cls, method, None)) for method in COMPRESSOR_INTERFACE)


# -- the hooks ------------------------------------------------------------------------------------

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


class _CoreIndexBackends:
    """The core's own index backends, a plugin like any other (the manager registers it first)."""

    @hookimpl
    def register_index_backends(self, registry: IndexRegistry) -> None:
        for backend in (DenseIndex, SparseIndex, PackedSparseIndex, BinaryIndex, Int8Index, FloatBinaryIndex):
            registry.add(backend)


# -- the manager ----------------------------------------------------------------------------------


_Filled = TypeVar("_Filled", bound=_Attributed)


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
                manager = pluggy.PluginManager(PROJECT_NAME)
                manager.add_hookspecs(sys.modules[__name__])  # the two hook specs above
                manager.register(_CoreIndexBackends(), name=BUILTIN_INDEX_PLUGIN)
                self._sources[BUILTIN_INDEX_PLUGIN] = PluginSource(BUILTIN_INDEX_PLUGIN, "adaptemb", __version__)
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
