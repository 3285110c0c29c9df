"""The composition root: the only place that wires config, store, metrics, sinks and scheduler.

``Daemon`` owns one process's parts (injected, never global) and runs each check through
``isolate`` so that no model can hang or crash it. A model that keeps failing to *run*
(timeout, crash, unloadable model) is backed off exponentially instead of retried in a
tight loop, until its inputs change (``backoff.py``). Signals: SIGTERM stops scheduling, lets the
running check finish or hit its timeout, flushes and exits 0, within the check's timeout (+ 10 s
grace) + ``store.write_timeout`` even while the database hangs (the write then times out and the
result goes to the spool); a running diagnosis (``daemon.diagnose_on_fail``, after its fail was
recorded: ``attach.py``) is cut within ``diagnosis.STOP_S``;
SIGHUP re-reads the config, and a bad config keeps the last good one (``onnxmon_config_last_reload_successful 0``);
reloads take turns. A SIGTERM to the whole process group reaches neither the check workers (groups of their own)
nor the forkserver (it ignores SIGTERM: ``forkmain``), so the check in flight finishes as with a SIGTERM to the daemon.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from monitor.config import scope, settings
from monitor.config.identity import identity
from monitor.config.plan import CheckPlan, plan_for
from monitor.config.settings import Settings
from monitor.daemon import attach, backoff, child, fleetvote, scheduler, warm, wiring
from monitor.errors import BusyError, MonitorError
from monitor.files import baseline_meta, baselines
from monitor.results import CheckResult, error_result
from monitor.runtime import envsnap
from monitor.sinks import Sink

log = logging.getLogger("onnxmon.daemon")

_BUSY_WAIT_S = 1.0  # an API-triggered check waits this long for a free worker, then gets 429


class Daemon:
    """One onnxmon process: scheduled, isolated checks whose results go to every sink."""

    def __init__(
        self,
        settings: Settings,
        *,
        config_path: Path | None = None,
        store: Any | None = None,
        registry: Any | None = None,
        clock: Callable[[], float] = time.time,
        node: str | None = None,
        pod: str | None = None,
    ) -> None:
        from monitor.store import Store

        self._settings = settings
        self.config_path = config_path or settings.source
        self.store = store if store is not None else Store.configured(settings.store)
        self.clock = clock
        here = identity()
        self.node = node if node is not None else here.node
        self.pod = pod if pod is not None else here.pod
        self.metrics = wiring.metrics(
            registry, self.store, settings, node=self.node, clock=clock, worker_pids=self._worker_pids
        )
        self.registry = self.metrics.registry
        self.database_sink = wiring.database_sink(self.store, settings, self.metrics, node=self.node, pod=self.pod)
        self.sinks: list[Sink] = wiring.sinks(self.database_sink, self.metrics)
        self.devices = scheduler.DeviceLocks()
        # Every isolated check holds one of daemon.workers slots, scheduled or asked for through the
        # API, so a burst of POST .../check can never fork more children than the config allows.
        self.workers = settings.daemon.workers
        self._slots = threading.BoundedSemaphore(self.workers)
        self.pool = warm.configured(settings)  # the check workers: up to daemon.warm_workers kept, with their sessions
        self.backoff = backoff.Backoff(clock)
        self._reload_turn = threading.Lock()  # reloads take turns (SIGHUP, POST /-/reload)
        self._stopping = threading.Event()
        self._reasons: dict[str, str] = {}
        self._scheduler = scheduler.build(
            settings,
            self.scheduled_check,
            on_missed=self.metrics.record_missed,
            on_skipped=self.metrics.record_skipped,
            first_run_within=settings.daemon.startup_spread,
        )
        self.started_at = clock()

    def _worker_pids(self) -> dict[str, int]:
        """Each check worker's pid by model, read at each scrape (the pool is made after the metrics)."""
        pool = getattr(self, "pool", None)
        return pool.pids() if pool is not None else {}

    # --- state the API reads --------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        return self._settings

    def readiness(self) -> dict[str, bool]:
        """Each readiness check; ``readiness_reasons`` then says why the failing ones fail."""
        sink = self.database_sink
        spool = sink.spool
        problem = self._store_problem()
        reasons = {
            "store_reachable": problem,
            "store_writable": sink.last_outage,  # the last write met an outage (a full disk, a lock)
            "spool_writable": sink.spool_error,  # a result could be neither written nor spooled
            "results_writable": sink.stalled,  # a write holds the writer's turn far past its time limits
            # a full result spool means a long outage is now dropping the oldest results
            "spool_has_room": f"the spool {spool.directory} is full" if spool is not None and spool.full else None,
        }
        self._reasons = {name: why for name, why in reasons.items() if why}
        loaded = bool(self._settings.models) or self._settings.source is not None
        running = bool(self._scheduler.running) and not self._stopping.is_set()
        return {"config_loaded": loaded, "scheduler_running": running} | {n: w is None for n, w in reasons.items()}

    def readiness_reasons(self) -> dict[str, str]:
        """Why each failing check of the last ``readiness()`` fails, one line each."""
        return dict(self._reasons)

    def readiness_info(self) -> dict[str, int]:
        """Numbers beside the readiness checks: results waiting in the spool, and dropped ones."""
        sink = self.database_sink
        dropped, set_aside = (sink.spool.dropped, sink.spool.set_aside) if sink.spool else (0, 0)
        return {"spooled": sink.spooled, "dropped": dropped, "unspooled": sink.unspooled, "set_aside": set_aside}

    def _store_problem(self) -> str | None:
        try:
            health = getattr(self.store, "health", None)  # an injected test store may only ping
            if callable(health):
                problem = health()
                return None if problem is None else str(problem)
            return None if self.store.ping() else "the history database does not answer"
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"[:300]

    def _watch_store(self, period_s: float = 30.0) -> None:
        """The periodic ping: a database that vanished or hangs is logged even with no probe asking."""
        while not self._stopping.wait(period_s):
            self._store_problem()

    # --- running checks -------------------------------------------------------------------

    def scheduled_check(self, model: str) -> None:
        """The job APScheduler calls: honours back-off and shutdown, never raises."""
        if self._stopping.is_set():
            return
        started = self.clock()
        try:
            plan = plan_for(self._settings, model)
            failures = self.backoff.holds(plan)
            if failures:
                log.info("skipping %s: backed off after %d failed runs in a row", model, failures)
                self.metrics.record_backed_off(model)
                return
            if not self._my_turn(plan):
                return
            self.run_plan(plan)
        except Exception as exc:  # never let a job die: record what happened, the next tick retries
            log.exception("check of %s failed outside the child", model)
            detail = f"{type(exc).__name__}: {exc}"
            self.dispatch(error_result(model, "internal_error", detail, started, self.clock()))

    def _my_turn(self, plan: CheckPlan) -> bool:
        """In sharded mode, only the replica that wins this slot's lease runs the check."""
        settings = self._settings
        if settings.daemon.mode != "sharded":
            return True
        slot = scheduler.slot_of(settings, plan.model, self.clock())
        won = bool(self.store.claim(plan.name, slot, self.holder))
        if not won:
            log.debug("%s slot %d is another replica's", plan.name, slot)
        return won

    @property
    def holder(self) -> str:
        """This replica's name in leases: the pod, else the node, else host and pid."""
        return self.pod or self.node or f"{socket.gethostname()}:{os.getpid()}"

    def run_now(self, model: str) -> CheckResult:
        """Run one isolated check of ``model`` now, dispatch its result and return it.

        ``ConfigError`` (naming the known models) when the config has no such model; ``BusyError``
        when every worker slot is taken (the API answers 429), rather than queueing unboundedly.
        """
        plan = plan_for(self._settings, model)
        if not self._slots.acquire(timeout=_BUSY_WAIT_S):
            raise BusyError(f"all {self.workers} check workers are busy (daemon.workers); retry shortly")
        try:
            return self._run_isolated(plan)
        finally:
            self._slots.release()

    def run_plan(self, plan: CheckPlan) -> CheckResult:
        """Run one isolated check of a resolved plan, waiting for a worker slot, dispatch and return it."""
        with self._slots:
            return self._run_isolated(plan)

    def _run_isolated(self, plan: CheckPlan) -> CheckResult:
        with self.devices.hold(scheduler.device_key(plan.model)):
            result, captured = child.run_isolated(
                plan, memory_limit_mb=self._settings.daemon.memory_limit_mb, clock=self.clock, pool=self.pool
            )
            if captured and "error" not in captured:
                self._record_captured(captured)
            self.backoff.update(plan, result, self._settings.daemon.max_backoff)
            run_id = self.dispatch(result)  # every sink first: a fail is never held back for its diagnosis
            if self._settings.daemon.diagnose_on_fail:  # still holding the device: experiments run on it
                budget = self._settings.daemon.diagnose_budget
                result = attach.attach(
                    plan,
                    result,
                    run_id,
                    budget_s=budget,
                    store=self.store,
                    stop=self._stopping,
                    results_log=wiring.RESULTS_LOG,
                )
            fleetvote.after_check(  # the node's vote from the shared store; a re-run here, on its device
                plan,
                result,
                run_id,
                settings=self._settings,
                store=self.store,
                node=self.node,
                gauges=self.metrics.fleet,
                stop=self._stopping,
            )
        return result

    def dispatch(self, result: CheckResult) -> int | None:
        """Give ``result`` to every sink; a failing sink is logged and never stops the others.

        Returns the stored run's id (None: spooled, or the database sink failed).
        """
        run_id = None
        for sink in self.sinks:
            try:
                if sink is self.database_sink:
                    run_id = self.database_sink.record(result)
                else:
                    sink.write(result)
            except Exception:
                log.exception("sink %s failed for %s", type(sink).__name__, result.model)
        return run_id

    def _record_captured(self, meta: dict[str, Any]) -> None:
        try:
            record = baseline_meta.BaselineMeta.from_dict(meta, where=f"auto-captured baseline {meta.get('id')}")
            self.store.record_baseline(record.store_record(path=meta.get("path"), active=bool(meta.get("active"))))
            if meta.get("active"):
                self.store.record_promotion(meta["model"], meta["id"], by="auto-capture (first baseline)")
                self.metrics.baseline_promoted(meta["model"], meta["id"])
        except Exception:
            log.exception("could not record auto-captured baseline %s", meta.get("id"))

    # --- control ----------------------------------------------------------------------------

    def promote(self, baseline_id: str, by: str) -> str:
        baseline = baselines.promote(self._settings.store.baselines_dir, baseline_id, by=by)
        self.store.record_promotion(baseline.meta.model, baseline.id, by=by)
        self.metrics.baseline_promoted(baseline.meta.model, baseline.id)
        return baseline.meta.model

    def reload(self) -> bool:
        """Re-read the config file; on any problem keep the last good config and say so.

        One reload at a time: a SIGHUP and a ``POST /-/reload`` together would otherwise swap the same
        jobs twice over (APScheduler's ``JobLookupError``) and report a valid config as invalid.
        """
        with self._reload_turn:
            return self._reload()

    def _reload(self) -> bool:
        try:
            if self.config_path is None:
                raise MonitorError("no config file to reload from")
            fresh = scope.apply(settings.load(self.config_path), gpu_name=envsnap.first_gpu_name)
            _refuse_restart_only_changes(self._settings, fresh)
            fresh = fresh.model_copy(update={"api": fresh.api.model_copy(update=_bound(self._settings))})
            scheduler.install_jobs(
                self._scheduler, fresh, self.scheduled_check, first_run_within=fresh.daemon.startup_spread
            )
        except (MonitorError, OSError) as exc:
            log.error("config reload failed, keeping the last good config: %s", exc)
            self.metrics.config_reloaded(False)
            return False
        except Exception:  # whatever went wrong, the old jobs keep running and the metric says so
            log.exception("config reload failed unexpectedly, keeping the last good config")
            self.metrics.config_reloaded(False)
            return False
        self._settings = fresh
        self.pool = warm.reconfigured(self.pool, fresh)
        self.metrics.declare(fresh)
        self.metrics.config_reloaded(True)
        log.info("config reloaded: %d model(s)", len(fresh.models))
        return True

    def start(self) -> None:
        self._scheduler.start()
        self.metrics.config_reloaded(True)
        log.info("scheduler started: %d model(s)", len(self._settings.models))

    def stop(self) -> None:
        """Stop scheduling; wait for the running checks (each bounded by its timeout)."""
        self._stopping.set()
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)
        self.pool.close()  # no check worker outlives the daemon's stop
        log.info("scheduler stopped; results flushed")

    def serve(self, *, install_signals: bool = True) -> int:
        """Run the scheduler and the HTTP server until SIGTERM/SIGINT; returns the exit code.

        The signal handlers go in first: once ``/healthz`` answers, a SIGHUP or SIGTERM must reach
        the handler, not the default action that kills the process (a supervisor that reloads
        right after the readiness probe passed did exactly that). A SIGHUP only asks for a reload;
        the loop below starts it, so a reload never races the scheduler's start.
        """
        from monitor.api import server

        reload_wanted = threading.Event()
        if install_signals:
            signal.signal(signal.SIGTERM, lambda *_: self._stopping.set())
            signal.signal(signal.SIGINT, lambda *_: self._stopping.set())
            signal.signal(signal.SIGHUP, lambda *_: reload_wanted.set())
        http = server.start(self, self._settings.api.host, self._settings.api.port)
        self.start()
        log.info("serving on http://%s:%d", self._settings.api.host, self._settings.api.port)
        threading.Thread(target=self._watch_store, name="onnxmon-store-watch", daemon=True).start()
        while not self._stopping.wait(0.1):
            if reload_wanted.is_set():
                reload_wanted.clear()
                threading.Thread(target=self.reload, name="onnxmon-reload", daemon=True).start()
        self.stop()
        http.stop()
        self.store.close()
        return 0


# Settings a running daemon cannot switch: its database, spool and worker pool are built once at
# start. A reload that changes one is refused, not reported as applied. (The HTTP socket is bound
# once too, possibly from --host/--port: a reload keeps serving where it serves.)
_RESTART_ONLY = (
    ("store", "url"),
    ("store", "spool_dir"),
    ("daemon", "workers"),
    ("daemon", "mode"),
)


def _bound(settings: Settings) -> dict[str, object]:
    return {"host": settings.api.host, "port": settings.api.port}


def _refuse_restart_only_changes(current: Settings, fresh: Settings) -> None:
    changed = [
        f"{section}.{key}"
        for section, key in _RESTART_ONLY
        if getattr(getattr(current, section), key) != getattr(getattr(fresh, section), key)
    ]
    if changed:
        raise MonitorError(f"{', '.join(changed)} changed: restart onnxmon to apply (a reload cannot switch them)")
