"""Migrating the history schema: a time-limited revision check, one migrator at a time, all or nothing.

- The revision is read first, under ``store.read_timeout`` (a session holding a lock on
  ``alembic_version`` costs that wait and one line, never a hang). A database at the newest
  revision takes no lock at all, so a start or a ``check`` never waits for another writer.
- A revision this onnxmon does not know (a newer onnxmon migrated the database, then was rolled
  back) is ``SchemaTooNew``: one line naming both revisions; nothing is written to that database
  (a check's results go to the spool).
- A database behind is migrated in ONE transaction, so a migration cut anywhere (``kill -9``, a
  full disk, a statement refused) leaves the database at the revision it had, and the next
  upgrade starts again from there. PostgreSQL has transactional DDL; the transaction first takes
  ``pg_advisory_xact_lock`` (keyed by the schema), so concurrent starts serialize: one migrates,
  the others wait, then find the newest revision and go on. SQLite runs on a connection of its own
  (``engine.make_engine(migrating=True)``): every DDL statement inside ``BEGIN IMMEDIATE`` (the
  write lock, which also serializes migrators) and foreign keys off, as SQLite's 12-step ALTER
  TABLE procedure asks for a batch rebuild of a table others point at (with them on, dropping the
  old ``runs`` fails, "FOREIGN KEY constraint failed"); ``PRAGMA foreign_key_check`` then runs
  before the commit, and a violation rolls everything back.
- The wait for that lock (another onnxmon migrating, a session locking the tables) is bounded by
  ``store.migrate_timeout``: PostgreSQL's ``lock_timeout``, SQLite's busy timeout. Past it:
  ``SchemaLocked``, one line, exit 3.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from pathlib import Path
from typing import Protocol

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from monitor.store import health
from monitor.store.engine import make_engine

MIGRATIONS = Path(__file__).parent / "migrations"
log = logging.getLogger("onnxmon.store")
_LOCK_WAITS = {"55P03", "57014"}  # PostgreSQL lock_not_available (lock_timeout), query_canceled (statement_timeout)


class Store(Protocol):
    """What a migration needs of ``repo.Store``."""

    url: str
    engine: Engine
    read_timeout_s: float
    migrate_timeout_s: float

    @property
    def display_url(self) -> str: ...


class SchemaTooNew(health.StoreUnavailable):
    """The database is at a schema revision this onnxmon does not know: a newer onnxmon migrated it."""


class SchemaLocked(health.StoreOutage):
    """The schema check or a migration waited its time limit for a lock another session holds."""


def config(connection: Connection) -> Config:
    """An Alembic config bound to ``connection`` (no ini file; the scripts live in this package)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def scripts() -> ScriptDirectory:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(cfg)


def head() -> str | None:
    """The newest revision this onnxmon ships."""
    return scripts().get_current_head()


def known(revision: str | None) -> bool:
    """True for ``None`` (an empty database) and every revision this onnxmon ships (ids, never ``head``)."""
    return revision is None or revision in {script.revision for script in scripts().walk_revisions()}


def too_new(store: Store, revision: str) -> SchemaTooNew:
    shown = revision if revision.strip() and revision.isprintable() else repr(revision)
    return SchemaTooNew(
        f"{store.display_url} is at schema revision {shown[:100]}, which this onnxmon does not know (its newest is"
        f" {head()}): a newer onnxmon migrated it. Run that version again, or restore the copy of the database"
        " from before its upgrade; this onnxmon writes nothing to it"
    )


def current(store: Store) -> str | None:
    """The revision the database is at (``None``: empty), read within ``store.read_timeout_s``."""
    try:
        with store.engine.connect() as connection, connection.begin():
            health.limit(connection, store.read_timeout_s)
            heads = MigrationContext.configure(connection).get_current_heads()
    except DBAPIError as exc:
        if _lock_wait(exc):
            raise SchemaLocked(
                f"{store.display_url}: the schema revision could not be read within {store.read_timeout_s:g} s"
                " (store.read_timeout): another session holds a lock on alembic_version"
            ) from exc
        outage = health.translated(exc)
        if outage is exc:
            raise
        raise outage from exc
    if len(heads) > 1:  # onnxmon's history is one line of revisions: a second row was written by hand
        raise health.StoreUnavailable(
            f"{store.display_url}: alembic_version holds {len(heads)} revisions ({', '.join(map(repr, heads))[:200]}),"
            " one is expected: delete the rows that are not the schema's revision"
        )
    return heads[0] if heads else None


def upgrade(store: Store, revision: str = "head") -> None:
    """Bring the schema to ``revision`` in one transaction under the migration lock (see the module)."""
    found = current(store)
    if not known(found):
        raise too_new(store, str(found))
    target = head() if revision == "head" else revision
    if found == target:
        return
    log.info(
        "history database %s is at schema revision %s: migrating to %s (waiting at most %g s for the schema lock)",
        store.display_url,
        found or "none (empty)",
        target,
        store.migrate_timeout_s,
    )
    try:
        if store.engine.dialect.name == "sqlite":
            _upgrade_sqlite(store, revision)
        else:
            _upgrade_locked(store, revision)
    except DBAPIError as exc:
        if _lock_wait(exc):
            raise SchemaLocked(
                f"{store.display_url}: waited {store.migrate_timeout_s:g} s (store.migrate_timeout) for the schema"
                " lock: another onnxmon is migrating this database or a session holds a lock on its tables;"
                " nothing was changed, try again later"
            ) from exc
        outage = health.translated(exc)
        if outage is exc:
            raise
        raise outage from exc


def _upgrade_sqlite(store: Store, revision: str) -> None:
    if store.engine.url.database in (None, "", ":memory:"):  # another connection would be another database
        _upgrade_in_memory(store, revision)
        return
    engine = make_engine(store.url, write_timeout_s=store.migrate_timeout_s, migrating=True)
    try:
        with engine.connect() as connection, connection.begin():  # BEGIN IMMEDIATE (engine.py)
            _drop_leftovers(store, connection)
            before = _dangling(connection)
            command.upgrade(config(connection), revision)
            made = _dangling(connection) - before  # what the migration broke; what it found stays as it was
            if made:  # raising rolls the whole migration back
                (table, parent), count = next(iter(made.items()))
                raise health.StoreUnavailable(
                    f"{store.display_url}: migrating to {revision} would leave {made.total()} row(s) pointing at"
                    f" no row ({count} of {table} with no row of {parent}); nothing was changed"
                )
            if before:
                log.warning(
                    "history database %s: %d row(s) already pointed at no row before the migration (%s), left as is",
                    store.display_url,
                    before.total(),
                    ", ".join(f"{table} -> {parent}" for table, parent in before),
                )
    finally:
        engine.dispose()


def _dangling(connection: Connection) -> Counter[tuple[str, str]]:
    """Rows whose foreign key names no row, counted by (table, parent table): ``PRAGMA foreign_key_check``."""
    return Counter((row[0], row[2]) for row in connection.exec_driver_sql("PRAGMA foreign_key_check"))


def _drop_leftovers(store: Store, connection: Connection) -> None:
    """Drop the empty ``_alembic_tmp_*`` tables a batch rebuild left before migrations were atomic.

    onnxmon < issue 42 committed a batch's CREATE TABLE on its own, so its failed 0007 (foreign keys)
    left ``_alembic_tmp_runs`` behind, and every later upgrade failed "table already exists". Now that
    a batch runs inside the migration's transaction, such a table at the start is only ever that leftover.
    """
    names = connection.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '\\_alembic\\_tmp\\_%' ESCAPE '\\'"
    ).scalars()
    for name in list(names):
        if connection.exec_driver_sql(f'SELECT count(*) FROM "{name}"').scalar():
            raise health.StoreUnavailable(
                f"{store.display_url}: table {name} (left by an interrupted migration) holds rows: nothing was"
                " changed; inspect it, then drop it and run `onnxmon db upgrade` again"
            )
        log.warning(
            "history database %s: dropping %s, left empty by an earlier failed migration", store.display_url, name
        )
        connection.exec_driver_sql(f'DROP TABLE "{name}"')


def _upgrade_in_memory(store: Store, revision: str) -> None:
    """An in-memory SQLite (tests, a throwaway store): on its one connection, foreign keys off meanwhile."""
    with store.engine.connect() as connection:
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")  # no BEGIN yet: pysqlite begins before DML only
        connection.commit()
        try:
            command.upgrade(config(connection), revision)
            connection.commit()
        finally:
            connection.rollback()
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")
            connection.commit()


def _upgrade_locked(store: Store, revision: str) -> None:
    """PostgreSQL: the whole upgrade in one transaction that first takes the schema's advisory lock."""
    wait_ms = max(1, int(store.migrate_timeout_s * 1000))
    with store.engine.connect() as connection, connection.begin():
        connection.exec_driver_sql(f"SET LOCAL lock_timeout = {wait_ms}")
        connection.exec_driver_sql("SET LOCAL statement_timeout = 0")  # a migration's statements take what they take
        key = _lock_key(connection)
        if not connection.execute(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": key}).scalar():
            log.warning(
                "history database %s: another onnxmon is migrating it; waiting at most %g s (store.migrate_timeout)",
                store.display_url,
                store.migrate_timeout_s,
            )
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
        command.upgrade(config(connection), revision)  # reads the revision again, now under the lock


def _lock_key(connection: Connection) -> int:
    """The advisory lock's key: one per database schema (two onnxmon schemas in one database never wait)."""
    schema = connection.execute(text("SELECT current_schema()")).scalar() or ""
    digest = hashlib.sha256(f"onnxmon schema migration {schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _lock_wait(exc: DBAPIError) -> bool:
    """True when ``exc`` is a time limit on a lock wait: PostgreSQL's timeouts, SQLite's busy timeout."""
    if getattr(exc.orig, "sqlstate", None) in _LOCK_WAITS:
        return True
    return "database is locked" in str(exc.orig)
