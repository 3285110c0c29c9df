"""``/metrics`` is prometheus_client's own rendering of the registry, and says what happened since the last scrape.

The body is, to the byte, what the client's ``generate_latest`` (text) or OpenMetrics encoder
writes over the daemon's registry, in the format the scraper's ``Accept`` asks for (``render.py``
writes it). Every step below changes something a scrape must show at once: runs landing (through
this process, and written by another store client as another node would), a promotion rewriting
``ACTIVE``, a reload that drops a model, the store failing. Each scrape is taken twice in each
format, and both must be the client's.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from monitor import capture
from monitor.api.app import create_app
from monitor.config.plan import plan_for
from monitor.config.settings import ModelConfig
from monitor.sinks.database import DatabaseSink
from monitor.store import Store
from tests.test_metrics import RealDaemon, Scenario

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
# prometheus_client's process_* of this very process: CPU time, memory and descriptors move between
# two renderings, so their values are compared as present, not as equal.
_MOVING = re.compile(
    rb"^(process_(?:cpu_seconds_total|resident_memory_bytes|virtual_memory_bytes|open_fds)) \S+$", re.M
)


def steady(body: bytes) -> bytes:
    """``body`` with the values of this process's moving ``process_*`` samples replaced by ``X``."""
    return _MOVING.sub(rb"\1 X", body)


def assert_served_by_the_client(daemon: RealDaemon) -> str:
    """Both formats, twice each, over the daemon's app: the client's rendering of the registry."""
    client = TestClient(create_app(daemon))
    for accept, fresh in (("", generate_latest), (OPENMETRICS, generate_openmetrics)):
        for attempt in ("first", "second"):
            body = client.get("/metrics", headers={"accept": accept} if accept else {}).content
            expected = fresh(daemon.registry)
            assert steady(body) == steady(expected), (
                f"{attempt} {accept or 'text'} scrape differs from the client's rendering"
            )
            assert len(_MOVING.findall(body)) == 4, "the moving process_* samples are served"
    return generate_latest(daemon.registry).decode()


def _value(text: str, name: str, model: str) -> float:
    return next(
        sample.value
        for parsed in text_string_to_metric_families(text)
        for sample in parsed.samples
        if sample.name == name and sample.labels.get("model") == model
    )


def _models(text: str, family: str) -> set[str]:
    return {
        sample.labels["model"]
        for parsed in text_string_to_metric_families(text)
        for sample in parsed.samples
        if sample.name == family
    }


def test_the_scrape_follows_runs_promotions_and_reloads(scenario: Scenario, store: Store, tmp_path: Path) -> None:
    daemon = RealDaemon(scenario.settings, store, startup_env=dict(scenario.passing.environment))
    assert_served_by_the_client(daemon)  # nothing ran yet
    for result in (scenario.passing, scenario.failing, scenario.no_baseline):
        daemon.dispatch(result)
        assert_served_by_the_client(daemon)

    # a run written by another client of the same store (another node, the CLI): no observe() here
    with Store(str(store.url)) as other:
        later = dataclasses.replace(scenario.passing, started_at=scenario.passing.finished_at + 10)
        later = dataclasses.replace(later, finished_at=later.started_at + 1)
        DatabaseSink(other).write(later)
    text = assert_served_by_the_client(daemon)
    assert _value(text, "onnxmon_last_run_timestamp_seconds", "clf") == pytest.approx(later.finished_at, abs=1e-3)

    # a promotion rewrites ACTIVE (the baseline id label moves)
    fresh_baseline = capture.capture_baseline(plan_for(scenario.settings, "clf"))
    daemon.promote(fresh_baseline.id, by="test")
    text = assert_served_by_the_client(daemon)
    assert f'baseline_id="{fresh_baseline.id}"' in text

    # a reload that removes a model, then one that brings it back
    only_fresh = scenario.settings.model_copy(update={"models": [scenario.settings.model("fresh")]})
    daemon.metrics.declare(only_fresh)
    text = assert_served_by_the_client(daemon)
    assert _models(text, "onnxmon_runs_total") == {"fresh"}
    assert _models(text, "onnxmon_output_max_abs_error") == {"fresh"}
    daemon.metrics.declare(scenario.settings)
    daemon.metrics.config_reloaded(True)
    daemon.metrics.record_missed("clf")
    assert_served_by_the_client(daemon)


def test_a_failing_store_costs_the_store_gauges_not_the_scrape(
    scenario: Scenario, store: Store, tmp_path: Path
) -> None:
    broken = Store(f"sqlite:///{tmp_path / 'missing-dir' / 'history.db'}")
    daemon = RealDaemon(scenario.settings, broken)
    daemon.metrics.observe(scenario.passing)
    text = assert_served_by_the_client(daemon)
    assert "onnxmon_store_up 0.0" in text


def test_the_api_serves_the_format_the_scraper_asks_for(scenario: Scenario, store: Store) -> None:
    daemon = RealDaemon(scenario.settings, store)
    daemon.dispatch(scenario.passing)
    client = TestClient(create_app(daemon))
    for accept, fresh in (("text/plain", generate_latest), (OPENMETRICS, generate_openmetrics)):
        first, second = (client.get("/metrics", headers={"accept": accept}) for _ in range(2))
        assert steady(first.content) == steady(second.content) == steady(fresh(daemon.registry))
        assert first.headers["content-type"].startswith(accept.split(";")[0])
    plain = client.get("/metrics")  # no Accept: the Prometheus text format
    assert steady(plain.content) == steady(generate_latest(daemon.registry)) and plain.headers[
        "content-type"
    ].startswith("text/plain")


def test_a_config_declared_at_a_freed_configs_address_is_not_served_that_configs_blocks(
    scenario: Scenario, store: Store
) -> None:
    """A text scrape under config A, an OpenMetrics one under B (A freed), then C at A's address:
    the scrape shows C's tolerances (a memo keyed by ``id(settings)`` once served A's)."""
    daemon = RealDaemon(scenario.settings, store)
    daemon.dispatch(scenario.passing)

    def models_with_atol(atol: float) -> list[ModelConfig]:
        clf = scenario.settings.model("clf")
        logits = clf.tolerance.outputs["logits"].model_copy(update={"atol": atol})
        tolerance = clf.tolerance.model_copy(update={"outputs": {"logits": logits}})
        models = scenario.settings.models
        return [m.model_copy(update={"tolerance": tolerance}) if m.name == "clf" else m for m in models]

    first = scenario.settings.model_copy(update={"models": models_with_atol(0.5)})
    address = id(first)
    daemon.metrics.declare(first)
    client = TestClient(create_app(daemon))
    client.get("/metrics")  # text, under the first config
    daemon.metrics.declare(scenario.settings.model_copy(update={"models": models_with_atol(0.25)}))
    client.get("/metrics", headers={"accept": OPENMETRICS})  # the first config is now referenced only here
    update = {"models": models_with_atol(0.125)}
    del first  # freed now: the next object of its size may take its address
    candidates = []
    for _ in range(5000):  # allocate configs (keeping each) until one sits where the first one was
        candidate = scenario.settings.model_copy(update=update)
        if id(candidate) == address:
            break
        candidates.append(candidate)
    else:
        pytest.skip("no config was allocated at the freed address")
    daemon.metrics.declare(candidate)
    text = assert_served_by_the_client(daemon)
    atol = next(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "onnxmon_output_tolerance_atol" and s.labels == {"model": "clf", "output": "logits"}
    )
    assert atol == 0.125


def test_the_run_duration_histogram_has_the_buckets_docs_metrics_md_names(scenario: Scenario, store: Store) -> None:
    # each bucket is a series per model: the buckets are few on purpose, and docs/metrics.md says which
    row = next(
        line
        for line in (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text().splitlines()
        if line.startswith("| `onnxmon_run_duration_seconds` |")
    )
    documented = [float(b) for b in re.search(r"Buckets ([\d., ]+) s", row).group(1).split(", ")]  # type: ignore[union-attr]
    daemon = RealDaemon(scenario.settings, store)
    daemon.dispatch(scenario.passing)
    text = assert_served_by_the_client(daemon)
    buckets = [
        sample.labels["le"]
        for parsed in text_string_to_metric_families(text)
        for sample in parsed.samples
        if sample.name == "onnxmon_run_duration_seconds_bucket" and sample.labels["model"] == "clf"
    ]
    assert buckets == [*(str(b) for b in documented), "+Inf"]
    le = next(b for b in documented if b >= scenario.passing.duration_s)
    count = _value(text, "onnxmon_run_duration_seconds_count", "clf")
    assert count == 1 and f'onnxmon_run_duration_seconds_bucket{{le="{le}",model="clf"}} 1.0' in text
