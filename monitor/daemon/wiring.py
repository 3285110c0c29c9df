"""The daemon's outputs, built once from its parts: the metrics registry, the history sink, every sink.

``metrics`` installs the collector (the startup environment, the store's scrape-time reads) and the
per-worker GPU memory gauges; ``database_sink`` builds the history sink with its bounded on-disk
spool and hangs the spool's counts on their gauges; ``sinks`` lists every sink a result goes to,
the counters before the database. The composition root (``root.py``) calls them in that order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from monitor.config.settings import Settings
from monitor.runtime import envsnap
from monitor.sinks import Sink
from monitor.sinks.database import DatabaseSink

RESULTS_LOG = logging.getLogger("onnxmon.results")  # the log sink's logger: a diagnosis line joins its check's


def metrics(
    registry: Any | None,
    store: Any,
    settings: Settings,
    *,
    node: str | None,
    clock: Callable[[], float],
    worker_pids: Callable[[], dict[str, int]],
) -> Any:
    """The collector installed on ``registry`` (a fresh one when None), with the GPU memory gauges.

    ``worker_pids`` is read at each scrape: the check workers are made after the metrics.
    """
    from monitor.sinks.prometheus import collector, gpu_memory

    installed = collector.install(
        registry,
        store,
        settings,
        node=node,
        startup_environment=envsnap.capture(load_cuda_libs=False).to_dict(),
        clock=clock,
    )
    gpu_memory.install(installed.registry, worker_pids)
    return installed


def database_sink(store: Any, settings: Settings, metrics: Any, *, node: str | None, pod: str | None) -> DatabaseSink:
    """The history sink; results measured while the database is down wait in a bounded on-disk spool."""
    from monitor.sinks import spool

    fallback = spool.configured(settings.store)
    stall = 3 * settings.store.write_timeout + 10  # a write never holds the writer's turn this long
    sink = DatabaseSink(store, node=node, pod=pod, spool=fallback, stall_after_s=stall)
    metrics.spooled.set_function(lambda: float(sink.spooled))
    metrics.since_start.provide("onnxmon_results_unspooled", lambda: sink.unspooled)
    metrics.since_start.provide("onnxmon_results_refused", lambda: sink.refused)
    metrics.since_start.provide("onnxmon_spool_set_aside", lambda: fallback.set_aside)
    metrics.since_start.provide("onnxmon_results_text_replaced", lambda: getattr(store, "text_replaced", 0))
    return sink


def sinks(database: DatabaseSink, metrics: Any) -> list[Sink]:
    """Every sink a result goes to (a failing sink never stops the others).

    The counters come before the database: the alerts read failing runs from the store, so a scrape
    between the two writes must never see a stored failure its counters do not count yet.
    """
    from monitor.sinks.log import LogSink
    from monitor.sinks.prometheus.sink import PrometheusSink

    return [PrometheusSink(metrics), database, LogSink(RESULTS_LOG)]
