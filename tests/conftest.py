"""Shared test helpers: optional suites skip on a laptop but are mandatory in CI.

``.ci/run`` sets ``ONNXMON_REQUIRE=postgres,prometheus,chromium,helm``; a suite whose
tool is missing then fails instead of skipping, so CI can never pass by skipping.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

POSTGRES_URL_ENV = "ONNXMON_TEST_POSTGRES_URL"
DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def required(suite: str) -> bool:
    """True when CI (or the user) declared ``suite`` mandatory via ``ONNXMON_REQUIRE``."""
    return suite in {s.strip() for s in os.environ.get("ONNXMON_REQUIRE", "").split(",") if s.strip()}


def unavailable(suite: str, why: str) -> None:
    """Skip the calling test, or fail it when the suite is mandatory."""
    if required(suite):
        pytest.fail(f"{suite} suite is mandatory here (ONNXMON_REQUIRE) but unavailable: {why}")
    pytest.skip(f"{suite} unavailable: {why}")


def need_binary(suite: str, name: str) -> str:
    """Path of binary ``name`` or skip/fail the test."""
    path = shutil.which(name)
    if path is None:
        unavailable(suite, f"'{name}' not on PATH")
        raise AssertionError("unreachable")
    return path


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """URL of a reachable PostgreSQL (``ONNXMON_TEST_POSTGRES_URL``), or skip/fail."""
    url = os.environ.get(POSTGRES_URL_ENV, DEFAULT_POSTGRES_URL)
    try:
        import psycopg

        dsn = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn, connect_timeout=3):
            pass
    except Exception as exc:  # any failure to connect means "unavailable"
        unavailable("postgres", f"{url}: {exc}")
    return url


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory for tests that write relative paths."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
