"""Fixtures shared by the tests of the daemon's surfaces (API, pages, metrics): one built scenario per
test module (``tests/test_metrics.py``'s ``build_scenario``) and a freshly migrated SQLite store per test.

Registered for every test by ``pytest_plugins`` in ``tests/conftest.py``; a module that defines its own
``scenario`` or ``store`` uses its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.store import Store
from tests.test_metrics import Scenario, build_scenario, migrated_store


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    return build_scenario(tmp_path_factory)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    yield from migrated_store(tmp_path)
