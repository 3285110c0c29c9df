"""Database faults: an outage mid-run loses no result, and a restarted database needs no daemon restart.

PostgreSQL is real: the daemon talks to it through a small TCP forwarder run by the test,
which is stopped (connections refused, open ones cut) and started again, and which can drop
every open connection while it keeps listening (what a database restart looks like to the
pool). The machine's PostgreSQL server itself is never touched. SQLite is real too: another
connection holds an exclusive lock on the file, as a backup tool or a stuck writer would.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.daemon.root import Daemon
from monitor.results import CheckResult, Verdict
from monitor.sinks.database import DatabaseSink, is_outage
from monitor.sinks.spool import Spool, default_directory, legacy_directory
from monitor.store import Store, StoreOutage
from tests.databases import postgres_schema
from tests.serving import two_models
from tests.workspace import Workspace


class Proxy:
    """A TCP forwarder 127.0.0.1:<port> → ``upstream`` that can be stopped, started and told to drop connections."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = 0
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._guard = threading.Lock()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        """Refuse new connections and cut the open ones (the database is gone)."""
        if self._listener is not None:
            with contextlib.suppress(OSError):  # wakes the thread in accept(); close() alone leaves it accepting
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        self.drop()

    def drop(self) -> None:
        """Cut every open connection but keep listening (the database restarted)."""
        with self._guard:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self._guard:
                self._sockets |= {client, server}
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, target), daemon=True).start()


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def proxied_postgres(postgres_url: str) -> Iterator[tuple[str, Proxy]]:
    """(URL of a fresh schema reached through a ``Proxy``, the proxy)."""
    with postgres_schema(postgres_url) as direct:
        with Store(direct) as store:
            store.upgrade()
        proxy = Proxy(("127.0.0.1", 5432))
        proxy.start()
        try:
            yield direct.replace("@127.0.0.1:5432/", f"@127.0.0.1:{proxy.port}/"), proxy
        finally:
            proxy.stop()


def make_daemon(ws: Workspace, url: str) -> tuple[Daemon, DatabaseSink]:
    ws.extra["store"] = {"url": url, "baselines_dir": "baselines", "benchsets_dir": "benchsets"}
    two_models(ws)
    settings = ws.settings()
    store = Store(settings.store.url)
    store.upgrade()
    daemon = Daemon(settings, store=store)
    (sink,) = [s for s in daemon.sinks if isinstance(s, DatabaseSink)]
    return daemon, sink


def wait_for(condition: object, timeout: float = 30.0) -> float:
    """Seconds until ``condition()`` held; fails after ``timeout``."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if condition():  # type: ignore[operator]
            return time.monotonic() - began
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout} s")


def assert_stored_in_order(store: Store, results: list[CheckResult]) -> None:
    """Every result is stored exactly once, and the row ids follow the order they were measured in."""
    models = sorted({r.model for r in results})
    runs = sorted((r for m in models for r in store.runs(m, limit=1000)), key=lambda r: r.id)
    assert [(r.model, str(r.verdict)) for r in runs] == [(r.model, r.verdict.value) for r in results]
    for row, result in zip(runs, results, strict=True):
        assert abs(row.started_at.timestamp() - result.started_at) < 1e-3


@pytest.mark.postgres
def test_postgres_down_mid_run_spools_results_and_writes_them_in_order_when_it_returns(
    ws: Workspace, proxied_postgres: tuple[str, Proxy]
) -> None:
    url, proxy = proxied_postgres
    daemon, sink = make_daemon(ws, url)
    try:
        results = [daemon.run_now("clf")]
        assert sink.spooled == 0
        proxy.stop()
        (ws.root / "models" / "spin.onnx").unlink()  # a verdict change happens during the outage
        results += [daemon.run_now("clf"), daemon.run_now("spin"), daemon.run_now("clf")]
        assert [r.verdict for r in results] == [Verdict.PASS, Verdict.PASS, Verdict.ERROR, Verdict.PASS]
        assert results[2].reasons[0].code == "model_error", "the check itself is unaffected by the outage"
        assert sink.spooled == 3
        ready = daemon.readiness()
        assert ready["store_reachable"] is False
        assert ready["spool_has_room"] is True

        proxy.start()
        recovered_s = wait_for(lambda: sink.spooled == 0)
        assert daemon.readiness()["store_reachable"] is True
        assert_stored_in_order(daemon.store, results)
        changes = daemon.store.events(model="spin", kind="verdict_changed")
        assert [(e.old, e.new) for e in changes] == [(None, "error")]
        print(f"\nMEASURED postgres outage: spooled=3 recovered_after_restart_s={recovered_s:.2f}")
    finally:
        sink.close()
        daemon.store.close()


@pytest.mark.postgres
def test_a_restarted_postgres_is_used_again_by_the_next_run_without_a_daemon_restart(
    ws: Workspace, proxied_postgres: tuple[str, Proxy]
) -> None:
    url, proxy = proxied_postgres
    daemon, sink = make_daemon(ws, url)
    try:
        first = daemon.run_now("clf")
        proxy.drop()  # every pooled connection is now dead
        began = time.monotonic()
        second = daemon.run_now("clf")
        took = time.monotonic() - began
        assert sink.spooled == 0, "pool_pre_ping replaced the dead connection: nothing had to be spooled"
        assert sink.last_outage is None
        assert_stored_in_order(daemon.store, [first, second])
        print(f"\nMEASURED postgres restart between runs: second run incl. write {took:.2f}s, spooled=0")
    finally:
        sink.close()
        daemon.store.close()


@pytest.mark.slow
def test_a_locked_sqlite_file_spools_results_until_the_lock_is_released(ws: Workspace) -> None:
    daemon, sink = make_daemon(ws, "sqlite:///onnxmon.db")
    assert sink.spool is not None and sink.spool.directory == default_directory(f"sqlite:///{ws.root / 'onnxmon.db'}")
    try:
        results = [daemon.run_now("clf")]
        holder = sqlite3.connect(ws.root / "onnxmon.db", isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        began = time.monotonic()
        results.append(daemon.run_now("spin"))  # waits out the busy timeout (write_timeout), then spools
        blocked_s = time.monotonic() - began
        results.append(daemon.run_now("clf"))  # a backlog exists: straight to the spool, no wait
        assert sink.spooled == 2
        assert "locked" in (sink.last_outage or "")
        holder.execute("ROLLBACK")
        holder.close()
        recovered_s = wait_for(lambda: sink.spooled == 0)
        assert_stored_in_order(daemon.store, results)
        print(
            f"\nMEASURED sqlite lock: first blocked write {blocked_s:.1f}s, spooled=2, flushed {recovered_s:.2f}s after"
        )
    finally:
        sink.close()
        daemon.store.close()


@pytest.mark.process
def test_a_backlog_left_by_a_stopped_daemon_is_written_by_the_next_one(ws: Workspace, tmp_path: Path) -> None:
    daemon, sink = make_daemon(ws, "sqlite:///onnxmon.db")
    result = daemon.run_now("clf")
    assert sink.spool is not None
    sink.spool.append(result, node="node-a")  # as if the database had been down when it stopped
    sink.close()
    daemon.store.close()

    again, again_sink = make_daemon(ws, "sqlite:///onnxmon.db")
    try:
        wait_for(lambda: again_sink.spooled == 0)
        nodes = [r.node for r in again.store.runs("clf")]
        assert sorted(nodes, key=str) == [None, "node-a"]
    finally:
        again_sink.close()
        again.store.close()


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


# --- the spool on its own ----------------------------------------------------------------------


def a_result(index: int, verdict: Verdict = Verdict.PASS) -> CheckResult:
    return CheckResult(model="m", verdict=verdict, started_at=1000.0 + index, finished_at=1000.5 + index)


def test_a_full_spool_drops_the_oldest_result_and_counts_it(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", max_results=3)
    for index in range(5):
        spool.append(a_result(index))
    assert len(spool) == 3 and spool.full and spool.dropped == 2
    kept = [spool.read(p).result.started_at for p in spool.entries()]
    assert kept == [1002.0, 1003.0, 1004.0]


def test_non_finite_metrics_and_the_replica_survive_the_round_trip_through_the_spool(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    original = CheckResult(
        model="m",
        verdict=Verdict.FAIL,
        started_at=1.0,
        finished_at=2.0,
        timings={"gap": float("nan")},
        details={"session": {"load_seconds": float("inf")}},  # a float where monitor.details declares one
    )
    entry = spool.read(spool.append(original, node="n1", pod="p1"))
    assert (entry.node, entry.pod) == ("n1", "p1")
    assert entry.result.details["session"]["load_seconds"] == float("inf")
    assert entry.result.timings["gap"] != entry.result.timings["gap"]


def test_a_write_the_database_refuses_is_raised_not_spooled_and_a_refused_backlog_entry_is_set_aside(
    tmp_path: Path,
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'h.db'}")
    store.upgrade()
    sink = DatabaseSink(store, spool=Spool(tmp_path / "spool"), retry_s=60)
    naive = a_result(0)
    bad = CheckResult(model="m", verdict=Verdict.PASS, started_at=float("nan"), finished_at=1.0)
    with pytest.raises(ValueError):
        sink.write(bad)  # not an outage: the dispatcher logs it, the queue stays empty, failed/ keeps it
    assert sink.spooled == 0 and sink.refused == 1
    assert sink.spool is not None
    sink.spool.append(bad)  # e.g. spooled by an older version
    sink.spool.append(naive)
    (sink.spool.directory / "000000000099.json").write_text("{not json")
    assert sink.flush() == 1
    assert sink.spooled == 0
    names = [p.name for p in sink.spool.failed()]
    assert names[:2] == ["000000000001.json", "000000000099.json"] and names[2].startswith("refused-")
    assert [r.started_at.timestamp() for r in store.runs("m")] == [1000.0]
    sink.close()
    store.close()


def test_the_spool_of_onnxmon_0_1_sat_beside_a_sqlite_file_else_beside_the_baselines(tmp_path: Path) -> None:
    assert legacy_directory("sqlite:////data/onnxmon.db", tmp_path / "b") == Path("/data/onnxmon.db.spool")
    assert legacy_directory("postgresql+psycopg://db/x", Path("/data/baselines")) == Path("/data/spool")


@pytest.mark.database
@pytest.mark.parametrize(
    "url",
    ["postgresql+psycopg://postgres@127.0.0.1:1/test", f"sqlite:////nonexistent-{os.getpid()}/h.db"],
    ids=["postgresql", "sqlite"],  # the same names in every xdist worker (the pid differs)
)
def test_the_store_raises_its_own_outage_error_for_an_unreachable_database(url: str) -> None:
    # Callers (the database sink, the API guard, `onnxmon check`) tell an outage by this class alone.
    with Store(url) as store:
        for call in (lambda: store.record_run(a_result(0)), lambda: store.runs("m"), store.upgrade):
            with pytest.raises(StoreOutage) as caught:
                call()
            assert is_outage(caught.value) and "OperationalError" in str(caught.value)


def test_no_layer_above_the_store_names_a_driver_error_class() -> None:
    root = Path(__file__).resolve().parents[1] / "monitor"
    named = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if "store" not in path.relative_to(root).parts[:1]
        and any(n in path.read_text() for n in ("OperationalError", "InterfaceError", "DisconnectionError"))
    ]
    assert named == []
