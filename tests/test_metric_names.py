"""Metric names per the Prometheus naming guide: a count since start is a counter named ``_total``, a
``_ratio`` is between 0 and 1, and each renamed series keeps its old name for one release, marked
deprecated in its HELP (``CHANGELOG.md``).
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from monitor.sinks.prometheus import since_start
from monitor.store import Store
from tests.chart import helm_binary, render
from tests.conftest import need_binary
from tests.test_metrics import RealDaemon, Scenario

RENAMED = {**since_start.NEW_NAMES, "onnxmon_output_error_ratio": "onnxmon_output_error_over_tolerance"}


@pytest.fixture
def daemon(scenario: Scenario, store: Store) -> RealDaemon:
    return RealDaemon(scenario.settings, store, startup_env=dict(scenario.passing.environment))


def families(text: str) -> dict[str, tuple[str, str, list[float]]]:
    """``sample name -> (family type, family HELP, values)`` of one scrape."""
    found: dict[str, tuple[str, str, list[float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, (family.type, family.documentation, []))[2].append(sample.value)
    return found


def test_counts_since_start_are_counters_and_their_old_gauges_say_deprecated() -> None:
    registry = CollectorRegistry()
    counts = since_start.SinceStart()
    registry.register(counts)
    counts.provide("onnxmon_results_unspooled", lambda: 3)
    counts.provide("onnxmon_spool_set_aside", lambda: 1)
    found = families(generate_latest(registry).decode())
    assert found["onnxmon_results_not_stored_total"][0] == "counter"
    assert found["onnxmon_results_not_stored_total"][2] == found["onnxmon_results_unspooled"][2] == [3.0]
    assert found["onnxmon_spool_entries_set_aside_total"][2] == [1.0]
    assert found["onnxmon_database_refused_results_total"][2] == [0.0], "no source yet: 0"
    for old, new in since_start.NEW_NAMES.items():
        kind, help_text, _ = found[old]
        assert kind == "gauge" and help_text.startswith("DEPRECATED") and new in help_text, (old, help_text)
    # OpenMetrics (served when the scraper asks): a counter x_total is the family x, so no old name may be x
    families_seen = [f.name for f in parse_openmetrics(generate_openmetrics(registry).decode())]
    assert len(families_seen) == len(set(families_seen)) == 2 * len(since_start.COUNTS)


def test_every_ratio_is_between_0_and_1_and_every_counter_ends_in_total(daemon: RealDaemon, scenario: Scenario) -> None:
    daemon.dispatch(scenario.passing)
    daemon.dispatch(scenario.failing)  # its logits are far over tolerance: error ÷ tolerance above 1
    found = families(generate_latest(daemon.registry).decode())
    assert max(found["onnxmon_output_error_over_tolerance"][2]) > 1
    same = zip(found["onnxmon_output_error_ratio"][2], found["onnxmon_output_error_over_tolerance"][2], strict=True)
    assert all(a == b or (math.isnan(a) and math.isnan(b)) for a, b in same)
    for name, (kind, help_text, values) in found.items():
        if name.endswith("_ratio") and not help_text.startswith("DEPRECATED"):
            assert all(math.isnan(v) or 0 <= v <= 1 for v in values), (name, values)
        if kind == "counter":
            assert name.endswith("_total"), name
    for old, new in RENAMED.items():
        assert new in found and found[old][1].startswith("DEPRECATED"), old


@pytest.mark.process
def test_promtool_check_metrics_is_clean_on_the_new_names(daemon: RealDaemon, scenario: Scenario) -> None:
    promtool = need_binary("prometheus", "promtool")
    daemon.dispatch(scenario.failing)
    lines = generate_latest(daemon.registry).decode().splitlines(keepends=True)
    deprecated = set(RENAMED)
    kept = "".join(line for line in lines if not any(f" {old} " in line or line.startswith(old) for old in deprecated))
    assert not any(old in kept.replace(RENAMED[old], "") for old in deprecated if old != "onnxmon_output_error_ratio")
    done = subprocess.run([promtool, "check", "metrics"], input=kept.encode(), capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout + done.stderr == b"", (done.stdout + done.stderr).decode()


@pytest.mark.process
@pytest.mark.parametrize("kind", ["serviceMonitor", "podMonitor"])
def test_the_charts_scrape_drops_the_exported_node_the_node_label_collision_left(kind: str, tmp_path: Path) -> None:
    helm = helm_binary()
    values = {"monitoring": {"capabilityCheck": False, kind: {"enabled": True}}}
    (monitor,) = [o for o in render(helm, values, tmp_path) if o["kind"] == kind[0].upper() + kind[1:]]
    (endpoint,) = monitor["spec"]["endpoints" if kind == "serviceMonitor" else "podMetricsEndpoints"]
    assert {"action": "labeldrop", "regex": "exported_node"} in endpoint["metricRelabelings"]
    assert any(r.get("targetLabel") == "node" for r in endpoint["relabelings"]), "the target's node stays"
    honoring = {"monitoring": {"capabilityCheck": False, kind: {"enabled": True, "honorLabels": True}}}
    (monitor,) = [o for o in render(helm, honoring, tmp_path) if o["kind"] == kind[0].upper() + kind[1:]]
    (endpoint,) = monitor["spec"]["endpoints" if kind == "serviceMonitor" else "podMetricsEndpoints"]
    assert "metricRelabelings" not in endpoint, "with honorLabels the exposed node is kept as node: nothing to drop"
