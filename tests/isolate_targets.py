"""Functions the isolation tests run in a child process (they must be importable by name)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def answer(value: int) -> dict[str, Any]:
    return {"value": value * 2, "pid": os.getpid(), "pgid": os.getpgid(0)}


def hang_with_a_grandchild(pid_file: str) -> dict[str, Any]:
    grandchild = subprocess.Popen(["sleep", "300"])
    Path(pid_file).write_text(str(grandchild.pid))
    time.sleep(300)
    return {}


def kill_myself() -> dict[str, Any]:
    os.kill(os.getpid(), signal.SIGKILL)
    return {}


def segfault() -> dict[str, Any]:
    import ctypes

    ctypes.string_at(0)
    return {}


def abort() -> dict[str, Any]:
    """What ONNX Runtime's C++ does when an allocation is refused and nothing catches ``std::bad_alloc``."""
    os.abort()


def raise_error() -> dict[str, Any]:
    raise RuntimeError("boom")


def allocate(megabytes: int) -> dict[str, Any]:
    blob = bytearray(megabytes * 1024 * 1024)
    return {"size": len(blob)}


def echo(value: Any) -> dict[str, Any]:
    """Return what crossed the boundary, so a test can compare it with what was sent."""
    return {"value": value, "type": type(value).__qualname__}


# --- warm workers: jobs are called as job(plan, worker=...) ----------------------------------------


@dataclass(frozen=True)
class Plan:
    """The least a warm pool needs of a plan: a name, and equality (a changed plan starts a new worker)."""

    name: str
    argument: Any = None


_held: list[bytearray] = []


def warm_answer(plan: Plan, worker: Any = None) -> dict[str, Any]:
    from monitor.daemon.warm_worker import memory

    return {"value": plan.argument, "pid": os.getpid(), "pgid": os.getpgid(0), **memory()}


def warm_hang(plan: Plan, worker: Any = None) -> dict[str, Any]:
    return hang_with_a_grandchild(plan.argument)


def warm_kill(plan: Plan, worker: Any = None) -> dict[str, Any]:
    return kill_myself()


def warm_segfault(plan: Plan, worker: Any = None) -> dict[str, Any]:
    return segfault()


def warm_raise(plan: Plan, worker: Any = None) -> dict[str, Any]:
    return raise_error()


def warm_allocate(plan: Plan, worker: Any = None) -> dict[str, Any]:
    return allocate(plan.argument)


def warm_hold(plan: Plan, worker: Any = None) -> dict[str, Any]:
    """Allocate as many MiB as the file ``plan.argument`` says and keep them: a leak that outlives the check."""
    _held.append(bytearray(int(Path(plan.argument).read_text()) * 1024 * 1024))
    return warm_answer(plan)
