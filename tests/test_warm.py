"""A check worker is as isolated as a child: timeouts, crashes, leaks and changes start a new one.

These drive ``monitor.daemon.warm.WarmPool`` with the functions of ``tests/isolate_targets.py`` (the
same hangs, signals and allocations ``test_isolate.py`` gives a fresh child); ``test_warm_daemon.py``
runs real checks through it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.daemon import warm
from tests import isolate_targets as targets
from tests.test_isolate import pid_alive

GiB = 1024**3


@pytest.fixture
def pool() -> Iterator[warm.WarmPool]:
    instance = warm.WarmPool(limit=4)
    yield instance
    instance.close(wait_s=1)


def run(pool: warm.WarmPool, job: warm.Job, plan: targets.Plan, *, timeout_s: float = 30, cap: int | None = None):  # type: ignore[no-untyped-def]
    return pool.run(job, plan, timeout_s=timeout_s, memory_limit_bytes=cap)


def gone(pid: int, within_s: float = 5) -> bool:
    deadline = time.monotonic() + within_s
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not pid_alive(pid)


@pytest.mark.database
@pytest.mark.process
def test_one_worker_answers_every_check_of_a_model_from_its_own_process_group(pool: warm.WarmPool) -> None:
    first = run(pool, targets.warm_answer, targets.Plan("m", 1))
    second = run(pool, targets.warm_answer, targets.Plan("m", 1))
    assert first.kind == second.kind == "ok"
    assert first.value is not None and second.value is not None
    assert first.value["pid"] == second.value["pid"] != os.getpid(), "the same worker, not this process"
    assert first.value["pgid"] == first.value["pid"], "the worker leads its own process group"
    assert pool.pids() == {"m": first.value["pid"]}


@pytest.mark.process
def test_a_hung_worker_is_killed_with_its_group_and_the_next_check_gets_a_new_one(
    pool: warm.WarmPool, tmp_path: Path
) -> None:
    plan = targets.Plan("m", str(tmp_path / "grandchild.pid"))  # the same plan throughout: the same worker
    before = run(pool, targets.warm_answer, plan).value
    pid_file = tmp_path / "grandchild.pid"
    began = time.monotonic()
    hung = run(pool, targets.warm_hang, plan, timeout_s=2)
    assert hung.kind == "timeout" and "timeout" in hung.detail
    assert time.monotonic() - began < 15
    assert before is not None and gone(before["pid"]), "the hung worker was killed"
    assert gone(int(pid_file.read_text())), "its grandchild died with the group"
    after = run(pool, targets.warm_answer, plan).value
    assert after is not None and after["pid"] != before["pid"]


@pytest.mark.process
@pytest.mark.parametrize(("job", "named"), [(targets.warm_kill, "SIGKILL"), (targets.warm_segfault, "SIGSEGV")])
def test_a_worker_that_dies_is_a_crash_naming_the_signal_and_is_replaced(
    pool: warm.WarmPool, job: warm.Job, named: str
) -> None:
    before = run(pool, targets.warm_answer, targets.Plan("m")).value
    crashed = run(pool, job, targets.Plan("m"))
    assert crashed.kind == "crash" and named in crashed.detail, crashed.detail
    after = run(pool, targets.warm_answer, targets.Plan("m")).value
    assert before is not None and after is not None and after["pid"] != before["pid"]


@pytest.mark.process
def test_an_exception_in_a_worker_is_a_crash_with_its_message_and_the_worker_is_replaced(pool: warm.WarmPool) -> None:
    before = run(pool, targets.warm_answer, targets.Plan("m")).value
    raised = run(pool, targets.warm_raise, targets.Plan("m"))
    assert raised.kind == "crash" and "RuntimeError: boom" in raised.detail
    assert before is not None and gone(before["pid"])
    assert run(pool, targets.warm_answer, targets.Plan("m")).kind == "ok"


@pytest.mark.process
def test_the_memory_cap_turns_a_leak_into_a_clean_crash_in_a_warm_worker(pool: warm.WarmPool) -> None:
    leak = run(pool, targets.warm_allocate, targets.Plan("m", 4096), cap=2 * GiB)
    assert leak.kind == "crash" and "MemoryError" in leak.detail
    assert run(pool, targets.warm_allocate, targets.Plan("m", 16), cap=2 * GiB).kind == "ok"


@pytest.mark.database
@pytest.mark.process
def test_a_worker_past_three_quarters_of_its_cap_is_recycled_before_its_next_check(
    pool: warm.WarmPool, tmp_path: Path
) -> None:
    cap = 2 * GiB
    amount = tmp_path / "megabytes"
    plan = targets.Plan("m", str(amount))
    amount.write_text("8")
    small = run(pool, targets.warm_hold, plan, cap=cap).value
    again = run(pool, targets.warm_hold, plan, cap=cap).value  # well under the mark: kept
    assert small is not None and again is not None and again["pid"] == small["pid"]
    grow = int((warm.RECYCLE_AT * cap - again["address_space_bytes"]) / 2**20) + 64
    assert grow > 0, f"the worker starts at {again['address_space_bytes']} bytes of a {cap}-byte cap"
    amount.write_text(str(grow))
    leaked = run(pool, targets.warm_hold, plan, cap=cap).value
    assert leaked is not None and leaked["pid"] == small["pid"], "the check that leaked still answered"
    assert leaked["address_space_bytes"] > warm.RECYCLE_AT * cap
    assert gone(small["pid"]), "then the worker was recycled"
    fresh = run(pool, targets.warm_answer, plan, cap=cap).value
    assert fresh is not None and fresh["pid"] != small["pid"]
    assert fresh["address_space_bytes"] < warm.RECYCLE_AT * cap


@pytest.mark.process
def test_a_changed_plan_or_cap_starts_a_new_worker(pool: warm.WarmPool) -> None:
    first = run(pool, targets.warm_answer, targets.Plan("m", 1)).value
    changed = run(pool, targets.warm_answer, targets.Plan("m", 2)).value
    capped = run(pool, targets.warm_answer, targets.Plan("m", 2), cap=4 * GiB).value
    assert first is not None and changed is not None and capped is not None
    assert len({first["pid"], changed["pid"], capped["pid"]}) == 3
    assert gone(first["pid"]) and gone(changed["pid"])


@pytest.mark.process
def test_a_second_check_of_a_busy_model_runs_in_a_worker_of_its_own(pool: warm.WarmPool, tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    hung = threading.Thread(
        target=lambda: pool.run(
            targets.warm_hang, targets.Plan("m", str(pid_file)), timeout_s=3, memory_limit_bytes=None
        )
    )
    hung.start()
    deadline = time.monotonic() + 20
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    busy = pool.pids()["m"]
    other = run(pool, targets.warm_answer, targets.Plan("m", str(pid_file)), timeout_s=5)
    assert other.kind == "ok" and other.value is not None and other.value["pid"] != busy
    assert gone(other.value["pid"]) and pool.pids()["m"] == busy, "the one-check worker stopped, the kept one stays"
    hung.join(30)


@pytest.mark.process
def test_the_least_recently_used_worker_makes_room_beyond_the_limit() -> None:
    pool = warm.WarmPool(limit=2, evict_idle_s=0)
    try:
        pids = {name: run(pool, targets.warm_answer, targets.Plan(name)).value["pid"] for name in "abc"}  # type: ignore[index]
        assert set(pool.pids()) == {"b", "c"}
        assert gone(pids["a"])
    finally:
        pool.close(wait_s=1)


@pytest.mark.process
def test_a_full_pool_of_recently_used_workers_checks_the_next_model_in_a_worker_of_its_own() -> None:
    now = [1000.0]
    pool = warm.WarmPool(limit=2, evict_idle_s=60, clock=lambda: now[0])
    try:
        kept = {name: run(pool, targets.warm_answer, targets.Plan(name)).value["pid"] for name in "ab"}  # type: ignore[index]
        for _ in range(3):  # a cycle over three models, two workers: no start, no kill
            once = run(pool, targets.warm_answer, targets.Plan("c")).value
            assert once is not None and "c" not in pool.pids() and gone(once["pid"])
            assert {n: run(pool, targets.warm_answer, targets.Plan(n)).value["pid"] for n in "ab"} == kept  # type: ignore[index]
        now[0] += 61  # "a" and "b" idle past evict_idle_s: the least recently used makes room
        taken = run(pool, targets.warm_answer, targets.Plan("c")).value
        assert taken is not None and set(pool.pids()) == {"b", "c"} and gone(kept["a"])
    finally:
        pool.close(wait_s=1)


@pytest.mark.process
def test_retain_and_close_leave_no_worker_behind() -> None:
    pool = warm.WarmPool(limit=4)
    pids = {name: run(pool, targets.warm_answer, targets.Plan(name)).value["pid"] for name in "ab"}  # type: ignore[index]
    pool.retain(lambda name, plan: name == "a")
    assert set(pool.pids()) == {"a"} and gone(pids["b"], within_s=0.5)
    pool.close()
    assert all(not pid_alive(pid) for pid in pids.values()), "close() returns after every worker is gone"
    after = run(pool, targets.warm_answer, targets.Plan("a"), timeout_s=5).value
    assert after is not None and not pool.pids() and gone(after["pid"]), "a closed pool keeps no worker"


@pytest.mark.process
def test_ask_once_and_a_pool_of_none_check_in_a_worker_stopped_after_the_check() -> None:
    once = warm.ask_once(targets.warm_answer, targets.Plan("m", 7), timeout_s=30, memory_limit_bytes=None)
    assert once.kind == "ok" and once.value is not None and once.value["value"] == 7
    assert once.value["pgid"] == once.value["pid"] != os.getpid() and gone(once.value["pid"])
    hung = warm.ask_once(targets.warm_raise, targets.Plan("m"), timeout_s=30, memory_limit_bytes=None)
    assert hung.kind == "crash" and "child raised" in hung.detail
    pool = warm.WarmPool(limit=0)  # daemon.worker: fresh
    try:
        pids = [run(pool, targets.warm_answer, targets.Plan("m")).value["pid"] for _ in range(2)]  # type: ignore[index]
        assert pids[0] != pids[1] and not pool.pids() and all(gone(pid) for pid in pids)
    finally:
        pool.close(wait_s=1)
