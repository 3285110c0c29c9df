"""The database sink: every check result becomes a run row (plus events) in the ``Store``.

With a ``Spool`` the sink survives database outages without losing results. A write that
fails because the database is *unavailable* (the store's ``StoreUnavailable``, which it raises
for refused or dropped connections, a locked SQLite file, a full disk under the database) queues
the result on disk; while the queue is not empty every new result
joins its tail, so history is written in the order it was measured. A background thread,
running only while there is a backlog, retries every ``retry_s`` seconds and writes the queue
back oldest first. Any other failure (a bug, a constraint) is not an outage: the result is kept in the
spool's ``failed/`` folder for a person to inspect, counted in ``refused``
(``onnxmon_results_refused``) and raised to the dispatcher, which logs it, so that one bad result
can never block the queue and is never lost silently. A database without
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
from collections.abc import Iterator
from contextlib import contextmanager

from monitor import jsonsafe
from monitor.results import CheckResult
from monitor.sinks.spool import Spool, SpooledResult
from monitor.store import Store, StoreUnavailable

log = logging.getLogger("onnxmon.sinks.database")


def is_outage(exc: BaseException) -> bool:
    """True when ``exc`` says the database is unreachable or unusable, not that the write is wrong.

    The store translates its driver's errors at its boundary (``store.StoreUnavailable``); an
    ``OSError`` is the disk under the spool or the database.
    """
    return isinstance(exc, OSError | StoreUnavailable)


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
        stall_after_s: float = 60.0,
    ) -> None:
        self.store = store
        self.node = node
        self.pod = pod
        self.spool = spool
        self.retry_s = retry_s
        self.last_outage: str | None = None
        self.spool_error: str | None = None  # why the last result could be neither written nor spooled
        self.unspooled = 0  # such results since start, each logged in full
        self.refused = 0  # results the store refused (not an outage) since start, each kept in failed/
        self.stall_after_s = stall_after_s  # a write (or write-back) running longer is reported as stuck
        self.last_run_id: int | None = None  # the id the last write got from the store (None: spooled)
        self._order = threading.Lock()  # one writer at a time keeps the history in measured order
        self._writing_since: float | None = None
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
            try:
                self.last_run_id = run_id = self.store.record_run(result, node=self.node, pod=self.pod)
            except Exception as exc:
                if not is_outage(exc):
                    self.refused += 1
                raise
            return run_id
        with self.writing():
            if not len(self.spool):
                try:
                    self.last_run_id = run_id = self.store.record_run(result, node=self.node, pod=self.pod)
                    self.spool_error = None
                    return run_id
                except Exception as exc:
                    if not is_outage(exc):
                        self._refused(result, exc)
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

    def _refused(self, result: CheckResult, exc: BaseException) -> None:
        """The store refused ``result`` (not an outage): keep it in ``failed/``, count it; the caller raises."""
        self.refused += 1
        assert self.spool is not None
        try:
            self.spool.keep_refused(result, node=self.node, pod=self.pod, why=f"{type(exc).__name__}: {exc}")
        except OSError as error:
            self._not_spooled(result, error)

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
        with self.writing():
            began = time.monotonic()
            written, outage = self.spool.drain(self._write_spooled, transient=is_outage)
        if written:
            log.info("wrote %d spooled result(s) to the database in %.3f s", written, time.monotonic() - began)
        if outage is not None:
            self._note_outage(outage)
        elif written or self.last_outage:
            self.last_outage = None
        return written

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the one writer's turn, stamped so that ``stalled`` can tell a write that hangs."""
        with self._order:
            self._writing_since = time.monotonic()
            try:
                yield
            finally:
                self._writing_since = None

    @property
    def stalled(self) -> str | None:
        """Why results cannot be written now (one write holding the writer's turn too long), else None.

        A write is bounded by the store's time limits and an entry by ``monitor.bounded``; this is the
        guard for what nothing else bounds, so that ``/readyz`` never says ready while nothing is written.
        """
        since = self._writing_since
        if since is None or time.monotonic() - since < self.stall_after_s:
            return None
        return f"the database sink has been writing for {time.monotonic() - since:.0f} s: results cannot be written"

    def close(self) -> None:
        """Stop retrying; what is still queued stays on disk for the next start."""
        self._closed.set()
        if self._retrying is not None:
            self._retrying.join(timeout=30)

    def _write_spooled(self, entry: SpooledResult) -> None:
        self._writing_since = time.monotonic()  # progress: a long write-back is not a stuck one
        self.store.record_run(entry.result, node=entry.node, pod=entry.pod, key=entry.key)

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
