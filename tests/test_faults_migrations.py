"""Migrations under faults (issue 42 #12-#14): killed midway, run concurrently, stuck behind a lock.

A migration is one transaction (``monitor/store/migrate.py``): a ``kill -9`` anywhere leaves the file
at the revision it had, and the next ``onnxmon db upgrade`` completes it. Concurrent upgrades serialize
on the migration lock. A lock held on the schema costs a bounded wait and one line, exit 3.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from monitor import capture
from monitor.config.plan import plan_for
from monitor.sinks.spool import Spool
from monitor.store import Store, migrate
from tests import history_rows, modelzoo
from tests.conftest import onnxmon
from tests.databases import BACKENDS, database_url
from tests.serving import free_port
from tests.test_migrations import ALL_TABLES, tables
from tests.workspace import Workspace

BIN = Path(sys.executable).parent
HEAD = migrate.head()  # the newest revision this onnxmon ships (a new migration moves it)
Completed = subprocess.CompletedProcess[str]
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
        outcomes = [(*p.communicate(timeout=120), p.returncode) for p in upgrades]
        assert [code for _, _, code in outcomes] == [0, 0, 0, 0], outcomes
        assert sum(f"empty -> {HEAD}" in out for out, _, _ in outcomes) >= 1
        with Store(url) as store:
            assert store.current_revision() == store.head_revision()
            assert tables(store) == ALL_TABLES


@pytest.mark.process
@pytest.mark.postgres
def test_three_commands_opening_a_fresh_postgresql_with_migrate_auto_all_succeed(
    tmp_path: Path, postgres_store: Store
) -> None:
    """Issue 42 #13: with ``store.migrate: auto`` 2 of 3 daemons started together exited with an
    IntegrityError traceback; every command opening the store migrates the same way (``open_store``)."""
    config = tmp_path / "onnxmon.yaml"
    config.write_text(f"store:\n  url: '{postgres_store.url}'\n  migrate: auto\nmodels: []\n", encoding="utf-8")
    opened = [
        subprocess.Popen(
            [str(BIN / "onnxmon"), "incident", "list", "-c", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outcomes = [(*p.communicate(timeout=120), p.returncode) for p in opened]
    assert [code for _, _, code in outcomes] == [0, 0, 0], outcomes
    assert postgres_store.current_revision() == postgres_store.head_revision()


@pytest.fixture
def postgres_store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    with database_url("postgresql", tmp_path, request) as url, Store(url) as store:
        yield store


# --- a history at a newer schema than this onnxmon (issue 42 #11) ---------------------------------------


@pytest.fixture
def baselined(tmp_path: Path) -> Workspace:
    ws = Workspace(tmp_path)
    ws.add_model("clf", modelzoo.classifier(), count=2)
    ws.extra["store"] = {"url": "sqlite:///onnxmon.db", "spool_dir": "spool"}
    capture.capture_baseline(plan_for(ws.settings(), "clf"))
    return ws


def cli(ws: Workspace, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> Completed:
    return subprocess.run(
        [str(BIN / "onnxmon"), *args, "-c", str(ws.config_file)],
        cwd=ws.root,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.process
def test_a_history_at_a_newer_schema_is_one_line_and_the_measured_result_is_spooled(baselined: Workspace) -> None:
    """Issue 42 #11: after a rollback of onnxmon, ``check`` measured, then died in a traceback (alembic's
    "Can't locate revision"): the result neither printed, stored nor spooled; ``db current`` said "behind"."""
    url = f"sqlite:///{baselined.root / 'onnxmon.db'}"
    with Store(url) as store:
        store.upgrade()
        with store.engine.begin() as connection:
            connection.execute(sa.text("UPDATE alembic_version SET version_num = '0099'"))
    ran = cli(baselined, "check", "--json")
    assert ran.returncode == 3, ran.stderr
    assert "Traceback" not in ran.stderr
    assert json.loads(ran.stdout)[0]["verdict"] == "pass", "the measurement is printed"
    line = ran.stderr.strip()
    assert len(line.splitlines()) == 1 and "schema revision 0099" in line and f"its newest is {HEAD}" in line, line
    assert "1 result(s) spooled in" in line
    spooled = Spool(baselined.root / "spool")
    assert len(spooled) == 1 and spooled.read(spooled.entries()[0]).result.model == "clf"
    current = cli(baselined, "db", "current", "--check")
    assert current.returncode == 1 and "newer than this onnxmon knows" in current.stdout, current.stdout
    for command in (["db", "upgrade"], ["serve", "--port", "1"]):
        refused = cli(baselined, *command, timeout=120)
        assert refused.returncode == 3, (command, refused.stderr)
        assert refused.stderr.count("\n") == 1 and "schema revision 0099" in refused.stderr, refused.stderr
    with Store(url) as store:
        assert store.current_revision() == "0099", "nothing was written to the newer database"
        assert store.models() == []


# --- a lock held on the schema: a bounded wait, one line, exit 3 (issue 42 #14) --------------------------


@contextmanager
def holding(url: str, *statements: str) -> Iterator[None]:
    """Another session that ran ``statements`` in a transaction it keeps open (its locks held) meanwhile."""
    with Store(url) as other, other.engine.connect() as connection, connection.begin():
        for statement in statements:
            connection.exec_driver_sql(statement)
        yield


@pytest.mark.process
@pytest.mark.postgres
@pytest.mark.parametrize("migrate", ["off", "auto"])
def test_a_lock_held_on_alembic_version_ends_serve_in_one_line_and_check_spools(
    baselined: Workspace, postgres_store: Store, migrate: str
) -> None:
    """Issue 42 #14: ``serve`` hung at start with no log line and no /healthz while a session held a lock
    on alembic_version, and ``check`` waited as long as the lock was held."""
    postgres_store.upgrade()
    env = {"ONNXMON_STORE__URL": postgres_store.url} | (
        {"ONNXMON_STORE__MIGRATE": migrate} if migrate == "auto" else {}
    )
    env |= {"ONNXMON_STORE__READ_TIMEOUT": "1"}
    with holding(postgres_store.url, "LOCK TABLE alembic_version IN ACCESS EXCLUSIVE MODE"):
        began = time.monotonic()
        served = cli(baselined, "serve", "--port", str(free_port()), env=env, timeout=90)
        took = time.monotonic() - began
        assert served.returncode == 3, served.stderr
        assert served.stderr.count("\n") == 1 and "lock on alembic_version" in served.stderr, served.stderr
        assert "could not be read within 1 s (store.read_timeout)" in served.stderr
        assert took < 45, f"serve took {took:.1f} s to give up"
        checked = cli(baselined, "check", "--json", env=env, timeout=90)
        assert checked.returncode == 3, checked.stderr
        assert json.loads(checked.stdout)[0]["verdict"] == "pass"
        assert "lock on alembic_version" in checked.stderr and "1 result(s) spooled in" in checked.stderr
    assert len(Spool(baselined.root / "spool")) == 1


@pytest.mark.process
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_migration_waits_for_a_lock_on_its_tables_at_most_migrate_timeout(
    backend: str, baselined: Workspace, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Issue 42 #14: the migration's wait for a lock (a long report reading ``runs``, a held SQLite write
    lock) is bounded by ``store.migrate_timeout``; the database is left at its revision."""
    with database_url(backend, tmp_path, request) as url, Store(url) as store:
        store.upgrade("0006")
        env = {"ONNXMON_STORE__URL": url, "ONNXMON_STORE__MIGRATE_TIMEOUT": "2"}
        lock = "SELECT count(*) FROM runs" if backend == "postgresql" else "INSERT INTO leases VALUES ('m', 1, 'h', 0)"
        with holding(url, lock):
            began = time.monotonic()
            ran = cli(baselined, "db", "upgrade", env=env, timeout=90)
            took = time.monotonic() - began
        assert ran.returncode == 3, ran.stderr
        assert ran.stderr.count("\n") == 1, ran.stderr
        assert "waited 2 s (store.migrate_timeout) for the schema lock" in ran.stderr, ran.stderr
        assert took < 30, f"db upgrade took {took:.1f} s to give up"
        assert store.current_revision() == "0006", "nothing was changed"
        assert cli(baselined, "db", "upgrade", env=env).returncode == 0, "once the lock is released it completes"


@pytest.mark.process
@pytest.mark.postgres
def test_an_upgrade_waits_for_another_migrator_then_finds_the_newest_revision(
    baselined: Workspace, postgres_store: Store
) -> None:
    """Issue 42 #13: with the migration lock taken by another onnxmon, ``db upgrade`` says it waits, waits,
    and once that one is done goes on (here: migrates, since the other migrated nothing)."""
    with postgres_store.engine.connect() as connection:
        key = migrate._lock_key(connection)
    env = {"ONNXMON_STORE__URL": postgres_store.url}
    with holding(postgres_store.url, f"SELECT pg_advisory_xact_lock({key})"):
        waiting = subprocess.Popen(
            [str(BIN / "onnxmon"), "db", "upgrade", "-c", str(baselined.write())],
            cwd=baselined.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
        time.sleep(8)
        assert waiting.poll() is None, "it waits while the lock is held"
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert "another onnxmon is migrating it; waiting at most 120 s (store.migrate_timeout)" in err, err
    assert f"empty -> {HEAD}" in out
    assert postgres_store.current_revision() == postgres_store.head_revision()
