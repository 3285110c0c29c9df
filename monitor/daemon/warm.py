"""Check workers: every check runs in one; a daemon keeps one per model, with its session, between checks.

A check worker (``warm_worker.serve``) is forked from the forkserver and isolated as every check
child is: its own process group, death with the daemon or CLI that owns it, the
``daemon.memory_limit_mb`` cap as RLIMIT_AS, a hard timeout after which its whole group is
SIGKILLed. It answers checks over a pipe, keeping between them only what
``runtime/worker_state.py`` names (the session, the model file's digests, the environment's
constant parts). What comes back is the check's result, computed and compared inside the worker:
no output tensor crosses the pipe.

``WarmPool`` keeps up to ``daemon.warm_workers`` of them, one per model. A check that no kept
worker can take (the model's is busy, the pool is full, ``daemon.worker: fresh``, or the pool is
closing) runs in a worker started for it and stopped after it (``ask_once``: what ``onnxmon check``
does for every model). A kept worker is stopped, and the model's next check starts a new one, when:

- it timed out (killed with its process group at the hard cut) or crashed (died without answering,
  or raised): the check is an ``error`` with reason ``timeout`` or ``crash``;
- its check could not run (reasons ``timeout``, ``run_error``, ``internal_error``): what state the
  session was left in is unknown;
- the model's ``CheckPlan`` changed (a config reload) or the memory cap did, or a reload shrank
  ``daemon.warm_workers`` below the workers alive or switched to ``fresh``: a busy worker then stops
  after its check, never killed mid-check;
- after a check its address space passed 3/4 of the cap: a slow leak recycles the worker between
  checks instead of failing the check that would cross the cap;
- it is the least recently used, idle for ``EVICT_IDLE_S`` or more, and a new worker needs its place.
  A full pool whose workers were all used more recently than that does not evict: the check runs in
  a worker of its own. With more models than workers, all checked every interval, evicting the least
  recently used would start and kill a worker for every check (the worst case of LRU on a cycle);
  instead the first ``warm_workers`` models stay warm. A model no longer checked (its schedule
  slowed, a reload) frees its worker after ``EVICT_IDLE_S``.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from monitor.config.plan import CheckPlan, plan_for
from monitor.config.settings import Settings
from monitor.daemon import isolate
from monitor.daemon.warm_worker import serve
from monitor.errors import MonitorError
from monitor.results import CheckResult

Clock = Callable[[], float]
Job = Callable[..., Mapping[str, Any]]  # job(plan, worker=WorkerState) -> {"result": CheckResult, ...}
RECYCLE_AT = 0.75  # of the memory cap: a worker whose address space passed it is recycled
EVICT_IDLE_S = 600.0  # a worker idle this long may make room for another model's (see the docstring)
_UNSURE_AFTER = frozenset({"timeout", "run_error", "internal_error", "crash"})
_STOP_WAIT_S = 2.0


@dataclass
class _Worker:
    name: str
    key: tuple[Any, ...]  # (plan, memory cap): any change starts a new worker
    process: Any
    conn: multiprocessing.connection.Connection
    busy: threading.Lock = field(default_factory=threading.Lock)
    checks: int = 0
    last_used: float = 0.0
    retired: bool = False


class WarmPool:
    """The daemon's kept check workers, one per model, at most ``limit`` at once (0: none kept)."""

    def __init__(self, *, limit: int = 32, evict_idle_s: float = EVICT_IDLE_S, clock: Clock = time.monotonic) -> None:
        self.limit = limit
        self.evict_idle_s = evict_idle_s
        self._clock = clock
        self._guard = threading.Lock()
        self._workers: dict[str, _Worker] = {}
        self._closed = False

    def run(self, job: Job, plan: CheckPlan, *, timeout_s: float, memory_limit_bytes: int | None) -> isolate.Outcome:
        """``job(plan, worker=...)`` in the model's kept worker, cut at ``timeout_s``.

        In a worker of its own (``ask_once``) when no kept worker can take it now: the model's is
        busy, every worker is busy and the pool is full, or the pool is closed.
        """
        key = (plan, memory_limit_bytes)
        to_stop: list[_Worker] = []
        with self._guard:
            worker = None if self._closed else self._workers.get(plan.name)
            stale = worker is not None and (worker.key != key or worker.retired or not worker.process.is_alive())
            if worker is not None and stale:
                if worker.busy.acquire(blocking=False):  # else still busy with the old plan: a worker of its own
                    del self._workers[plan.name]
                    to_stop.append(worker)
                worker = None
            elif worker is None and not self._closed and (len(self._workers) < self.limit or self._evict_one(to_stop)):
                worker = self._workers[plan.name] = spawn(plan.name, key, memory_limit_bytes, self._clock())
            if worker is not None and not worker.busy.acquire(blocking=False):
                worker = None
        for old in to_stop:
            _stop(old)
            old.busy.release()
        if worker is None:
            return ask_once(job, plan, timeout_s=timeout_s, memory_limit_bytes=memory_limit_bytes)
        try:
            return self._ask(worker, job, plan, timeout_s, memory_limit_bytes)
        finally:
            worker.busy.release()

    def pids(self) -> dict[str, int]:
        """Model -> pid of its live warm worker."""
        with self._guard:
            return {name: w.process.pid for name, w in self._workers.items() if w.process.pid is not None}

    def retain(self, keep: Callable[[str, CheckPlan], bool]) -> None:
        """Stop the workers whose (model, plan) ``keep`` refuses (a reload); a busy one stops after its check."""
        to_stop = []
        with self._guard:
            for name, worker in list(self._workers.items()):
                if keep(name, worker.key[0]) and not worker.retired:
                    continue
                worker.retired = True
                if worker.busy.acquire(blocking=False):
                    del self._workers[name]
                    to_stop.append(worker)
        for worker in to_stop:
            _stop(worker)
            worker.busy.release()

    def resize(self, limit: int) -> None:
        """A reload's ``warm_workers``, applied as workers free up: never by killing a check.

        Workers over the new size, least recently used first, are retired: an idle one stops now, a
        busy one after its check.
        """
        with self._guard:
            self.limit = limit
            kept = sorted((w for w in self._workers.values() if not w.retired), key=lambda w: w.last_used)
            for worker in kept[: max(0, len(kept) - limit)]:
                worker.retired = True
        self.retain(lambda name, plan: True)

    def close(self, wait_s: float = 10.0) -> None:
        """Stop every worker: an idle one at once, a busy one after its check (killed after ``wait_s``)."""
        with self._guard:
            self._closed = True
            workers = list(self._workers.values())
            self._workers.clear()
        for worker in workers:
            if worker.busy.acquire(timeout=wait_s):
                _stop(worker)
                worker.busy.release()
            else:
                isolate.kill_group(worker.process)

    # --- the parent's side of one check ------------------------------------------------------------

    def _ask(
        self, worker: _Worker, job: Job, plan: CheckPlan, timeout_s: float, memory_limit_bytes: int | None
    ) -> isolate.Outcome:
        outcome, memory = _exchange(worker, job, plan, timeout_s, memory_limit_bytes)
        if outcome.kind != "ok":
            self._discard(worker)
            return outcome
        worker.checks += 1
        worker.last_used = self._clock()
        if worker.retired or _unsure(outcome.value or {}) or _near_cap(memory, memory_limit_bytes):
            self._discard(worker)
        return outcome

    def _discard(self, worker: _Worker) -> None:
        """Forget ``worker`` and kill its group (the caller holds its busy lock)."""
        with self._guard:
            if self._workers.get(worker.name) is worker:
                del self._workers[worker.name]
        isolate.kill_group(worker.process)
        with contextlib.suppress(OSError):
            worker.conn.close()

    def _evict_one(self, to_stop: list[_Worker]) -> bool:
        """Take the least recently used worker idle for ``evict_idle_s`` out (the caller stops it); False if none."""
        idle_since = self._clock() - self.evict_idle_s
        for worker in sorted(self._workers.values(), key=lambda w: w.last_used):
            if worker.last_used > idle_since:
                return False  # sorted: every other worker was used more recently still
            if worker.busy.acquire(blocking=False):
                del self._workers[worker.name]
                to_stop.append(worker)
                return True
        return False


def spawn(name: str, key: tuple[Any, ...], memory_limit_bytes: int | None, now: float = 0.0) -> _Worker:
    """A new check worker for ``name``'s checks (``warm_worker.serve``), forked from the forkserver."""
    ctx = isolate.context()
    mine, theirs = ctx.Pipe(duplex=True)
    process = ctx.Process(  # type: ignore[attr-defined]
        target=serve, args=(theirs, os.getpid(), memory_limit_bytes), daemon=True, name=f"onnxmon-worker-{name}"[:64]
    )
    process.start()
    theirs.close()  # the worker holds the only other end: EOF here means it died
    return _Worker(name, key, process, mine, last_used=now)


def ask_once(job: Job, plan: CheckPlan, *, timeout_s: float, memory_limit_bytes: int | None) -> isolate.Outcome:
    """``job(plan, worker=...)`` in a check worker started for it and stopped after it, cut at ``timeout_s``."""
    worker = spawn(plan.name, (plan, memory_limit_bytes), memory_limit_bytes)
    outcome, _ = _exchange(worker, job, plan, timeout_s, memory_limit_bytes)
    if outcome.kind == "ok":
        _stop(worker)
    else:
        isolate.kill_group(worker.process)
        with contextlib.suppress(OSError):
            worker.conn.close()
    return outcome


def _exchange(
    worker: _Worker, job: Job, plan: CheckPlan, timeout_s: float, memory_limit_bytes: int | None
) -> tuple[isolate.Outcome, dict[str, Any]]:
    """Send ``(job, plan)`` to ``worker`` and wait for its answer: the outcome, and the worker's memory figures."""
    began = time.monotonic()
    try:
        worker.conn.send((job, plan))
        message = isolate.receive(worker.process, worker.conn, began + timeout_s)
    except (OSError, ValueError):  # died while idle (the OOM killer, a signal): a crash
        message = None
    elapsed = time.monotonic() - began
    if message == "timeout":
        return isolate.Outcome("timeout", None, isolate.timeout_detail(timeout_s), timeout_s), {}
    if message is None or message == "cancelled":
        worker.process.join(timeout=5)
        code = worker.process.exitcode
        return isolate.Outcome("crash", None, isolate.describe_exit(code, memory_limit_bytes), elapsed, code), {}
    status, payload = message
    if status != "ok":
        return isolate.Outcome("crash", None, f"child raised {payload}", elapsed), {}
    memory = payload.pop("memory", {})
    return isolate.Outcome("ok", payload, "", elapsed), memory if isinstance(memory, dict) else {}


def configured(settings: Settings) -> WarmPool:
    """The daemon's pool: ``daemon.warm_workers`` kept workers, none with ``daemon.worker: fresh``."""
    return WarmPool(limit=_limit(settings))


def reconfigured(pool: WarmPool, settings: Settings) -> WarmPool:
    """The pool after a reload to ``settings``: the same one, resized to ``warm_workers`` (0 for ``worker:
    fresh``) and minus the workers whose plan changed or whose model went.

    A reload never kills a check in flight: a worker to stop stops once its check is done.
    """
    pool.resize(_limit(settings))
    pool.retain(lambda name, plan: _plan_or_none(settings, name) == plan)
    return pool


def _limit(settings: Settings) -> int:
    return settings.daemon.warm_workers if settings.daemon.worker == "warm" else 0


def _plan_or_none(settings: Settings, model: str) -> CheckPlan | None:
    try:
        return plan_for(settings, model)
    except MonitorError:
        return None


def _stop(worker: _Worker) -> None:
    """Ask an idle worker to exit; kill its group if it does not within a few seconds."""
    with contextlib.suppress(OSError, ValueError):
        worker.conn.send(None)
    worker.process.join(timeout=_STOP_WAIT_S)
    if worker.process.is_alive():
        isolate.kill_group(worker.process)
    with contextlib.suppress(OSError):
        worker.conn.close()
    with contextlib.suppress(Exception):
        worker.process.close()


def _unsure(payload: Mapping[str, Any]) -> bool:
    result = payload.get("result")
    return isinstance(result, CheckResult) and any(r.code in _UNSURE_AFTER for r in result.reasons)


def _near_cap(memory: Mapping[str, Any], memory_limit_bytes: int | None) -> bool:
    used = memory.get("address_space_bytes")
    return bool(memory_limit_bytes) and isinstance(used, int) and used > RECYCLE_AT * (memory_limit_bytes or 0)
