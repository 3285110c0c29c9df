"""Sinks: where check results go (database, Prometheus, log). Each is one small class with ``write``.

A sink knows nothing of ONNX Runtime and a check knows nothing of sinks; the daemon dispatches
every result to every sink, and a failing sink never stops the others.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from monitor.results import CheckResult


@runtime_checkable
class Sink(Protocol):
    """Anything that consumes check results."""

    def write(self, result: CheckResult) -> None:
        """Consume one result; may raise, the dispatcher logs and carries on."""
