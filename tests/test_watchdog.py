"""The run deadline's one long-lived watchdog thread (``runtime/watchdog.py``): shared, on time, per process."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from monitor.runtime.watchdog import Deadline


def watchdog_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "onnxmon-watchdog"]


def test_many_deadlines_share_one_thread_and_a_disarmed_one_never_fires() -> None:
    guards = []
    for _ in range(50):
        with Deadline(0.2) as guard:
            guards.append(guard)
    assert len(watchdog_threads()) == 1
    time.sleep(0.4)
    assert not any(g.fired.is_set() or g.run_options.terminate for g in guards)


def test_an_overrun_deadline_fires_on_time_even_behind_a_later_one() -> None:
    with Deadline(30) as late, Deadline(0.1) as soon:
        began = time.monotonic()
        assert soon.fired.wait(5), "the soonest deadline fired"
        waited = time.monotonic() - began
    assert soon.run_options.terminate and not late.fired.is_set()
    assert 0.09 <= waited < 2.0, waited


def _fires_in_child(queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    with Deadline(0.1) as guard:
        queue.put(guard.fired.wait(5))


@pytest.mark.process
def test_a_forked_child_gets_a_watchdog_of_its_own() -> None:
    with Deadline(0.2):  # the parent's thread exists before the fork
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_fires_in_child, args=(queue,))
        child.start()
        fired = queue.get(timeout=10)
        child.join(10)
    assert fired is True and child.exitcode == 0
