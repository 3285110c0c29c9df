"""A deadline for the user's PyTorch code, which ``onnxmon reference torch`` runs in-process.

A factory, its ``make_inputs`` or the module's ``forward`` can hang (a lock, a download, an endless
loop); the command must then stop and say so rather than hang with it. ``within(seconds, spec)``
arms ``SIGALRM`` for the block and turns its expiry into a ``MonitorError`` with exit code 3 (could
not measure: nothing was stored). The signal raises a ``BaseException`` subclass so that a factory's
own ``except Exception`` cannot swallow it. Only the main thread can take signals; elsewhere (and
for ``seconds <= 0``) the block runs without a deadline.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from monitor.errors import MonitorError


class FactoryTimeout(MonitorError):
    """The factory's code did not finish within ``--timeout``; nothing was measured or stored."""

    exit_code = 3


class _Expired(BaseException):
    """Raised by the alarm inside the user's code; a BaseException so ``except Exception`` lets it pass."""


def _expire(signum: int, frame: FrameType | None) -> None:
    raise _Expired


@contextmanager
def within(seconds: float, spec: str, *, limit: float | None = None) -> Iterator[None]:
    """Run the block with a deadline of ``seconds``; ``FactoryTimeout`` naming the factory when it passes.

    ``limit`` is the whole ``--timeout`` the message states when ``seconds`` is what is left of it.
    """
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Expired:
        raise FactoryTimeout(
            f"--factory {spec!r} did not finish within {limit or seconds:g} s (--timeout); nothing was stored"
        ) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
