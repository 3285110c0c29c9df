"""The fast tier: ``pytest -m unit`` runs every test that starts nothing, and a guard keeps the markers true.

A test is ``unit`` when it carries none of the markers in ``NOT_UNIT`` (tests/conftest.py adds the
marker at collection). While a ``unit`` test's setup and call run, starting a process (``subprocess``,
``os.fork``/``posix_spawn``/``system``, a ``multiprocessing`` child), listening on a socket (any
server) or connecting to a database server (psycopg) fails the test with what to mark it. Teardown is
not watched: it also finalizes wider fixtures that other tests set up.
Time is never a failure (tests don't time): ``slow`` is marked by hand from a recorded ``--durations`` run.
The guard fails the test even when the code under test catches the exception (a server thread, an
``except BaseException``): what was refused is also kept and turns the phase's report into a failure.
Threads that were running before the test began (a daemon left by an earlier, non-unit test) are not
the test's doing and are let be. A SQLite file is not a server: unit tests use them freely.
"""

from __future__ import annotations

import multiprocessing.process
import multiprocessing.util
import os
import platform
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest

NOT_UNIT = (
    "process",
    "server",
    "database",
    "postgres",
    "prometheus",
    "chromium",
    "helm",
    "torch",
    "realmodels",
    "slow",
)
"""A test with any of these markers is not in the fast tier."""

WHAT = {
    "process": "starts a process",
    "server": "listens on a socket (a server)",
    "database": "connects to a database server",
}

_refused: list[str] = []
_active = False
_earlier: set[int] = set()  # threads alive before the test began (a daemon's, left by an earlier test)


def _refuse(kind: str, what: str) -> None:
    if not _active or threading.get_ident() in _earlier:
        return
    message = f"this unit test {WHAT[kind]} ({what}): mark it `{kind}` (tests/tiers.py)"
    _refused.append(message)
    pytest.fail(message, pytrace=True)


def _guarded(owner: Any, name: str, kind: str, *, classmethod_: bool = False) -> None:
    original = owner.__dict__[name] if classmethod_ else getattr(owner, name)
    if getattr(original, "__tiers_guard__", False):
        return
    what = f"{getattr(owner, '__name__', owner)}.{name}"

    if classmethod_:
        function: Callable[..., Any] = original.__func__

        def check_cls(cls: Any, *args: Any, **kwargs: Any) -> Any:
            _refuse(kind, what)
            return function(cls, *args, **kwargs)

        check_cls.__tiers_guard__ = True  # type: ignore[attr-defined]
        setattr(owner, name, classmethod(check_cls))
        return

    def check(*args: Any, **kwargs: Any) -> Any:
        _refuse(kind, what)
        return original(*args, **kwargs)

    check.__tiers_guard__ = True  # type: ignore[attr-defined]
    setattr(owner, name, check)


def install() -> None:
    """Wrap the calls that start processes, servers and database connections (inert until ``guarding``).

    What the standard library asks a process for once and then keeps is asked here first, so that no
    test is refused for being the first to ask: ``platform.uname()``'s processor runs ``uname -p``.
    """
    platform.uname().processor  # noqa: B018 (computed on first access, then cached)
    _guarded(subprocess.Popen, "_execute_child", "process")
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            _guarded(os, name, "process")
    _guarded(multiprocessing.process.BaseProcess, "start", "process")
    _guarded(multiprocessing.util, "spawnv_passfds", "process")
    _guarded(socket.socket, "listen", "server")
    try:
        import psycopg
    except ImportError:
        return
    _guarded(psycopg.Connection, "connect", "database", classmethod_=True)
    psycopg.connect = psycopg.Connection.connect  # the module's alias was bound at its import


@contextmanager
def guarding(item: pytest.Item) -> Iterator[list[str]]:
    """Refuse, during one phase of ``item`` when it is ``unit``; yields what was refused."""
    global _active
    found: list[str] = []
    if item.get_closest_marker("unit") is None:
        yield found
        return
    _refused.clear()
    _earlier.clear()
    _earlier.update(t.ident for t in threading.enumerate() if t.ident is not None and t is not threading.main_thread())
    _active = True
    try:
        yield found
    finally:
        _active = False
        found.extend(_refused)
        _refused.clear()


F = TypeVar("F", bound=Callable[..., Any])


def starts(*kinds: str) -> Callable[[F], F]:
    """Mark a fixture as starting ``kinds`` (``process``, ``server``, ``database``): every test using it is marked so.

    Put it under ``@pytest.fixture``. A module-scoped fixture starts its process in whichever test
    asks first; marking the fixture marks all of them, whatever order they run in.
    """
    unknown = set(kinds) - set(NOT_UNIT)
    if unknown:
        raise ValueError(f"not a marker of tests/tiers.py: {sorted(unknown)}")

    def mark(function: F) -> F:
        function.__tiers_starts__ = kinds  # type: ignore[attr-defined]
        return function

    return mark


def _started_by_fixtures(item: pytest.Item) -> set[str]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    return {
        kind
        for definitions in info.name2fixturedefs.values()
        if definitions
        for kind in getattr(definitions[-1].func, "__tiers_starts__", ())
    }


def mark_units(items: list[pytest.Item]) -> None:
    """Mark what fixtures start (``starts``), then ``unit`` on every item with none of ``NOT_UNIT`` (before ``-m``)."""
    for item in items:
        for kind in sorted(_started_by_fixtures(item)):
            if item.get_closest_marker(kind) is None:
                item.add_marker(getattr(pytest.mark, kind))
        if not any(item.get_closest_marker(name) for name in NOT_UNIT):
            item.add_marker(pytest.mark.unit)
