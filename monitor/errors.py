"""The few exception types onnxmon raises for *user* mistakes.

A ``MonitorError`` is something the user can fix (bad config, missing file, wrong
argument); the CLI prints its message on one line and exits 2. Failures inside a
check are not exceptions to the caller: ``check.run`` turns them into an ``error``
verdict with a bounded reason.
"""

from __future__ import annotations


class MonitorError(Exception):
    """A problem the user can fix; the message names the file, the field and the expectation."""

    exit_code = 2


class ConfigError(MonitorError):
    """The configuration file or an environment override is invalid."""


class BenchsetError(MonitorError):
    """A benchmark set is missing, malformed, unsafe or does not match its checksums."""


class BaselineError(MonitorError):
    """A baseline is missing, malformed, or does not match its checksums."""


class ModelError(MonitorError):
    """A model file is missing or cannot be loaded, or inputs do not fit its signature."""


class BusyError(MonitorError):
    """Every check worker is taken (``daemon.workers``); the request may be retried shortly.

    Not the user's mistake, and nothing was measured: exit code 3 on the command line, HTTP 429
    with ``Retry-After`` from the API.
    """

    exit_code = 3


class EndpointError(MonitorError):
    """A served model could not be measured: unreachable, too slow, an error status, an answer that lies
    about its tensors. ``code`` is the run's reason code (``endpoint_*``); nothing was measured: exit 3."""

    exit_code = 3

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
