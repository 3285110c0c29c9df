"""Recording the CLI's results the way the daemon does: to the store, else to the spool, never lost.

``onnxmon check`` measures first and records second. When the history store cannot take a result
(an unreachable PostgreSQL, a SQLite path that does not exist, a bad URL), the result goes to the
same on-disk spool the daemon uses, and the next ``onnxmon check`` or daemon start writes it back.
When the spool cannot take it either, the result is still printed by the caller. Either way the
command says so in one line and exits 3 ("could not record"), never 1 (the drift code) with a
traceback.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from monitor.cli import common
from monitor.config.dburl import mask_url
from monitor.config.settings import Settings
from monitor.results import CheckResult
from monitor.sinks import spool
from monitor.sinks.database import DatabaseSink, is_outage
from monitor.sinks.spool import Spool
from monitor.store import Store


@dataclass(frozen=True)
class Recorded:
    """What became of the results: all written, spooled (with where), or neither (with why)."""

    written: int
    spooled: int
    lost: int
    problem: str | None = None
    spool_dir: str | None = None
    run_ids: tuple[int | None, ...] = ()
    """Per result, in order: the id of its run in the store (None when spooled or not recorded)."""

    @property
    def complete(self) -> bool:
        return self.problem is None

    def message(self) -> str:
        """One line for stderr; empty when every result reached the store."""
        if self.complete:
            return ""
        if self.lost:
            return f"the history store cannot take results ({self.problem}); {self.lost} result(s) not recorded"
        return (
            f"the history store cannot take results ({self.problem}); {self.spooled} result(s) spooled in"
            f" {self.spool_dir}, written back by the next check or daemon start that can write to it"
        )


def record(settings: Settings, results: Sequence[CheckResult]) -> Recorded:
    """Write ``results`` to the configured store through the spool; never raises for an outage."""
    node, pod = common.node_identity()
    store_cfg = settings.store
    fallback = spool.configured(store_cfg)
    try:
        store: Store | None = common.open_store(settings)
    except Exception as exc:  # a bad URL or an unreachable database (StoreUnavailable): the store cannot even open
        if not is_outage(exc):
            raise
        return _spool_all(fallback, results, node, pod, _why(exc, store_cfg.url))
    assert store is not None
    sink = DatabaseSink(store, node=node, pod=pod, spool=fallback, retry_s=3600.0)
    quiet = logging.getLogger("onnxmon.sinks.database")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the command prints its own one line about the outage
    try:
        with contextlib.suppress(Exception):
            sink.flush()  # a backlog from earlier runs goes first, in measured order
        lost, failure = 0, None
        run_ids: list[int | None] = []
        for result in results:
            try:
                run_ids.append(sink.record(result))  # None: it went to the spool (or, counted below, nowhere)
            except Exception as exc:  # the spool failed too, or the store refused the row: printed, not recorded
                run_ids.append(None)
                lost += 1
                failure = _why(exc, store_cfg.url)
        lost += sink.unspooled  # neither the store nor the spool took these: the sink logged each in full
        spooled = run_ids.count(None) - lost  # this command's own, whatever another process adds or drains
        if spooled and not lost and sink.last_outage is None and _written_back(sink):
            spooled = 0  # no outage: they had joined another process's write-back (the daemon's), now written
        failure = failure or sink.spool_error
        problem = (failure or sink.last_outage or "unknown") if (spooled or lost) else None
        return Recorded(len(results) - spooled - lost, spooled, lost, problem, str(fallback.directory), tuple(run_ids))
    finally:
        quiet.setLevel(level)
        sink.close()
        store.close()


def _written_back(sink: DatabaseSink) -> bool:
    """True when a write-back of the whole spool (this command's results at its tail) met no outage.

    The store answered, yet results went to the spool: its queue was not empty because another process
    (a daemon) is writing a backlog back. Written in measured order, behind that backlog, they are
    stored once this write-back (or the other process's) reaches them: not an outage to report.
    """
    try:
        sink.flush()
    except Exception:  # an outage or a refusal: the results wait in the spool, as reported
        return False
    return sink.last_outage is None


def _spool_all(
    spool: Spool, results: Sequence[CheckResult], node: str | None, pod: str | None, problem: str
) -> Recorded:
    spooled = lost = 0
    for result in results:
        try:
            spool.append(result, node=node, pod=pod)
            spooled += 1
        except OSError:
            lost += 1
    return Recorded(0, spooled, lost, problem, str(spool.directory))


def _why(exc: BaseException, url: str) -> str:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    where = "" if "://" in first else f"{mask_url(url)}: "  # the store's own lines name the database already
    return f"{where}{type(exc).__name__}: {first}"[:500]
