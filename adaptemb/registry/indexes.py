"""The registry of index backends: by name, and by the (query kind, document kind) pairs they serve.

Filled by the ``register_index_backends`` hook; a pair has exactly one backend. ``build`` makes an index over
document codes from the backend registered for their kinds (what ``adaptemb.build_index`` calls).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from adaptemb.codes import Codes
from adaptemb.errors import DuplicateIndexError
from adaptemb.index.base import Index
from adaptemb.registry.sources import DISABLE_ENV_VAR, Attributed, PluginSource


@dataclass(frozen=True)
class IndexBackendInfo:
    """One registered index backend and the plugin that registered it."""

    name: str
    cls: type[Index]
    source: PluginSource


class IndexRegistry(Attributed):
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

    def build(self, docs: Codes, *, query_kind: str | None = None, device: str = "auto", **options: Any) -> Index:
        """An index over ``docs`` from the backend registered for (``query_kind``, ``docs.kind``); the
        arguments are those of ``adaptemb.build_index``. An unserved pair raises ``ValueError`` listing the
        served ones."""
        pair = (query_kind or docs.kind, docs.kind)
        backend = self.for_kinds(*pair)
        if backend is None:
            known = ", ".join(f"{q}→{d}" for q, d in self.pairs())
            raise ValueError(f"no index backend for {pair[0]} queries against {pair[1]} documents; served: {known}")
        return backend(docs, device=device, query_kind=pair[0], **options)
