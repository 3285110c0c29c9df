"""The dashboard's "Failing runs by reason" panel counts runs, against a real Prometheus.

``onnxmon_run_failures_total{model, reason}`` is born with its reason's first run, at 1 (its
children are not pre-declared: 23 reasons x every model). ``increase()`` starts at a series' first
sample, so it counted 2 runs as 1.03, and a series already at 2 at its first sample (a new pod
whose first checks finished before its first scrape) as nothing (issue 40). Here a real
``prometheus`` scrapes the real registry (``install``: counters and store collector, real check
results, a real SQLite store) every second, and the panel's own expression must say 2 for 2 runs
in both cases.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import start_http_server

from monitor.sinks.prometheus import label_values
from monitor.store import Store
from tests.conftest import need_binary
from tests.serving import free_port
from tests.test_dashboard import promql_expressions
from tests.test_metrics import RealDaemon, Scenario
from tests.test_prometheus_e2e import Prometheus, wait_until

pytestmark = [pytest.mark.prometheus, pytest.mark.process, pytest.mark.server]

PANEL = "Failing runs by reason [A]"


@pytest.fixture
def served(scenario: Scenario, store: Store) -> Iterator[tuple[RealDaemon, int]]:
    daemon = RealDaemon(scenario.settings, store, startup_env=dict(scenario.passing.environment))
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=daemon.registry)
    try:
        yield daemon, port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_the_reason_panel_counts_2_for_2_runs_of_a_new_reason_and_of_a_new_target(
    served: tuple[RealDaemon, int], scenario: Scenario, tmp_path: Path
) -> None:
    daemon, port = served
    # a new target: its first two checks end before Prometheus ever scrapes it (born at 2)
    daemon.dispatch(scenario.no_baseline)
    daemon.dispatch(dataclasses.replace(scenario.no_baseline, started_at=scenario.no_baseline.started_at + 1))
    prometheus = Prometheus(need_binary("prometheus", "prometheus"), tmp_path / "prometheus", port)
    try:
        selector = 'onnxmon_run_failures_total{job="onnxmon", model="%s"}'

        def seen(model: str, count: float) -> None:
            wait_until(lambda: prometheus.value(selector % model) == count, f"{model} at {count}", prometheus.process)

        seen("fresh", 2)
        wait_until(lambda: prometheus.value('onnxmon_runs_total{model="clf"}') == 0, "clf scraped", prometheus.process)
        # a reason seen for the first time while Prometheus watches: born at 1, then 2
        daemon.dispatch(scenario.failing)
        seen("clf", 1)
        at_one = f"count_over_time({selector % 'clf'}[1m])"
        wait_until(lambda: (prometheus.value(at_one) or 0) >= 3, "three samples at 1", prometheus.process)
        later = scenario.failing.started_at + 10
        daemon.dispatch(dataclasses.replace(scenario.failing, started_at=later, finished_at=later + 1))
        seen("clf", 2)

        (panel,) = (e.expr for e in promql_expressions(substituted=True) if e.kind == "panel" and e.name == PANEL)
        counted = {(s["metric"]["model"], s["metric"]["reason"]): float(s["value"][1]) for s in prometheus.query(panel)}
        assert counted == {
            ("clf", label_values.primary_reason(scenario.failing)): 2,
            ("fresh", label_values.primary_reason(scenario.no_baseline)): 2,
        }
    finally:
        prometheus.stop()
