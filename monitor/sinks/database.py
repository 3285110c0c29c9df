"""The database sink: every check result becomes a run row (plus events) in the ``Store``."""

from __future__ import annotations

from monitor.results import CheckResult
from monitor.store import Store


class DatabaseSink:
    """Writes results to the history database; ``node``/``pod`` default to the snapshot's ``k8s.*`` keys."""

    def __init__(self, store: Store, *, node: str | None = None, pod: str | None = None) -> None:
        self.store = store
        self.node = node
        self.pod = pod

    def write(self, result: CheckResult) -> None:
        """Record ``result``; the run id is not needed by the caller."""
        self.store.record_run(result, node=self.node, pod=self.pod)
