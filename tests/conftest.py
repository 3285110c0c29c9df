"""Shared test helpers: optional suites skip on a laptop but are mandatory in CI.

``.ci/run`` sets ``ONNXMON_REQUIRE=postgres,prometheus,chromium,helm,...,torch``; a suite whose
tool is missing then fails instead of skipping, so CI can never pass by skipping.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, settings

from tests import tiers

pytest_plugins = ["tests.scenario_fixtures"]  # scenario and store, shared by the surface tests

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
    """URL of a reachable PostgreSQL (``ONNXMON_TEST_POSTGRES_URL``), or skip/fail.

    Under pytest-xdist each worker gets its own database beside the configured one (``test_gw0``,
    ``test_gw1``, ..., created when missing), so workers never share tables, schemas or locks.
    """
    url = os.environ.get(POSTGRES_URL_ENV, DEFAULT_POSTGRES_URL)
    try:
        import psycopg

        dsn = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn, connect_timeout=3, autocommit=True) as conn:
            worker = os.environ.get("PYTEST_XDIST_WORKER")
            if worker:
                base, _, query = url.partition("?")
                name = f"{base.rsplit('/', 1)[1]}_{worker}"
                if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                    conn.execute(f'CREATE DATABASE "{name}"')
                url = f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")
    except Exception as exc:  # any failure to connect means "unavailable"
        unavailable("postgres", f"{url}: {exc}")
    return url


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory for tests that write relative paths."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- the CLI, in this process -----------------------------------------------------------------------


class Ran(NamedTuple):
    """What one ``onnxmon`` command did: its exit code and what it wrote to stdout and stderr."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        """stdout then stderr."""
        return self.stdout + self.stderr


def onnxmon(*argv: str | Path) -> Ran:
    """``onnxmon ARGV`` through the console script's ``main`` in this process.

    Exit codes and ``onnxmon: error:`` lines are what a user sees; nothing is started (a ``unit`` test
    may use it unless the command itself starts a worker, e.g. ``check``).
    """
    from monitor import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(arg) for arg in argv])
    return Ran(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="session")
def run_cli() -> Callable[..., Ran]:
    """The shared CLI runner: ``cli("check", "clf", "-c", config)`` returns a ``Ran``."""
    return onnxmon


# --- the source tree is read-only to tests ---------------------------------------------------------

_SOURCE = Path(__file__).resolve().parents[1] / "monitor"
_source_files: set[str] = set()


def _source_listing() -> set[str]:
    return {
        str(path.relative_to(_SOURCE))
        for path in _SOURCE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


# --- the fast tier (tests/tiers.py) and the parallel default --------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Run on every core by default (``-n auto``).

    Not when ``-n`` is given (``-n 0``: one process), xdist is off (``-p no:xdist``), in a worker,
    or when only collecting.
    """
    if (
        config.pluginmanager.hasplugin("xdist")
        and getattr(config.option, "numprocesses", 0) is None
        and not hasattr(config, "workerinput")
        and not config.getoption("collectonly")
    ):
        config.option.numprocesses = "auto"


def pytest_configure(config: pytest.Config) -> None:
    tiers.install()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers.mark_units(items)


_REFUSED = pytest.StashKey[dict[str, list[str]]]()


def _guarded_phase(item: pytest.Item, when: str) -> Iterator[None]:
    with tiers.guarding(item) as found:
        yield
    item.stash.setdefault(_REFUSED, {})[when] = found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from _guarded_phase(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _guarded_phase(item, "call"))


# Teardown is not guarded: it also finalizes module- and session-scoped fixtures that another,
# non-unit test set up (a PostgreSQL schema dropped after the module's last test, a sqlite one).


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A unit test whose phase started a process, a server or a database connection fails, even if caught."""
    report = yield
    found = item.stash.get(_REFUSED, {}).pop(call.when, [])
    if found and report.outcome != "failed":
        report.outcome = "failed"
        report.longrepr = "\n".join(found)
    return report


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
