"""The registries plugins fill: compressors by method name, index backends by (query kind, document kind).

Plugins receive these objects in their hooks (``register_compressors(registry)``,
``register_index_backends(registry)``, see ``adaptemb.hookspecs``); the plugin manager in
``adaptemb.registry`` builds them once per process. Both refuse duplicates with an error naming the two
sources, and a miss lists what exists.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pydantic

from adaptemb.errors import DuplicateCompressorError, DuplicateIndexError, UnknownCompressorError
from adaptemb.index.base import Index

DISABLE_ENV_VAR = "ADAPTEMB_DISABLE_PLUGINS"
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
