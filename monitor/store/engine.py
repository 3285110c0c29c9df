"""The SQLAlchemy engine behind a ``Store``: connection time limits, SQLite pragmas, a missing driver named.

Why a module of its own: what an engine needs per backend (PostgreSQL's ``connect_timeout``, SQLite's
busy timeout, foreign keys and WAL) and what a user sees when the URL's driver is not installed
(``psycopg`` comes with the ``postgres`` extra, not with ``.[cpu]``) are one concern, apart from the
queries.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from monitor.config.dburl import mask_url
from monitor.errors import ConfigError
from monitor.store import convert


def make_engine(url: str, *, echo: bool = False, write_timeout_s: float = 10.0) -> Engine:
    """An engine for ``url``; a URL this installation cannot open is a ``ConfigError`` (exit 2): a missing
    database driver names the extra to install, a URL no SQLAlchemy dialect takes says so.

    Neither is an outage: no retry or spool could ever write to such a store, so ``onnxmon check`` refuses
    it before measuring rather than spool results for it forever (an unreachable database is
    ``StoreUnavailable``, exit 3, from the store's health boundary).
    """
    if url.split("://", 1)[0].split("+", 1)[0] == "postgres":  # as Heroku and many tools print it
        raise ConfigError(
            f"store.url {mask_url(url)}: SQLAlchemy names PostgreSQL 'postgresql', not 'postgres': write the URL"
            f" as postgresql+psycopg://… and install {_POSTGRES_EXTRA}"
        )
    # A database that accepts connections but never answers must not hang a write forever.
    postgres = url.startswith("postgresql")
    connect_args: dict[str, Any] = {"connect_timeout": 10} if postgres else {"timeout": write_timeout_s}
    try:
        engine = create_engine(
            url, echo=echo, json_serializer=convert.json_dumps, pool_pre_ping=True, connect_args=connect_args
        )
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
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


_POSTGRES_EXTRA = "onnxmon's 'postgres' extra, psycopg 3: pip install -e '.[postgres]' from a clone"


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")  # the API reads while the daemon writes
    cursor.close()
