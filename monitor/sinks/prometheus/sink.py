"""The Prometheus sink: every check result moves the counters of ``monitor.sinks.prometheus.counters.Metrics``.

The last-run gauges need no sink: ``StoreCollector`` reads them from the store at scrape time.
"""

from __future__ import annotations

from monitor.results import CheckResult
from monitor.sinks.prometheus.counters import Metrics


class PrometheusSink:
    """Feeds results to the process's ``Metrics`` (runs, failures by reason, durations, output checks)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def write(self, result: CheckResult) -> None:
        """Count ``result``; a model that left the config is ignored (labels stay bounded)."""
        self.metrics.observe(result)
