"""Functions the isolation tests run in a child process (they must be importable by name)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
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


def raise_error() -> dict[str, Any]:
    raise RuntimeError("boom")


def allocate(megabytes: int) -> dict[str, Any]:
    blob = bytearray(megabytes * 1024 * 1024)
    return {"size": len(blob)}


def echo(value: Any) -> dict[str, Any]:
    """Return what crossed the boundary, so a test can compare it with what was sent."""
    return {"value": value, "type": type(value).__qualname__}
