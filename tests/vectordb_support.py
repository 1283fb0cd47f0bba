"""What the vector-database tests share: skip markers for the optional clients, an in-memory Qdrant holding codes,
and a client of an exported Qdrant folder or Milvus Lite file that is closed afterwards."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import adaptemb
from adaptemb.vectordb import export_codes, milvus_client, qdrant_client, release_milvus_lite

needs_qdrant = pytest.mark.skipif(importlib.util.find_spec("qdrant_client") is None, reason="needs qdrant-client")
needs_milvus = pytest.mark.skipif(importlib.util.find_spec("pymilvus") is None or importlib.util.find_spec("milvus_lite") is None,
                                  reason="needs pymilvus and milvus-lite")


def in_memory(codes: adaptemb.Codes, **export_options: Any) -> Any:
    """An in-memory Qdrant holding ``codes`` in collection ``adaptemb`` (a client this process keeps and searches)."""
    client = qdrant_client(":memory:")
    export_codes(codes, location=client, **export_options)
    return client


@contextmanager
def opened(to: str, location: str) -> Iterator[Any]:
    """A client of the Qdrant folder or Milvus Lite ``.db`` file ``location``; closed on leaving (and this process's
    Milvus Lite server for the file stopped), so the file is free for another client or process."""
    client = qdrant_client(location) if to == "qdrant" else milvus_client(location)
    try:
        yield client
    finally:
        client.close()
        if to == "milvus":
            release_milvus_lite(location)
