"""Shared fixtures. Plugins registered by a test are removed again by the ``fresh_plugins`` fixture."""

import os
from collections.abc import Iterator

import pytest

from adaptemb.registry import reset_plugins

# the example third-party package has its own tests; test_third_party_plugin.py runs them installed
collect_ignore = ["plugin_example"]


def pytest_configure(config: pytest.Config) -> None:
    """Each pytest-xdist worker (``-n``) computes on one thread: torch's pool, adaptemb's fits and search kernels
    (``ADAPTEMB_NUM_THREADS``) and OpenMP (faiss). Workers with a pool of every core each spin against each other.
    A test that sets its own count still does."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.setdefault("ADAPTEMB_NUM_THREADS", "1")
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        import torch

        torch.set_num_threads(1)


@pytest.fixture
def fresh_plugins() -> Iterator[None]:
    """Start from freshly loaded plugins and restore them afterwards."""
    reset_plugins()
    yield
    reset_plugins()
