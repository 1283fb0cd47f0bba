"""Shared fixtures. Plugins registered by a test are removed again by the ``fresh_plugins`` fixture."""

from collections.abc import Iterator

import pytest

from adaptemb.registry import reset_plugins

# the example third-party package has its own tests; test_third_party_plugin.py runs them installed
collect_ignore = ["plugin_example"]


@pytest.fixture
def fresh_plugins() -> Iterator[None]:
    """Start from freshly loaded plugins and restore them afterwards."""
    reset_plugins()
    yield
    reset_plugins()
