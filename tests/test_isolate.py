"""A check runs in a child process that can hang, crash or leak without touching the daemon."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from monitor.daemon import isolate
from tests import isolate_targets as targets

pytestmark = pytest.mark.process


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); look at its state
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_a_child_returns_its_value_from_its_own_process_group() -> None:
    outcome = isolate.run(targets.answer, 21, timeout_s=30)
    assert outcome.kind == "ok"
    assert outcome.value is not None and outcome.value["value"] == 42
    assert outcome.value["pid"] != os.getpid()
    assert outcome.value["pgid"] == outcome.value["pid"], "the child leads its own process group"


def test_a_hung_child_is_killed_with_its_whole_process_group_at_the_timeout(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    began = time.monotonic()
    outcome = isolate.run(targets.hang_with_a_grandchild, str(pid_file), timeout_s=2)
    assert outcome.kind == "timeout"
    assert "timeout" in outcome.detail
    assert time.monotonic() - began < 15
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while pid_alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(grandchild), "the grandchild died with the group"


def test_a_child_killed_by_sigkill_is_a_crash_naming_the_signal() -> None:
    outcome = isolate.run(targets.kill_myself, timeout_s=30)
    assert outcome.kind == "crash"
    assert "SIGKILL" in outcome.detail


def test_a_segfaulting_child_is_a_crash_naming_the_signal() -> None:
    outcome = isolate.run(targets.segfault, timeout_s=30)
    assert outcome.kind == "crash"
    assert "SIGSEGV" in outcome.detail


def test_an_exception_in_the_child_is_a_crash_with_its_message() -> None:
    outcome = isolate.run(targets.raise_error, timeout_s=30)
    assert outcome.kind == "crash"
    assert "RuntimeError: boom" in outcome.detail


def test_a_memory_limit_turns_a_leak_into_a_clean_crash() -> None:
    outcome = isolate.run(targets.allocate, 4096, timeout_s=30, memory_limit_bytes=2048 * 1024 * 1024)
    assert outcome.kind == "crash"
    assert "MemoryError" in outcome.detail
    fine = isolate.run(targets.allocate, 16, timeout_s=30, memory_limit_bytes=2048 * 1024 * 1024)
    assert fine.kind == "ok"
