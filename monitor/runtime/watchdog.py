"""Run deadlines: one long-lived watchdog thread per process ends ONNX Runtime runs that overrun.

``Deadline(timeout_s)`` is a context manager around one or many ``InferenceSession.run`` calls
(a whole replay shares one): ``timeout_s`` after it is entered, the watchdog sets
``RunOptions.terminate`` on its ``run_options``, which ends the run in progress and every later
run that uses them, and sets ``fired`` so the caller can tell a timeout from another failure.

Why one thread and not a ``threading.Timer`` per deadline: a Timer is a new OS thread started
and joined at every check, which a warm worker pays for at each of its checks (and which the
check's memory cap must leave room for each time). The watchdog thread is started at the first
deadline a process arms and then sleeps on a condition until the soonest armed deadline is due;
arming and disarming are a dictionary update under a lock. A forked child (a fresh check
worker) gets a watchdog of its own at its first deadline: threads do not survive a fork.
"""

from __future__ import annotations

import os
import threading
import time

import onnxruntime as ort


class Deadline:
    """A watchdog deadline: after ``timeout_s`` it sets ``RunOptions.terminate``, ending the run in
    progress and every later run that uses the same options. ``None`` or ``<= 0`` means no limit.

    One ``Deadline`` per replay, not per run, keeps the per-inference overhead to nothing.
    """

    def __init__(self, timeout_s: float | None) -> None:
        self.timeout_s = timeout_s or 0.0
        self.run_options = ort.RunOptions()
        self.fired = threading.Event()

    def _terminate(self) -> None:
        self.fired.set()
        self.run_options.terminate = True

    def __enter__(self) -> Deadline:
        if self.timeout_s > 0:
            _watchdog().arm(self, time.monotonic() + self.timeout_s)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.timeout_s > 0:
            _watchdog().disarm(self)


class Watchdog:
    """The thread that fires due deadlines; armed ones are kept by identity with their due time."""

    def __init__(self) -> None:
        self._wake = threading.Condition(threading.Lock())
        self._armed: dict[int, tuple[float, Deadline]] = {}
        self._thread: threading.Thread | None = None

    def arm(self, deadline: Deadline, due: float) -> None:
        """Fire ``deadline`` at ``due`` (``time.monotonic()``) unless disarmed before.

        Starting the thread can fail (``RuntimeError: can't start new thread`` under a tight
        memory cap): that is raised here, at the first deadline, as a Timer's start raised it.
        """
        with self._wake:
            if self._thread is None:
                thread = threading.Thread(target=self._loop, name="onnxmon-watchdog", daemon=True)
                thread.start()
                self._thread = thread
            sooner = all(due < at for at, _ in self._armed.values())
            self._armed[id(deadline)] = (due, deadline)
            if sooner:  # the thread sleeps until the previous soonest: wake it to sleep less
                self._wake.notify()

    def disarm(self, deadline: Deadline) -> None:
        """Forget ``deadline`` (no wake-up: the thread finds nothing due when it wakes)."""
        with self._wake:
            self._armed.pop(id(deadline), None)

    def _loop(self) -> None:
        with self._wake:
            while True:
                now = time.monotonic()
                for key, (due, deadline) in list(self._armed.items()):
                    if due <= now:
                        del self._armed[key]
                        deadline._terminate()
                soonest = min((due for due, _ in self._armed.values()), default=None)
                self._wake.wait(None if soonest is None else max(0.0, soonest - now))


_process_watchdog: Watchdog | None = None
_guard = threading.Lock()


def _watchdog() -> Watchdog:
    global _process_watchdog
    if _process_watchdog is None:
        with _guard:
            if _process_watchdog is None:
                _process_watchdog = Watchdog()
    return _process_watchdog


def _after_fork() -> None:
    # The parent's thread does not exist in the child, and its lock may have been held at the fork.
    global _process_watchdog, _guard
    _process_watchdog = None
    _guard = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)
