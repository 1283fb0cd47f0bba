"""adaptemb's pytest plugin: the contract suite's fixtures and markers.

pytest loads it by itself wherever adaptemb is installed (entry point ``pytest11``), so a plugin author's
``class TestMine(adaptemb.testing.CompressorContract)`` finds its fixtures and markers with no conftest.
It imports adaptemb only when a contract test asks for a fixture, so it costs other projects nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

MARKERS = (
    "slow: takes more than a few seconds (still run by a full test run)",
    "gpu: needs CUDA; skipped when no GPU is present",
)


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)


@pytest.fixture(scope="class")
def contract_data() -> tuple[Any, Any]:
    """Unit-norm clustered rows (240 × 32) and their cluster ids, shared by a contract class."""
    from adaptemb.testing import clustered_embeddings

    return clustered_embeddings()


@pytest.fixture(scope="class")
def contract_params(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The method's ``test_params`` overlaid with the test class's ``params`` (``CompressorContract.fit_params``)."""
    return request.cls.fit_params()


@pytest.fixture(scope="class")
def contract_fitted(request: pytest.FixtureRequest, contract_data: tuple[Any, Any], contract_params: dict[str, Any]) -> Any:
    """The test class's method fitted once on ``contract_data`` with ``contract_params``."""
    import adaptemb

    return adaptemb.get_compressor(request.cls.method, **contract_params).fit(contract_data[0])
