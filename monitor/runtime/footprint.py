"""A check process's own address space, and what a ``MemoryError`` under ``daemon.memory_limit_mb`` means.

A check child starts at 385 to 520 MB of address space (Python, numpy, ONNX Runtime, the forkserver's
preloads) before it reads anything. A cap at or below that (``memory_limit_mb: 300`` validates) makes
the first allocation of every check fail: ``MemoryError`` with an empty message. ``note`` records the
footprint just before the cap is applied (``daemon.isolate.prepare_child``), and ``cap_note`` turns a
``MemoryError`` into the reason an operator can act on (issue 30, partial).
"""

from __future__ import annotations

import contextlib
import resource
from pathlib import Path

_MB = 1024 * 1024
_noted: int | None = None  # this process's address space when its cap was set


def address_space(status: Path = Path("/proc/self/status")) -> int | None:
    """This process's address space in bytes (``VmSize``, what RLIMIT_AS caps); None where /proc lacks it."""
    with contextlib.suppress(OSError, ValueError):
        for line in status.read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return None


def note() -> None:
    """Remember the footprint now, before a cap is applied."""
    global _noted
    _noted = address_space()


def cap_note(exc: BaseException) -> str:
    """For a ``MemoryError`` under an address-space cap: whether the cap is below the process's own footprint."""
    if not isinstance(exc, MemoryError):
        return ""
    cap = resource.getrlimit(resource.RLIMIT_AS)[0]
    if cap == resource.RLIM_INFINITY or cap <= 0:
        return ""
    footprint = _noted if _noted is not None else address_space()
    if footprint is not None and footprint >= 0.8 * cap:
        return (
            f"; daemon.memory_limit_mb ({cap // _MB} MB) is below the check process's own footprint"
            f" ({footprint // _MB} MB of address space before the check: Python, numpy, ONNX Runtime):"
            f" raise it well above {footprint // _MB} MB"
        )
    return f"; the check needed more than daemon.memory_limit_mb ({cap // _MB} MB)"
