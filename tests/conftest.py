"""Shared test helpers: optional suites skip on a laptop but are mandatory in CI.

``.ci/run`` sets ``ONNXMON_REQUIRE=postgres,prometheus,chromium,helm,...,torch``; a suite whose
tool is missing then fails instead of skipping, so CI can never pass by skipping.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis profiles. CI runs derandomized ("ci"), so a change can never fail on an example drawn
# by chance; a laptop draws fresh examples ("dev"); `--hypothesis-profile fuzz` is the long random
# run to do before handing work in (a case it finds becomes an @example). `--hypothesis-profile`
# or HYPOTHESIS_PROFILE picks one; otherwise CI=true means "ci".
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.register_profile(
    "fuzz", max_examples=2000, deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "dev"))

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


# How a clone gets the `torch` extra (onnxmon is not on PyPI); docs/pytorch.md says the same.
TORCH_INSTALL = ".venv/bin/pip install -e '.[torch]'"


def need_torch(*, onnxscript: bool = True) -> None:
    """Skip (or fail, under ``ONNXMON_REQUIRE=torch``) unless torch, and onnxscript when asked, import.

    torch is tried first, so a machine without it is told it lacks torch, not onnxscript.
    """
    for name in ("torch", "onnxscript") if onnxscript else ("torch",):
        try:
            __import__(name)
        except ImportError as exc:
            unavailable("torch", f"{name} is not installed ({exc}): {TORCH_INSTALL}")


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


# --- the source tree is read-only to tests ---------------------------------------------------------

_SOURCE = Path(__file__).resolve().parents[1] / "monitor"
_source_files: set[str] = set()


def _source_listing() -> set[str]:
    return {
        str(path.relative_to(_SOURCE))
        for path in _SOURCE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def pytest_sessionstart(session: pytest.Session) -> None:
    _source_files.update(_source_listing())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a test left files in (or took files from) ``monitor/``: tests write to tmp only."""
    now = _source_listing()
    added, removed = sorted(now - _source_files), sorted(_source_files - now)
    if added or removed:
        print(f"\nthe test run changed the source tree monitor/: added {added}, removed {removed}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# --- the result spool's default home is per test ----------------------------------------------------


@pytest.fixture(autouse=True)
def _state_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``XDG_STATE_HOME`` (where the default result spool lives) is a fresh folder for every test.

    Daemons started in-process and ``onnxmon serve`` children (they inherit the environment) never
    spool into the user's ``~/.local/state`` nor into another test's spool.
    """
    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (root only; skipped where mount is refused), unmounted afterwards."""
    from tests.disks import mounted_tmpfs

    with mounted_tmpfs(tmp_path / "dbvolume") as where:
        yield where
