"""A check process's own address space, and what a ``MemoryError`` under ``daemon.memory_limit_mb`` means.

A check child starts at 385 to 520 MB of address space (Python, numpy, ONNX Runtime, the forkserver's
preloads) before it reads anything. A cap at or below that (``memory_limit_mb: 300`` validates) makes
the first allocation of every check fail: ``MemoryError`` with an empty message. ``note`` records the
footprint just before the cap is applied (``daemon.isolate.prepare_child``), and ``cap_note`` turns a
``MemoryError`` into the reason an operator can act on (issue 30, partial).
"""

from __future__ import annotations

import contextlib
import errno
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


def out_of_address_space(exc: BaseException) -> bool:
    """Whether ``exc`` is how an allocation refused by RLIMIT_AS shows up.

    Not only ``MemoryError``: a thread's stack is an mmap too, so under a tight cap ``Thread.start``
    raises ``RuntimeError: can't start new thread`` before any array is allocated (seen in CI, where
    the check's watchdog thread was the first thing to need memory), and an mmap of a file is ``ENOMEM``.
    """
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
        return True
    return isinstance(exc, OSError) and exc.errno == errno.ENOMEM


def cap_note(exc: BaseException) -> str:
    """For an allocation refused under an address-space cap: whether the cap is below the process's own footprint."""
    if not out_of_address_space(exc):
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
