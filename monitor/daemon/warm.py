"""Warm check workers: one persistent child per model that keeps its ONNX Runtime session between checks.

A fresh check (``isolate.run``) forks a child, builds a session, checks and exits: on a GPU that start
is a CUDA context, cuDNN/cuBLAS handles, algorithm searches and, with TensorRT, an engine build, every
interval. A warm worker is forked the same way (from the same forkserver) and isolated the same way:
its own process group, death with the daemon that owns it, the ``daemon.memory_limit_mb`` cap as
RLIMIT_AS, a hard timeout after which its whole group is SIGKILLed. It then stays, answering one
check after another over a pipe; inside, ``runtime.kept.KeptModels`` keeps the session and
re-verifies the model file cheaply (see there). What comes back is the check's result, computed and
compared inside the worker: no output tensor crosses the pipe.

A worker is stopped, and the model's next check starts a new one, when:

- it timed out (killed with its process group at the hard cut) or crashed (died without answering,
  or raised): the check is an ``error`` with reason ``timeout`` or ``crash``, as in a fresh child;
- its check could not run (reasons ``timeout``, ``run_error``, ``internal_error``): what state the
  session was left in is unknown;
- the model's ``CheckPlan`` changed (a config reload) or the memory cap did, or a reload shrank
  ``daemon.warm_workers`` below the workers alive, changed ``rehash_every`` or switched to ``fresh``:
  a busy worker then stops after its check, never killed mid-check;
- after a check its address space passed 3/4 of the cap: a slow leak recycles the worker between
  checks instead of failing the check that would cross the cap;
- it is the least recently used, idle for ``EVICT_IDLE_S`` or more, and a new worker needs its place
  (``daemon.warm_workers``). A full pool whose workers were all used more recently than that does not
  evict: the check runs in a fresh child. With more models than workers, all checked every interval
  (200 models, 16 workers), evicting the least recently used would start and kill a worker for every
  check (the worst case of LRU on a cycle); instead the first ``warm_workers`` models stay warm and
  the others are checked fresh, as with ``daemon.worker: fresh``. A model no longer checked (its
  schedule slowed, a reload) frees its worker after ``EVICT_IDLE_S``.

A model's worker runs one check at a time; a second check of the same model asked for meanwhile (an
API request during a scheduled run) runs in a fresh child, as before.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing.connection
import os
import select
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing.reduction import ForkingPickler
from typing import Any, Literal

from monitor.config.plan import CheckPlan, plan_for
from monitor.config.settings import Settings
from monitor.daemon import isolate
from monitor.daemon.warm_worker import serve
from monitor.errors import MonitorError
from monitor.results import CheckResult

Clock = Callable[[], float]
Job = Callable[..., Mapping[str, Any]]  # job(plan, models=runtime.kept.KeptModels) -> {"result": CheckResult, ...}
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
    # select.poll over the pipe and the process's sentinel (readable once it exited); polled only by
    # the thread holding ``busy`` (the check's)
    watch: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.watch = select.poll()
        self.watch.register(self.conn.fileno(), select.POLLIN)
        self.watch.register(self.process.sentinel, select.POLLIN)

    def alive(self) -> bool:
        """Whether the process still runs: one ``select`` of its sentinel (``is_alive`` builds a selector).

        Not ``watch``: a poll object is not polled from two threads at once (a check waiting on it)."""
        return not select.select([self.process.sentinel], [], [], 0)[0]


class WarmPool:
    """The daemon's warm workers, one per model, at most ``limit`` at once."""

    def __init__(
        self,
        *,
        limit: int = 16,
        rehash_every: int = 100,
        evict_idle_s: float = EVICT_IDLE_S,
        clock: Clock = time.monotonic,
    ) -> None:
        self.limit = limit
        self.rehash_every = rehash_every
        self.evict_idle_s = evict_idle_s
        self._clock = clock
        self._guard = threading.Lock()
        self._workers: dict[str, _Worker] = {}
        self._requests: dict[Job, bytes] = {}
        self._closed = False

    def run(
        self, job: Job, plan: CheckPlan, *, timeout_s: float, memory_limit_bytes: int | None
    ) -> isolate.Outcome | None:
        """``job(plan, models=...)`` in the model's warm worker, cut at ``timeout_s``.

        None when no warm worker can take it now (the model's worker is busy, every worker is busy
        and the pool is full, or the pool is closed): the caller runs the check in a fresh child.
        """
        key = (plan, memory_limit_bytes)
        to_stop: list[_Worker] = []
        with self._guard:
            if self._closed:
                return None
            worker = self._workers.get(plan.name)
            if worker is not None and (worker.key != key or worker.retired or not worker.alive()):
                if not worker.busy.acquire(blocking=False):
                    return None  # still busy with the old plan: this check goes fresh
                del self._workers[plan.name]
                to_stop.append(worker)
                worker = None
            if worker is None:
                if len(self._workers) >= self.limit and not self._evict_one(to_stop):
                    worker = None
                else:
                    worker = self._spawn(plan.name, key, memory_limit_bytes)
                    self._workers[plan.name] = worker
            if worker is not None and not worker.busy.acquire(blocking=False):
                worker = None
        for old in to_stop:
            _stop(old)
            old.busy.release()
        if worker is None:
            return None
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

    def resize(self, limit: int, rehash_every: int) -> None:
        """A reload's ``warm_workers`` / ``rehash_every``, applied as workers free up: never by killing a check.

        Workers over the new size (least recently used first), and every worker when ``rehash_every``
        changed, are retired: an idle one stops now, a busy one after its check.
        """
        with self._guard:
            self.limit = limit
            if rehash_every != self.rehash_every:
                self.rehash_every = rehash_every
                for worker in self._workers.values():
                    worker.retired = True
            kept = sorted((w for w in self._workers.values() if not w.retired), key=lambda w: w.last_used)
            for worker in kept[: max(0, len(kept) - limit)]:
                worker.retired = True
        self.retain(lambda name, plan: True)

    def drain(self) -> None:
        """No more warm checks (a reload to ``worker: fresh``): each worker stops once idle, none is killed."""
        with self._guard:
            self._closed = True
        self.resize(0, self.rehash_every)

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
        began = time.monotonic()
        try:
            # The worker keeps the plan it was started for (its key: a changed plan starts another
            # worker), so only the first check sends it; pickling and unpickling a plan costs ~0.2 ms.
            # Later requests are the same bytes every time: pickled once per job.
            if worker.checks == 0:
                worker.conn.send((job, plan))
            else:
                worker.conn.send_bytes(self._request(job))
        except (OSError, ValueError):  # died while idle (the OOM killer, a signal): a crash, as a fresh child's
            return self._lost(worker, "crash", time.monotonic() - began, memory_limit_bytes)
        message = _receive(worker, began + timeout_s)
        elapsed = time.monotonic() - began
        if message == "timeout":
            self._discard(worker)
            return isolate.Outcome("timeout", None, isolate.timeout_detail(timeout_s), timeout_s)
        if message is None:
            return self._lost(worker, "crash", elapsed, memory_limit_bytes)
        status, payload = message
        if status != "ok":
            self._discard(worker)
            return isolate.Outcome("crash", None, f"child raised {payload}", elapsed)
        worker.checks += 1
        worker.last_used = self._clock()
        memory = payload.pop("worker", {})
        if worker.retired or _unsure(payload) or _near_cap(memory, memory_limit_bytes):
            self._discard(worker)
        return isolate.Outcome("ok", payload, "", elapsed)

    def _request(self, job: Job) -> bytes:
        """``(job, None)`` as ``Connection.send`` pickles it: the worker's ``recv`` reads it as one."""
        request = self._requests.get(job)
        if request is None:
            request = self._requests[job] = bytes(ForkingPickler.dumps((job, None)))
        return request

    def _lost(
        self, worker: _Worker, kind: isolate.Kind, elapsed: float, memory_limit_bytes: int | None = None
    ) -> isolate.Outcome:
        worker.process.join(timeout=5)
        code = worker.process.exitcode
        self._discard(worker)
        return isolate.Outcome(kind, None, isolate.describe_exit(code, memory_limit_bytes), elapsed, code)

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

    def _spawn(self, name: str, key: tuple[Any, ...], memory_limit_bytes: int | None) -> _Worker:
        ctx = isolate.context()
        mine, theirs = ctx.Pipe(duplex=True)
        process = ctx.Process(  # type: ignore[attr-defined]
            target=serve,
            args=(theirs, os.getpid(), memory_limit_bytes, self.rehash_every),
            daemon=True,
            name=f"onnxmon-warm-{name}"[:64],
        )
        process.start()
        theirs.close()  # the worker holds the only other end: EOF here means it died
        return _Worker(name, key, process, mine, last_used=self._clock())


def configured(settings: Settings) -> WarmPool | None:
    """The pool ``daemon.worker: warm`` asks for; None for ``fresh``."""
    daemon = settings.daemon
    return WarmPool(limit=daemon.warm_workers, rehash_every=daemon.rehash_every) if daemon.worker == "warm" else None


def reconfigured(pool: WarmPool | None, settings: Settings) -> WarmPool | None:
    """The pool after a reload to ``settings``: the same one, resized to ``warm_workers`` and minus the workers
    whose plan changed or whose model went; None (the old one drained) for ``worker: fresh``.

    A reload never kills a check in flight (issue 30, B4: closing the pool SIGKILLed a busy worker after
    10 s): a worker to stop stops once its check is done.
    """
    daemon = settings.daemon
    if pool is not None and daemon.worker == "warm":
        pool.resize(daemon.warm_workers, daemon.rehash_every)
        pool.retain(lambda name, plan: _plan_or_none(settings, name) == plan)
        return pool
    if pool is not None:
        pool.drain()
    return configured(settings)


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


def _receive(worker: _Worker, deadline: float) -> tuple[str, Any] | Literal["timeout"] | None:
    """The worker's answer by ``deadline`` (monotonic), ``"timeout"`` past it, None when it died mute.

    ``isolate.receive``'s contract for one warm worker, waiting on its pipe and its sentinel at once
    (one ``poll`` per wake-up; a death is seen when it happens, not at the next ``POLL_S``).
    """
    conn, sentinel = worker.conn, worker.process.sentinel
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout"
        ready = {fd for fd, _ in worker.watch.poll(math.ceil(min(left, isolate.POLL_S) * 1000))}
        if conn.fileno() in ready:
            try:
                message: tuple[str, Any] = conn.recv()
            except (EOFError, OSError):
                return None
            return message
        if sentinel in ready:
            # It may have answered and exited between two polls: drain before concluding it died mute.
            if conn.poll(0):
                continue
            return None


def _unsure(payload: Mapping[str, Any]) -> bool:
    result = payload.get("result")
    return isinstance(result, CheckResult) and any(r.code in _UNSURE_AFTER for r in result.reasons)


def _near_cap(memory: Mapping[str, Any], memory_limit_bytes: int | None) -> bool:
    used = memory.get("address_space_bytes")
    return bool(memory_limit_bytes) and isinstance(used, int) and used > RECYCLE_AT * (memory_limit_bytes or 0)
