"""One session called from many threads at once, as a multi-threaded server calls it.

``schedule(samples, threads, passes)`` is the plan: every sample ``passes`` times, the passes laid
end to end (each rotated, so a sample meets other neighbours in each pass), padded from the start so
every thread gets as many calls, and cut into rounds; a round deals ``threads * STRIPE`` calls like
cards, so each thread's calls sit beside other threads' samples. ``replay_concurrently`` runs it: each
thread loads and validates its round's samples (``Session.prepare``), waits at a barrier with the
others, then calls ONNX Runtime for each back to back (``Session.run_prepared``: no Python work
between the barrier and the call) — the barrier is what makes the calls of a round really overlap
instead of trickling in one after another, and the stripe keeps a thread that wakes late from the
barrier among busy ones. A thread done with its calls while another has not yet made its first of
the round calls its samples again (for at most ``LATE_S``): a model that answers faster than a
thread wakes would otherwise be called one thread at a time, and overlap nothing. Each answer goes
to ``each(sample, outputs)`` in that thread, where it is compared and dropped: memory holds a round's
inputs and one answer per thread, never the set.

ONNX Runtime documents ``InferenceSession.run`` as safe to call from several threads at once; a custom
op, an execution provider or a model that keeps state may not be, and that is what this looks for.
``Concurrent`` counts what really happened: the calls, how many overlapped another call (in flight at
the same moment, measured, not assumed), the most in flight at once, and the runs that raised.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from monitor.runtime.session import RunTimeout, Session
from monitor.runtime.watchdog import Deadline

PASSES = 3  # each sample's concurrent calls: several, each beside other samples
LATE_S = 1.0  # the longest a thread repeats its round's calls while another has not made its first
STRIPE = 4  # calls per thread per round, back to back: a thread still waking from the barrier meets the others'
Loader = Callable[[int], Mapping[str, np.ndarray]]
Each = Callable[[int, Mapping[str, np.ndarray]], None]


@dataclass(frozen=True)
class Failure:
    """A call that raised: which sample, and ONNX Runtime's message (first line, bounded)."""

    sample: int
    error: str


@dataclass(frozen=True)
class Concurrent:
    """What a concurrent replay did: its calls, how many overlapped another, the most in flight, what raised."""

    threads: int
    rounds: int
    calls: int
    overlapped_calls: int
    max_in_flight: int
    seconds: float
    failures: tuple[Failure, ...] = ()


def schedule(samples: int, threads: int, passes: int, stripe: int = STRIPE) -> list[tuple[tuple[int, ...], ...]]:
    """Rounds; in each, one tuple of sample indices per thread: every sample ``passes`` times (module docstring)."""
    if samples <= 0 or threads <= 0 or passes <= 0 or stripe <= 0:
        return []
    shift = max(1, threads // 2 + 1)
    jobs = [(index + turn * shift) % samples for turn in range(passes) for index in range(samples)]
    while len(jobs) % threads:
        jobs.append(jobs[len(jobs) % (samples * passes)])
    rounds = []
    for start in range(0, len(jobs), threads * stripe):
        dealt = jobs[start : start + threads * stripe]  # dealt like cards: a thread's calls sit beside others'
        rounds.append(tuple(tuple(dealt[slot::threads]) for slot in range(threads)))
    return rounds


class _InFlight:
    """Which calls are running now; a call that ever shares a moment with another counts as overlapped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: dict[int, bool] = {}  # call -> overlapped so far
        self._numbers = itertools.count()
        self.calls = 0
        self.overlapped = 0
        self.most = 0

    def start(self) -> int:
        with self._lock:
            call = next(self._numbers)
            self._active[call] = len(self._active) > 0
            if len(self._active) > 1:
                self._active = dict.fromkeys(self._active, True)
            self.most = max(self.most, len(self._active))
            return call

    def end(self, call: int) -> None:
        with self._lock:
            self.calls += 1
            self.overlapped += self._active.pop(call)


def replay_concurrently(
    session: Session,
    rounds: Sequence[tuple[tuple[int, ...], ...]],
    *,
    load: Loader,
    each: Each,
    guard: Deadline,
    where: str = "concurrent replay",
) -> Concurrent:
    """Run ``rounds`` (``schedule``'s) through ``session``, one thread per slot, a barrier before each round.

    A run that raises is a ``Failure`` (the threads go on); ``each`` raising stops every thread and is
    raised here, as is ``RunTimeout`` when ``guard`` fired (every run after it fails at once).
    """
    threads = len(rounds[0]) if rounds else 0
    if threads == 0:
        return Concurrent(0, 0, 0, 0, 0, 0.0)
    barrier = threading.Barrier(threads)
    flight = _InFlight()
    entered = [0] * len(rounds)  # per round, the threads that made their first call
    failures: list[Failure] = []
    fatal: list[BaseException] = []
    lock = threading.Lock()

    def call(sample: int, feeds: dict[str, np.ndarray]) -> None:
        number = flight.start()
        try:
            outputs = session.run_prepared(feeds, guard=guard)
        except Exception as exc:
            with lock:
                failures.append(Failure(sample, _first_line(exc)))
            return
        finally:
            flight.end(number)
        each(sample, outputs)

    def work(slot: int) -> None:
        for number, dealt in enumerate(rounds):
            try:
                mine = [(s, session.prepare(load(s), where=f"{where}: sample {s}")) for s in dealt[slot]]
                barrier.wait()
            except threading.BrokenBarrierError:
                return
            except BaseException as exc:  # a sample that cannot be read: stop everyone, say why
                with lock:
                    fatal.append(exc)
                barrier.abort()
                return
            until, turn = time.perf_counter() + LATE_S, 0
            while turn < len(mine) or (entered[number] < threads and time.perf_counter() < until):
                if guard.fired.is_set() or fatal:
                    return
                if turn == 0:
                    with lock:
                        entered[number] += 1
                try:
                    call(*mine[turn % len(mine)])
                except BaseException as exc:  # ``each`` failed: a bug, not a finding
                    with lock:
                        fatal.append(exc)
                    barrier.abort()
                    return
                turn += 1
            del mine

    session.configure(guard)  # the run options every thread shares: written once, before any reads them
    began = time.perf_counter()
    workers = [threading.Thread(target=work, args=(n,), name=f"onnxmon-concurrent-{n}") for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - began
    if fatal:
        raise fatal[0]
    if guard.fired.is_set():
        raise RunTimeout(f"{where} exceeded {guard.timeout_s:g}s and was terminated")
    failures.sort(key=lambda f: f.sample)
    ran = (flight.calls, flight.overlapped, flight.most)
    return Concurrent(threads, len(rounds), *ran, seconds=seconds, failures=tuple(failures))


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[-1] if lines else type(exc).__name__)[:300]
