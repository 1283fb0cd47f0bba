"""The registry of compressors: method names to ``Compressor`` classes, and the composer of ``"projection+quantizer"``.

Filled by the ``register_compressors`` hook. A plugin adds a class with ``registry.add(cls)``; a plugin that
composes methods adds its factory with ``registry.add_composer(factory)``, which ``get("svd+rabitq")`` then calls
with the two registered classes (``adaptemb.compose`` is that plugin, built in). Duplicates raise an error naming
both sources; a miss lists what exists.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pydantic

from adaptemb.errors import DuplicateCompressorError, UnknownCompositionError, UnknownCompressorError
from adaptemb.registry.sources import DISABLE_ENV_VAR, Attributed, PluginSource

COMPOSE_SEPARATOR = "+"
"""Joins a projection and a quantiser into one method name: ``"svd+rabitq"``."""
COMPRESSOR_INTERFACE = ("fit", "encode", "encode_queries", "score", "budgets", "index", "save")
"""What a registered compressor class must offer: what ``adaptemb.Compressor`` subclasses inherit."""

Composer = Callable[[type, type], type]
"""Builds the class of ``"projection+quantizer"`` from the two registered classes."""


@dataclass(frozen=True)
class CompressorInfo:
    """One registered compressor, as ``adaptemb.list_compressors()`` reports it."""

    name: str
    cls: type
    """The ``adaptemb.Compressor`` subclass."""
    source: PluginSource
    summary: str
    budgets: str


class CompressorRegistry(Attributed):
    """Maps method names to Compressor classes; filled by the ``register_compressors`` hook."""

    def __init__(self) -> None:
        super().__init__()
        self._entries: dict[str, CompressorInfo] = {}
        self._composer: tuple[Composer, PluginSource] | None = None

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

    def add_composer(self, composer: Composer) -> None:
        """Register the factory ``get("projection+quantizer")`` calls with the two registered classes (one per
        registry: a second raises ``DuplicateCompressorError`` naming both plugins)."""
        if self._composer is not None:
            raise DuplicateCompressorError(f"compositions are composed twice: by {self._composer[1]} and by "
                                           f"{self._current}; disable one with {DISABLE_ENV_VAR}")
        self._composer = (composer, self._current)

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
        if problems or self._composer is None:
            raise UnknownCompositionError(name, problems[0] if problems else "no composer is loaded",
                                          self.with_role("projection"), self.with_role("quantizer"))
        projection, quantizer = self._entries[parts[0]], self._entries[parts[1]]
        cls = self._composer[0](projection.cls, quantizer.cls)
        source = PluginSource(f"{projection.source.plugin}{COMPOSE_SEPARATOR}{quantizer.source.plugin}",
                              projection.source.package, projection.source.version)
        return CompressorInfo(name, cls, source, (inspect.getdoc(cls) or "").split("\n", 1)[0], cls.budget_help)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def infos(self) -> list[CompressorInfo]:
        return [self._entries[name] for name in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._entries


def _is_compressor_class(cls: Any) -> bool:
    """A concrete class offering the Compressor interface with a pydantic config (checked by shape, so
    this module stays below ``adaptemb.compressor`` in the import layers)."""
    if not inspect.isclass(cls) or inspect.isabstract(cls):
        return False
    config = getattr(cls, "Config", None)
    if not (inspect.isclass(config) and issubclass(config, pydantic.BaseModel)):
        return False
    return all(callable(getattr(cls, method, None)) for method in COMPRESSOR_INTERFACE)
