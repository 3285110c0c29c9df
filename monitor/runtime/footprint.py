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
    the check's watchdog thread was the first thing to need memory), an mmap of a file is ``ENOMEM``,
    and ONNX Runtime building a session raises its own exception saying ``std::bad_alloc`` or that
    ``pthread_create failed`` with ``Cannot allocate memory`` (its thread pool's stacks).
    """
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
        return True
    text = str(exc)  # ONNX Runtime's C++ refused an allocation or a thread: its own exception types say so
    if "std::bad_alloc" in text or ("pthread_create failed" in text and "Cannot allocate memory" in text):
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


# How a process ends when native code (ONNX Runtime's C++, a BLAS) meets a refused allocation:
# ``std::bad_alloc`` or a failed thread start escaping C++ is ``std::terminate`` (SIGABRT); an
# unchecked null is SIGSEGV/SIGBUS.
NATIVE_OUT_OF_MEMORY = frozenset({"SIGABRT", "SIGSEGV", "SIGBUS"})


def signal_note(signal_name: str, cap_bytes: int | None) -> str:
    """For a child killed by ``signal_name`` under an address-space cap: what the cap has to do with it.

    A warm worker that meets a cap below its own footprint dies in native code (SIGABRT) before it
    can raise anything, so the parent says it: the child's footprint is about this process's own
    (both are Python, numpy and ONNX Runtime forked from the same server), measured here.
    """
    if not cap_bytes or signal_name not in NATIVE_OUT_OF_MEMORY:
        return ""
    here = address_space()
    if here is not None and here >= 0.8 * cap_bytes:
        return (
            f"; daemon.memory_limit_mb ({cap_bytes // _MB} MB) is likely below the check process's own footprint"
            f" (this process holds {here // _MB} MB of address space; native code aborts when an allocation is"
            f" refused): raise it well above {here // _MB} MB"
        )
    return (
        f"; under daemon.memory_limit_mb ({cap_bytes // _MB} MB): a refused allocation in native code ends a process so"
    )
