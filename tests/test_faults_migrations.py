"""Migrations under faults (issue 42 #12-#14): killed midway, run concurrently, stuck behind a lock.

A migration is one transaction (``monitor/store/migrate.py``): a ``kill -9`` anywhere leaves the file
at the revision it had, and the next ``onnxmon db upgrade`` completes it. Concurrent upgrades serialize
on the migration lock. A lock held on the schema costs a bounded wait and one line, exit 3.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from monitor.store import Store
from tests import history_rows
from tests.conftest import onnxmon
from tests.databases import BACKENDS, database_url
from tests.test_migrations import ALL_TABLES, tables

BIN = Path(sys.executable).parent
KILLS = int(os.environ.get("ONNXMON_MIGRATION_KILLS", "12"))  # per start; a soak run sets more (docs/reliability.md)
HISTORY_RUNS = 4000
_UPGRADE_CHILD = """
import os, signal, sys
import sqlalchemy
from monitor.store import Store
url, kill_at = sys.argv[1], int(sys.argv[2])
statements = 0
def trace(statement):
    global statements
    statements += 1
    if statements == kill_at:  # kill -9 as SQLite starts this statement of the migration
        os.kill(os.getpid(), signal.SIGKILL)
sqlalchemy.event.listen(sqlalchemy.Engine, "connect", lambda dbapi, _: dbapi.set_trace_callback(trace))
store = Store(url)
print("ready", flush=True)
store.upgrade()
print("done", statements, flush=True)
"""


def upgrade_child(url: str, kill_at: int = 0) -> subprocess.Popen[str]:
    """A process about to migrate ``url`` (printing ``ready`` once imported), killed at statement ``kill_at``."""
    child = subprocess.Popen(
        [sys.executable, "-c", _UPGRADE_CHILD, url, str(kill_at)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


@pytest.fixture(scope="module")
def old_history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite history at the first revision with 4,000 runs (8,000 outputs) written into it."""
    file = tmp_path_factory.mktemp("old") / "history.db"
    with Store(f"sqlite:///{file}") as store:
        store.upgrade(history_rows.revisions()[0])
        with store.engine.begin() as connection:
            history_rows.populate(connection, runs=HISTORY_RUNS)
    assert not Path(f"{file}-wal").exists(), "the base file is whole (its WAL checkpointed at close)"
    return file


@pytest.mark.slow
@pytest.mark.process
@pytest.mark.parametrize("start", ["empty", "populated"])
def test_kill_9_at_random_points_of_a_sqlite_migration_never_leaves_an_unusable_file(
    start: str, old_history: Path, tmp_path: Path
) -> None:
    """Issue 42 #12: DDL committed statement by statement (pysqlite's legacy transactions), so a kill
    left a half-made schema for good ("table models already exists" on every later upgrade).

    Half the kills fall on a random statement of the migration (every step is reached), half at a
    random time within it (mid-statement: the copy of 4,000 runs)."""
    runs = HISTORY_RUNS if start == "populated" else 0
    whole = tmp_path / "whole.db"
    if runs:
        shutil.copy(old_history, whole)
    child = upgrade_child(f"sqlite:///{whole}")
    began = time.monotonic()
    assert child.stdout is not None
    done = child.stdout.readline().split()
    duration = time.monotonic() - began  # the migration's own time: the window the timed kills fall in
    assert done[0] == "done", done
    statements = int(done[1])
    child.wait(timeout=60)
    rng = random.Random(f"{start}-42")
    found: dict[str, int] = {}
    for kill in range(KILLS):
        file = tmp_path / f"killed-{kill}.db"
        if runs:
            shutil.copy(old_history, file)
        url = f"sqlite:///{file}"
        at_statement = rng.randint(1, statements) if kill % 2 == 0 else 0
        child = upgrade_child(url, at_statement)
        if not at_statement:
            time.sleep(rng.uniform(0, duration))
            child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        with Store(url) as store:
            left = store.current_revision()
            found[str(left)] = found.get(str(left), 0) + 1
        ran = onnxmon("db", "upgrade", "--url", url)
        assert ran.exit_code == 0, f"kill {kill} (at statement {at_statement}, left at {left}): {ran.output}"
        with Store(url) as store:
            assert store.current_revision() == store.head_revision()
            assert tables(store) == ALL_TABLES, f"kill {kill}: a half-made schema was left"
            with store.engine.connect() as connection:
                assert connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall() == []
                assert connection.scalar(sa.text("SELECT count(*) FROM runs")) == runs
                assert connection.scalar(sa.text("SELECT count(*) FROM output_results")) == 2 * runs
        for leftover in tmp_path.glob(f"killed-{kill}.db*"):
            leftover.unlink()
    print(f"{KILLS} kills in a {duration:.2f} s migration of {statements} statements; revision left: {found}")
    assert set(found) <= {"None", history_rows.revisions()[0], history_rows.revisions()[-1]}, found


@pytest.mark.process
@pytest.mark.parametrize("backend", BACKENDS)
def test_four_concurrent_db_upgrades_of_one_fresh_database_all_succeed(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Issue 42 #13: 3 of 4 concurrent ``db upgrade`` of one PostgreSQL failed (IntegrityError on
    pg_type: the same CREATE TABLE in two transactions); a pod per node does exactly this."""
    with database_url(backend, tmp_path, request) as url:
        upgrades = [
            subprocess.Popen(
                [str(BIN / "onnxmon"), "db", "upgrade", "--url", url],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        outcomes = [(p.wait(timeout=120), *p.communicate()) for p in upgrades]
        assert [code for code, _, _ in outcomes] == [0, 0, 0, 0], outcomes
        assert sum(" -> 0007" in out and "empty -> " in out for _, out, _ in outcomes) >= 1
        with Store(url) as store:
            assert store.current_revision() == store.head_revision()
            assert tables(store) == ALL_TABLES


@pytest.fixture
def postgres_store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    with database_url("postgresql", tmp_path, request) as url, Store(url) as store:
        yield store
