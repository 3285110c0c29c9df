"""The history sink's counts since start, as counters (``_total``), and their old gauge names for one release.

Four numbers only ever grow while the daemon runs: results neither the database nor the spool took,
results the database refused, spool entries set aside, results stored with text replaced. They were
exported as gauges without ``_total`` (``onnxmon_results_unspooled``, ...); the Prometheus naming
guide wants a counter named ``..._total``. Each is now a counter under a new name, and the old gauge is
served beside it for one release with ``DEPRECATED`` in its HELP (``CHANGELOG.md``). A new name never
shares its base with an old one: in OpenMetrics (``/metrics`` serves it when asked) a counter
``x_total`` is the family ``x``, which the old gauge ``x`` already is.

``SinceStart`` reads each number from its source at scrape time (``wiring.database_sink`` names the
sources); a number without a source yet is 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# (new counter name without _total, old gauge name, what it counts)
COUNTS = (
    (
        "onnxmon_results_not_stored",
        "onnxmon_results_unspooled",
        "Results since start that neither the database nor the spool took (each logged in full).",
    ),
    (
        "onnxmon_database_refused_results",
        "onnxmon_results_refused",
        "Results since start the database refused (not an outage; kept in the spool's failed/).",
    ),
    (
        "onnxmon_spool_entries_set_aside",
        "onnxmon_spool_set_aside",
        "Spool entries since start moved to failed/ instead of being written back.",
    ),
    (
        "onnxmon_stored_results_text_replaced",
        "onnxmon_results_text_replaced",
        "Results since start stored with text the database cannot hold replaced.",
    ),
)
NEW_NAMES = {old: f"{new}_total" for new, old, _ in COUNTS}
"""Each deprecated gauge's replacement, as exposed."""


class SinceStart(Collector):
    """Each count as a counter and, deprecated, as its old gauge; read from its source at every scrape."""

    def __init__(self) -> None:
        self._sources: dict[str, Callable[[], float]] = {}

    def provide(self, old_name: str, source: Callable[[], float]) -> None:
        """Where the count once exported as ``old_name`` is read from."""
        if old_name not in NEW_NAMES:
            raise KeyError(f"no count named {old_name!r}; known: {sorted(NEW_NAMES)}")
        self._sources[old_name] = source

    def value(self, old_name: str) -> float:
        source = self._sources.get(old_name)
        return float(source()) if source is not None else 0.0

    def collect(self) -> Iterable[Metric]:
        found: list[Metric] = []
        for new, old, doc in COUNTS:
            value = self.value(old)
            found.append(CounterMetricFamily(new, doc, value=value))
            found.append(
                GaugeMetricFamily(old, f"DEPRECATED, removed in the next release: use {new}_total. {doc}", value)
            )
        return found
