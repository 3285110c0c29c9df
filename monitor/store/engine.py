"""The SQLAlchemy engine behind a ``Store``: connection time limits, SQLite pragmas, a missing driver named.

Why a module of its own: what an engine needs per backend (PostgreSQL's ``connect_timeout``, SQLite's
busy timeout, foreign keys and WAL) and what a user sees when the URL's driver is not installed
(``psycopg`` comes with the ``postgres`` extra, not with ``.[cpu]``) are one concern, apart from the
queries.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.pool import NullPool

from monitor.config.dburl import mask_url
from monitor.errors import ConfigError
from monitor.store import convert


def make_engine(url: str, *, echo: bool = False, write_timeout_s: float = 10.0, migrating: bool = False) -> Engine:
    """An engine for ``url``; a URL this installation cannot open is a ``ConfigError`` (exit 2): a missing
    database driver names the extra to install, a URL no SQLAlchemy dialect takes says so.

    Neither is an outage: no retry or spool could ever write to such a store, so ``onnxmon check`` refuses
    it before measuring rather than spool results for it forever (an unreachable database is
    ``StoreUnavailable``, exit 3, from the store's health boundary).

    ``migrating`` (SQLite): an engine for one migration only (``migrate.py``), whose transactions are
    real ones that DDL joins, ``BEGIN IMMEDIATE``, with foreign keys off (see ``_migration_pragmas``).
    """
    if url.split("://", 1)[0].split("+", 1)[0] == "postgres":  # as Heroku and many tools print it
        raise ConfigError(
            f"store.url {mask_url(url)}: SQLAlchemy names PostgreSQL 'postgresql', not 'postgres': write the URL"
            f" as postgresql+psycopg://… and install {_POSTGRES_EXTRA}"
        )
    # A database that accepts connections but never answers must not hang a write forever.
    postgres = url.startswith("postgresql")
    connect_args: dict[str, Any] = {"connect_timeout": 10} if postgres else {"timeout": write_timeout_s}
    pool: dict[str, Any] = {"poolclass": NullPool} if migrating else {"pool_pre_ping": True}
    try:
        engine = create_engine(url, echo=echo, json_serializer=convert.json_dumps, connect_args=connect_args, **pool)
    except ModuleNotFoundError as exc:  # the URL's driver is not installed: say which extra brings it
        extra = f"install {_POSTGRES_EXTRA}"
        if url.startswith("postgresql") and exc.name != "psycopg":  # another driver (psycopg2, pg8000, ...)
            extra = f"write the URL as postgresql+psycopg://… and {extra}"
        elif not postgres:  # another database: its driver is not onnxmon's to name
            extra = (
                "onnxmon keeps its history in SQLite (sqlite:///FILE) or in PostgreSQL: postgresql+psycopg://…"
                f" and install {_POSTGRES_EXTRA}"
            )
        raise ConfigError(
            f"store.url {mask_url(url)}: its database driver is not installed (no module named {exc.name!r}); {extra}"
        ) from None
    except (ArgumentError, NoSuchModuleError) as exc:  # a URL no dialect takes: the config's to fix
        raise ConfigError(
            f"store.url {mask_url(url)}: no database takes this URL ({type(exc).__name__}: {exc}".splitlines()[0]
            + "); onnxmon keeps its history in SQLite (sqlite:///FILE) or in PostgreSQL (postgresql+psycopg://…)"
        ) from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _migration_pragmas if migrating else _sqlite_pragmas)
        if migrating:
            event.listen(engine, "begin", _begin_immediate)
    return engine


_POSTGRES_EXTRA = "onnxmon's 'postgres' extra, psycopg 3: pip install -e '.[postgres]' from a clone"


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")  # the API reads while the daemon writes
    cursor.close()


def _migration_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """A SQLite connection for a migration: every statement, DDL included, inside the transaction begun.

    pysqlite's legacy transaction handling (Python < 3.12's default) begins a transaction only before
    INSERT/UPDATE/DELETE, so a migration's CREATE TABLE statements would each commit on their own and
    a kill in the middle leaves a half-made schema; ``isolation_level = None`` turns that off and
    ``_begin_immediate`` begins the real transaction (SQLAlchemy's "pysqlite: serializable isolation,
    savepoints, transactional DDL" recipe). Foreign keys are off because a batch rebuild drops and
    recreates a table that other tables point at (SQLite's own 12-step ALTER TABLE procedure);
    ``PRAGMA foreign_keys`` cannot change inside a transaction, so it is set here, before one begins,
    and ``migrate.py`` runs ``PRAGMA foreign_key_check`` before the commit instead.
    """
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=OFF")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def _begin_immediate(connection: Connection) -> None:
    """Take SQLite's write lock as the transaction begins: migrations never interleave (the busy timeout bounds it)."""
    connection.exec_driver_sql("BEGIN IMMEDIATE")
