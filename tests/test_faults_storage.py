"""Storage faults (issue 17): a full disk under SQLite, a spool that cannot be written either, a
database that hangs (a table lock on PostgreSQL, a write-locked SQLite file), a SQLite file deleted
under the daemon, and a database dropped and recreated empty.

Everything is real: a 1 MiB tmpfs filled to the brim holds the SQLite file (skipped where ``mount``
is refused), another PostgreSQL session holds ``LOCK TABLE runs IN ACCESS EXCLUSIVE MODE``, another
SQLite connection holds ``BEGIN EXCLUSIVE``, and the checks are real isolated checks of a real
``Daemon`` (or a real ``onnxmon serve``) answering through the real HTTP app.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from fastapi.testclient import TestClient

from monitor import jsonsafe
from monitor.api.app import create_app
from monitor.daemon.root import Daemon
from monitor.results import CheckResult
from monitor.sinks.database import DatabaseSink
from monitor.sinks.spool import Spool, default_directory
from monitor.store import Store
from tests.databases import postgres_schema
from tests.disks import fill
from tests.serving import Served, free_port, two_models
from tests.workspace import Workspace

BOUND_S = 8.0  # /readyz, /metrics and / must answer within this while the database hangs


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


def make_daemon(ws: Workspace, url: str, **store: Any) -> tuple[Daemon, DatabaseSink, TestClient]:
    """A migrated database, a ``Daemon`` that opens it itself, and the HTTP app over it."""
    ws.extra["store"] = {"url": url, "baselines_dir": "baselines", "benchsets_dir": "benchsets", **store}
    two_models(ws)
    settings = ws.settings()
    with Store(settings.store.url) as migrating:
        migrating.upgrade()
    daemon = Daemon(settings)
    (sink,) = [s for s in daemon.sinks if isinstance(s, DatabaseSink)]
    return daemon, sink, TestClient(create_app(daemon))


def not_ready(client: TestClient) -> list[str]:
    """What ``/readyz`` calls not ready (the scheduler of an in-process ``Daemon`` is never started)."""
    return list(client.get("/readyz").json()["failed"])


def close(daemon: Daemon, sink: DatabaseSink) -> None:
    sink.close()
    daemon.store.close()


def wait_for(condition: Callable[[], object], timeout: float = 30.0) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if condition():
            return time.monotonic() - began
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout} s")


def timed(call: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    began = time.monotonic()
    value = call(*args)
    return time.monotonic() - began, value


def truncate_wal(db: Path) -> None:
    """Checkpoint the WAL into the database and truncate it, so the next write must grow a file."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def stored_runs(store: Store, results: list[CheckResult]) -> list[tuple[str, float]]:
    models = sorted({r.model for r in results})
    runs = sorted((r for m in models for r in store.runs(m, limit=1000)), key=lambda r: r.id)
    return [(r.model, round(r.started_at.timestamp(), 3)) for r in runs]


def measured(results: list[CheckResult]) -> list[tuple[str, float]]:
    return [(r.model, round(r.started_at, 3)) for r in results]


# --- 1. a full disk under SQLite ------------------------------------------------------------------


@pytest.mark.process
def test_a_full_disk_under_sqlite_keeps_the_result_in_a_spool_off_the_database_volume(
    ws: Workspace, tiny_tmpfs: Path
) -> None:
    db = tiny_tmpfs / "onnxmon.db"
    daemon, sink, client = make_daemon(ws, f"sqlite:///{db}")
    try:
        results = [daemon.run_now("clf")]
        truncate_wal(db)
        filler = fill(tiny_tmpfs)
        results.append(daemon.run_now("clf"))
        assert sink.spooled == 1, "the result measured on a full database volume waits in the spool"
        assert sink.last_outage and "full" in sink.last_outage
        ready = client.get("/readyz")
        body = ready.json()
        assert "store_writable" in body["failed"], body
        assert "full" in body["reasons"]["store_writable"]
        metrics = client.get("/metrics").text
        assert "onnxmon_results_spooled 1.0" in metrics

        filler.unlink()
        flushed_s = wait_for(lambda: sink.spooled == 0)
        assert stored_runs(daemon.store, results) == measured(results)
        assert not_ready(client) == ["scheduler_running"], "only the scheduler, not started in-process"
        print(f"\nMEASURED full 1 MiB tmpfs under SQLite: spooled=1 off the volume, written {flushed_s:.1f}s after")
    finally:
        close(daemon, sink)


@pytest.mark.process
def test_when_the_spool_cannot_be_written_either_the_result_is_logged_in_full_and_readyz_says_so(
    ws: Workspace, tiny_tmpfs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tiny_tmpfs / "onnxmon.db"
    spool_dir = tiny_tmpfs / "spool"  # store.spool_dir overrides the default: here onto the same full volume
    daemon, sink, client = make_daemon(ws, f"sqlite:///{db}", spool_dir=str(spool_dir))
    try:
        assert sink.spool is not None and sink.spool.directory == spool_dir
        daemon.run_now("clf")
        truncate_wal(db)
        spool_dir.mkdir(exist_ok=True)
        fill(tiny_tmpfs)
        caplog.set_level(logging.INFO)
        result = daemon.run_now("clf")
        logged = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith('{"event"')]
        (line,) = [entry for entry in logged if entry["event"] == "result_not_stored"]
        logged_result = CheckResult.from_dict(line["result"])
        assert jsonsafe.dumps(logged_result.to_dict()) == jsonsafe.dumps(result.to_dict()), "the whole result"
        assert "No space left on device" in line["spool_error"]
        body = client.get("/readyz").json()
        assert body["ready"] is False and "spool_writable" in body["failed"], body
        assert "No space left on device" in body["reasons"]["spool_writable"]
        assert "onnxmon_results_unspooled 1.0" in client.get("/metrics").text
    finally:
        close(daemon, sink)


def test_the_default_spool_is_under_xdg_state_home_one_per_store_url(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    a = default_directory("sqlite:////data/a.db", env)
    b = default_directory("sqlite:////data/b.db", env)
    assert a.parent == tmp_path / "state" / "onnxmon" / "spool" and len(a.name) == 16
    assert a != b, "two configs never share a spool"
    assert default_directory("sqlite:////data/a.db", {}) == Path.home() / ".local/state/onnxmon/spool" / a.name
    assert default_directory("sqlite:////data/a.db", {"XDG_STATE_HOME": "relative"}).parent.parent.parent == (
        Path.home() / ".local/state"
    ), "a relative XDG_STATE_HOME is ignored, as the spec says"
    with_password = default_directory("postgresql+psycopg://u:secret@db/x", env)
    assert with_password == default_directory("postgresql+psycopg://u:other@db/x", env), "no secret in the name"


@pytest.mark.process
def test_a_backlog_in_the_spool_of_older_versions_is_written_back(ws: Workspace) -> None:
    """Not a finding: the regression guard of moving the default (a backlog beside the file is not orphaned)."""
    daemon, sink, _ = make_daemon(ws, "sqlite:///onnxmon.db")
    result = daemon.run_now("clf")
    close(daemon, sink)
    Spool(ws.root / "onnxmon.db.spool").append(result, node="node-old")
    again, again_sink, _ = make_daemon(ws, "sqlite:///onnxmon.db")
    try:
        wait_for(lambda: again_sink.spooled == 0 and len(again.store.runs("clf")) == 2)
        assert sorted(str(r.node) for r in again.store.runs("clf")) == ["None", "node-old"]
        assert not list((ws.root / "onnxmon.db.spool").glob("*.json"))
    finally:
        close(again, again_sink)


# --- 2. a database that hangs ---------------------------------------------------------------------


def _dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def _schema_of(url: str) -> str:
    return unquote(url).rsplit("search_path=", 1)[1]


@contextlib.contextmanager
def runs_locked(url: str, hold_s: float = 30.0) -> Iterator[Callable[[], int]]:
    """Another session holds ``LOCK TABLE runs IN ACCESS EXCLUSIVE MODE`` (at most ``hold_s``).

    Yields a function counting the sessions waiting for that lock.
    """
    import psycopg

    holder = psycopg.connect(_dsn(url))
    holder.execute("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")
    released = threading.Event()

    def release() -> None:
        if not released.is_set():
            released.set()
            holder.rollback()
            holder.close()

    timer = threading.Timer(hold_s, release)
    timer.start()
    schema = _schema_of(url)

    def waiting() -> int:
        with psycopg.connect(_dsn(url), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE c.relname = 'runs' AND n.nspname = %s AND NOT l.granted",
                (schema,),
            ).fetchone()
        return int(row[0]) if row else 0

    try:
        yield waiting
    finally:
        timer.cancel()
        release()


@pytest.mark.postgres
def test_a_table_lock_on_postgres_leaves_readyz_metrics_and_pages_answering_in_seconds(
    ws: Workspace, postgres_url: str
) -> None:
    with postgres_schema(postgres_url) as url:
        daemon, sink, client = make_daemon(ws, url)
        try:
            daemon.run_now("clf")
            with runs_locked(url):
                readyz_s, ready = timed(client.get, "/readyz")
                body = ready.json()
                assert "store_reachable" in body["failed"], body
                assert "timeout" in body["reasons"]["store_reachable"]
                metrics_s, metrics = timed(client.get, "/metrics")
                assert metrics.status_code == 200 and "onnxmon_store_up 0.0" in metrics.text
                page_s, page = timed(client.get, "/")
                assert page.status_code in (200, 503)
                assert max(readyz_s, metrics_s, page_s) < BOUND_S
            assert not_ready(client) == ["scheduler_running"], "only the scheduler, not started in-process"
            print(
                f"\nMEASURED LOCK TABLE runs on PostgreSQL: /readyz {readyz_s:.2f}s (503),"
                f" /metrics {metrics_s:.2f}s (store_up 0), / {page_s:.2f}s ({page.status_code})"
            )
        finally:
            close(daemon, sink)


@pytest.mark.process
def test_a_sqlite_file_locked_by_a_writer_makes_readyz_not_ready_within_seconds(ws: Workspace) -> None:
    daemon, sink, client = make_daemon(ws, "sqlite:///onnxmon.db")
    try:
        daemon.run_now("clf")
        holder = sqlite3.connect(ws.root / "onnxmon.db", isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            readyz_s, ready = timed(client.get, "/readyz")
            body = ready.json()
            assert "store_reachable" in body["failed"], body
            assert "locked" in body["reasons"]["store_reachable"]
            metrics_s, metrics = timed(client.get, "/metrics")
            assert metrics.status_code == 200
            assert max(readyz_s, metrics_s) < BOUND_S
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert not_ready(client) == ["scheduler_running"], "only the scheduler, not started in-process"
        print(f"\nMEASURED write-locked SQLite file: /readyz {readyz_s:.2f}s (503), /metrics {metrics_s:.2f}s")
    finally:
        close(daemon, sink)


@pytest.mark.postgres
@pytest.mark.slow
def test_sigterm_while_a_database_write_hangs_exits_within_the_bound_and_spools_the_result(
    ws: Workspace, postgres_url: str
) -> None:
    with postgres_schema(postgres_url) as url:
        with Store(url) as migrating:
            migrating.upgrade()
        ws.extra["store"] = {"url": url, "baselines_dir": "baselines", "benchsets_dir": "benchsets"}
        two_models(ws, interval="5s")
        served = Served(ws, free_port())
        try:
            served.wait_until(lambda: '"id"' in served.get("/api/v1/models/clf/runs")[1], "a first stored run")
            with runs_locked(url, hold_s=60) as waiting:
                readyz_s, (ready_status, _) = timed(served.get, "/readyz")
                metrics_s, (metrics_status, metrics) = timed(served.get, "/metrics")
                page_s, (page_status, _) = timed(served.get, "/")
                assert ready_status == 503 and metrics_status == 200 and "onnxmon_store_up 0.0" in metrics
                assert page_status in (200, 503) and max(readyz_s, metrics_s, page_s) < BOUND_S
                served.wait_until(lambda: waiting() > 0, "a write to wait for the lock", timeout=30)
                served.process.send_signal(signal.SIGTERM)  # while that write hangs
                exit_s, code = timed(served.process.wait, 50)
                assert code == 0
                assert exit_s < 25, "bounded by store.write_timeout (10 s) + the check in flight"
                assert waiting() == 0, "the lock is still held: the daemon did not wait for it"
            spooled = Spool(default_directory(url))
            assert len(spooled) >= 1, "the result whose write timed out waits in the spool"
            assert {spooled.read(p).result.model for p in spooled.entries()} <= {"clf", "spin"}
            print(
                f"\nMEASURED serve with LOCK TABLE runs: /readyz {readyz_s:.2f}s, /metrics {metrics_s:.2f}s,"
                f" / {page_s:.2f}s; SIGTERM exit {exit_s:.1f}s with the write hanging, spooled={len(spooled)}"
            )
        finally:
            served.stop()


# --- 3. a deleted SQLite file, a database recreated empty ------------------------------------------


@pytest.mark.process
def test_a_deleted_sqlite_file_is_noticed_reported_not_ready_and_logged(
    ws: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    daemon, sink, client = make_daemon(ws, "sqlite:///onnxmon.db")
    try:
        daemon.run_now("clf")
        assert not_ready(client) == ["scheduler_running"], "only the scheduler, not started in-process"
        for path in ws.root.glob("onnxmon.db*"):
            if path.is_file():
                path.unlink()
        caplog.set_level(logging.WARNING)
        ready = client.get("/readyz")
        body = ready.json()
        assert "store_reachable" in body["failed"], body
        assert "vanished" in body["reasons"]["store_reachable"]
        assert any("vanished" in r.getMessage() and r.levelno >= logging.ERROR for r in caplog.records)
        daemon.run_now("clf")
        assert sink.spooled == 1, "kept in the spool, not written into a file that is gone at restart"
    finally:
        close(daemon, sink)


def _recreate_schema(url: str) -> None:
    import psycopg

    schema = _schema_of(url)
    with psycopg.connect(_dsn(url).split("?", 1)[0], autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        conn.execute(f'CREATE SCHEMA "{schema}"')


@pytest.mark.postgres
def test_a_database_recreated_empty_keeps_results_queued_until_db_upgrade(ws: Workspace, postgres_url: str) -> None:
    with postgres_schema(postgres_url) as url:
        daemon, sink, client = make_daemon(ws, url)
        try:
            daemon.run_now("clf")
            _recreate_schema(url)
            results = [daemon.run_now("clf"), daemon.run_now("spin")]
            assert sink.spooled == 2, "an empty database is an outage: the results wait in the spool"
            assert sink.flush() == 0 and sink.spooled == 2
            assert sink.spool is not None and sink.spool.failed() == [], "nothing set aside as refused"
            body = client.get("/readyz").json()
            assert "store_reachable" in body["failed"] and "db upgrade" in body["reasons"]["store_reachable"]
            with Store(url) as migrating:
                migrating.upgrade()  # what `onnxmon db upgrade` does
            written_s = wait_for(lambda: sink.spooled == 0)
            assert stored_runs(daemon.store, results) == measured(results)
            assert not_ready(client) == ["scheduler_running"], "only the scheduler, not started in-process"
            print(f"\nMEASURED database recreated empty: 2 queued, written {written_s:.1f}s after db upgrade")
        finally:
            close(daemon, sink)
