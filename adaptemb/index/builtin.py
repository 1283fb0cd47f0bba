"""The core's own index backends, registered through the same ``register_index_backends`` hook as a
third-party plugin's (the plugin manager registers this module first)."""

from __future__ import annotations

from adaptemb.hookspecs import hookimpl
from adaptemb.index.dense import DenseIndex
from adaptemb.index.quantized import BinaryIndex, Int8Index
from adaptemb.index.sparse import SparseIndex
from adaptemb.registries import IndexRegistry

BUILTIN_BACKENDS = (DenseIndex, SparseIndex, BinaryIndex, Int8Index)


@hookimpl
def register_index_backends(registry: IndexRegistry) -> None:
    for backend in BUILTIN_BACKENDS:
        registry.add(backend)
