"""The database sink: every check result becomes a run row (plus events) in the ``Store``.

With a ``Spool`` the sink survives database outages without losing results. A write that
fails because the database is *unavailable* (a DB-API ``OperationalError`` or
``InterfaceError``: refused or dropped connections, a locked SQLite file, a full disk under
the database) queues the result on disk; while the queue is not empty every new result
joins its tail, so history is written in the order it was measured. A background thread,
running only while there is a backlog, retries every ``retry_s`` seconds and writes the queue
back oldest first. Any other failure (a bug, a constraint) is not an outage: it is raised to
the dispatcher as before, so that one bad result can never block the queue. A database without
its schema (dropped and recreated empty: ``StoreUnavailable``) is an outage too: the results wait
until ``onnxmon db upgrade`` ran.

When the spool itself cannot be written (its disk full, its folder unwritable), the result is
not dropped silently: it goes to the log in full, as one strict-JSON line
(``{"event": "result_not_stored", ..., "result": {...}}`` on logger ``onnxmon.sinks.database``),
``unspooled`` counts it and ``spool_error`` says why until a result is kept again.
"""

from __future__ import annotations

import logging
import threading
import time

from monitor import jsonsafe
from monitor.results import CheckResult
from monitor.sinks.spool import Spool, SpooledResult
from monitor.store import Store, StoreUnavailable

log = logging.getLogger("onnxmon.sinks.database")

# DB-API (PEP 249) exception classes that mean "the database cannot be used right now".
# Matched by name along the class hierarchy: SQLAlchemy wraps the driver's exception in a
# class of the same name, and only ``monitor/store`` may import SQLAlchemy.
_OUTAGE_ERRORS = frozenset({"OperationalError", "InterfaceError", "DisconnectionError"})


def is_outage(exc: BaseException) -> bool:
    """True when ``exc`` says the database is unreachable or unusable, not that the write is wrong."""
    if isinstance(exc, OSError | StoreUnavailable):
        return True
    return any(kind.__name__ in _OUTAGE_ERRORS for kind in type(exc).__mro__)


class DatabaseSink:
    """Writes results to the history database; ``node``/``pod`` default to the snapshot's ``k8s.*`` keys."""

    def __init__(
        self,
        store: Store,
        *,
        node: str | None = None,
        pod: str | None = None,
        spool: Spool | None = None,
        retry_s: float = 5.0,
    ) -> None:
        self.store = store
        self.node = node
        self.pod = pod
        self.spool = spool
        self.retry_s = retry_s
        self.last_outage: str | None = None
        self.spool_error: str | None = None  # why the last result could be neither written nor spooled
        self.unspooled = 0  # such results since start, each logged in full
        self.last_run_id: int | None = None  # the id the last write got from the store (None: spooled)
        self._order = threading.Lock()  # one writer at a time keeps the history in measured order
        self._retrying: threading.Thread | None = None
        self._closed = threading.Event()
        if spool is not None and len(spool):  # a backlog left by a previous process
            log.warning("%d result(s) spooled in %s from before; writing them back", len(spool), spool.directory)
            self._retry_in_background()

    @property
    def spooled(self) -> int:
        """Results waiting on disk for the database."""
        return len(self.spool) if self.spool is not None else 0

    def write(self, result: CheckResult) -> None:
        """Record ``result``; during an outage, queue it on disk instead (when a spool is configured).

        ``last_run_id`` is then the stored run's id, or None when the result went to the spool.
        """
        self.record(result)

    def record(self, result: CheckResult) -> int | None:
        """``write``, returning the stored run's id (None: spooled) to this caller, whatever other threads write."""
        self.last_run_id = None
        if self.spool is None:
            self.last_run_id = run_id = self.store.record_run(result, node=self.node, pod=self.pod)
            return run_id
        with self._order:
            if not len(self.spool):
                try:
                    self.last_run_id = run_id = self.store.record_run(result, node=self.node, pod=self.pod)
                    self.spool_error = None
                    return run_id
                except Exception as exc:
                    if not is_outage(exc):
                        raise
                    self._note_outage(exc)
            try:
                self.spool.append(result, node=self.node, pod=self.pod)
            except OSError as exc:
                self._not_spooled(result, exc)
                return None
            self.spool_error = None
        self._retry_in_background()
        return None

    def _not_spooled(self, result: CheckResult, exc: OSError) -> None:
        """Neither the database nor the spool took ``result``: log all of it, count it, say why."""
        self.unspooled += 1
        self.spool_error = f"{type(exc).__name__}: {exc}"[:300]
        line = {
            "event": "result_not_stored",
            "database_error": self.last_outage,
            "spool_error": self.spool_error,
            "spool": self.spool_dir,
            "node": self.node,
            "pod": self.pod,
            "result": result.to_dict(),
        }
        log.error("%s", jsonsafe.dumps(line, default=str))

    def flush(self) -> int:
        """Write the queued results back, oldest first; returns how many were written."""
        if self.spool is None:
            return 0
        with self._order:
            began = time.monotonic()
            written, outage = self.spool.drain(self._write_spooled, transient=is_outage)
        if written:
            log.info("wrote %d spooled result(s) to the database in %.3f s", written, time.monotonic() - began)
        if outage is not None:
            self._note_outage(outage)
        elif written or self.last_outage:
            self.last_outage = None
        return written

    def close(self) -> None:
        """Stop retrying; what is still queued stays on disk for the next start."""
        self._closed.set()
        if self._retrying is not None:
            self._retrying.join(timeout=30)

    def _write_spooled(self, entry: SpooledResult) -> None:
        self.store.record_run(entry.result, node=entry.node, pod=entry.pod)

    def _note_outage(self, exc: BaseException) -> None:
        detail = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        if detail != self.last_outage:
            log.warning("database unavailable, spooling results to %s: %s", self.spool_dir, detail)
        self.last_outage = detail

    @property
    def spool_dir(self) -> str:
        return str(self.spool.directory) if self.spool is not None else "-"

    def _retry_in_background(self) -> None:
        with self._order:
            if self._retrying is not None:  # cleared by the thread itself, under this lock, as it ends
                return
            self._retrying = threading.Thread(target=self._retry_loop, name="onnxmon-spool-retry", daemon=True)
            self._retrying.start()

    def _retry_loop(self) -> None:
        """Retry until the backlog is written (or the sink is closed); then the thread ends."""
        while not self._closed.wait(self.retry_s):
            try:
                self.flush()
            except Exception:  # never let the retry thread die with a backlog left
                log.exception("writing spooled results failed")
            with self._order:
                if not self.spooled:
                    self._retrying = None
                    return
        with self._order:
            self._retrying = None
