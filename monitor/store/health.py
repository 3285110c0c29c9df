"""Is the history database usable right now? Bounded probes, time limits, and the SQLite file's identity.

Every statement runs under a time limit so that a database that hangs (a table locked by another
session, a write-locked SQLite file) costs a bounded wait and an error, never a thread:
PostgreSQL gets ``SET LOCAL statement_timeout`` per transaction, SQLite ``PRAGMA busy_timeout``.
``probe`` is what ``/readyz`` and the daemon's periodic ping run: it reads the tables the daemon
writes (so a lock on them shows) and, on SQLite, takes and drops the write lock. ``FileWatch``
remembers the inode of a SQLite file at the first connection, so a file deleted or replaced under
the daemon (whose open connections would keep writing into the unlinked inode, lost at restart)
is noticed. A database without the onnxmon schema (dropped and recreated empty) is
``StoreUnavailable``: an outage the spool waits out, not a refused write.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

UPGRADE_HINT = "run `onnxmon db upgrade`"
_UNDEFINED_TABLE = "42P01"  # PostgreSQL SQLSTATE undefined_table


class StoreUnavailable(Exception):
    """The history database cannot be used now: an outage that callers wait out, never a refused write.

    Raised by the store at its boundary for every such cause (no schema, the file gone, a URL no
    driver takes, and, as ``StoreOutage``, the driver's own "unavailable" errors), so that the
    sinks, the API and the CLI tell an outage by this class, never by the driver's class names.
    """


class StoreOutage(StoreUnavailable):
    """The driver says the database is unavailable: refused or cut connection, locked or full file, timeout."""


def limit(connection: Connection, timeout_s: float | None) -> None:
    """Bound every statement of the current transaction (``None``: no limit)."""
    ms = 0 if timeout_s is None else max(1, int(timeout_s * 1000))
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SET LOCAL statement_timeout = {ms}")
    elif connection.dialect.name == "sqlite":
        connection.exec_driver_sql(f"PRAGMA busy_timeout = {ms if ms else 2**31 - 1}")


def schema_missing(exc: BaseException) -> bool:
    """True when ``exc`` says onnxmon's tables do not exist (an empty or recreated database)."""
    if not isinstance(exc, DBAPIError):
        return False
    if getattr(exc.orig, "sqlstate", None) == _UNDEFINED_TABLE:
        return True
    return "no such table" in str(exc.orig)


def probe(connection: Connection) -> str | None:
    """None when the schema is there and the tables onnxmon writes can be read (and, on SQLite, locked)."""
    try:
        revision = connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    except DBAPIError as exc:
        if schema_missing(exc):
            return f"the database has no onnxmon schema (empty or recreated): {UPGRADE_HINT}"
        raise
    if revision is None:
        return f"the database has no onnxmon schema revision: {UPGRADE_HINT}"
    connection.execute(text("SELECT max(id) FROM runs"))
    if connection.dialect.name == "sqlite":  # readers never wait in WAL mode; a held write lock shows here
        connection.exec_driver_sql("BEGIN IMMEDIATE")
        connection.exec_driver_sql("ROLLBACK")
    return None


def describe(exc: BaseException) -> str:
    """One line saying why the database did not answer (the driver's message, no SQL, no parameters)."""
    if isinstance(exc, StoreOutage):  # already described at the boundary
        return str(exc)[:300]
    cause = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    first = (str(cause).strip().splitlines() or [""])[0]
    return f"{type(cause).__name__}: {first}"[:300]


class FileWatch:
    """The identity (device, inode) of a SQLite file, remembered at the first connection."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._identity: tuple[int, int] | None = None

    @classmethod
    def of(cls, url: str) -> FileWatch | None:
        """A watch for a file-backed SQLite URL, else None (PostgreSQL, in-memory SQLite)."""
        if not url.startswith("sqlite:///"):
            return None
        file = url.removeprefix("sqlite:///").split("?", 1)[0]
        return cls(Path(file)) if file and file != ":memory:" else None

    def remember(self) -> None:
        if self._identity is None:
            try:
                found = os.stat(self.path)
            except OSError:
                return
            self._identity = (found.st_dev, found.st_ino)

    def check(self) -> str | None:
        """None while the file is the one first opened; else what happened to it."""
        if self._identity is None:
            return None
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            return (
                f"the database file {self.path} vanished (deleted?): writes now would be lost at restart;"
                " restore it and restart onnxmon (results wait in the spool)"
            )
        except OSError as exc:
            return f"the database file {self.path} cannot be examined: {exc.strerror}"
        if (found.st_dev, found.st_ino) != self._identity:
            return (
                f"the database file {self.path} was replaced (another inode) while onnxmon had it open;"
                " restart onnxmon to use the new file (results wait in the spool)"
            )
        return None


@contextmanager
def outages() -> Iterator[None]:
    """Raise ``StoreOutage`` instead of a driver error that means "unavailable now" (``translated``)."""
    try:
        yield
    except DBAPIError as exc:
        outage = translated(exc)
        if outage is exc:
            raise
        raise outage from exc


def translated(exc: DBAPIError) -> Exception:
    """The store's own ``StoreOutage`` for a driver error that means "unavailable now", else ``exc`` itself.

    PEP 249's ``OperationalError`` and ``InterfaceError`` (refused or cut connections, a locked or full
    SQLite file, a statement timeout) and a connection SQLAlchemy invalidated are outages: the sinks wait
    them out, the API answers 503. Everything else (``DataError``, ``IntegrityError``...) is a refused write.
    """
    if isinstance(exc, OperationalError | InterfaceError) or exc.connection_invalidated:
        return StoreOutage(describe(exc))
    return exc
