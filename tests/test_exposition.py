"""The cached ``/metrics`` body is the uncached one, to the byte, whatever happened since the last scrape.

``monitor/sinks/prometheus/exposition.py`` keeps rendered pieces between scrapes; the ground truth
is prometheus_client's own ``generate_latest`` (text) and OpenMetrics encoder over the same
registry, rendered from scratch. Every step below changes something a cache could miss: runs
landing (through this process, and written by another store client as another node would),
a promotion rewriting ``ACTIVE``, a reload that drops a model, the store failing. Each scrape is
taken twice, so the second one is served from the pieces the first one left.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
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
from monitor.sinks.prometheus import exposition
from monitor.store import Store
from tests.test_metrics import RealDaemon, Scenario, build_scenario, migrated_store

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    return build_scenario(tmp_path_factory)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    yield from migrated_store(tmp_path)


def assert_cached_equals_uncached(daemon: RealDaemon) -> str:
    """Both formats, twice each (the second from the cache): the same bytes as a fresh rendering."""
    for accept, fresh in (("", generate_latest), (OPENMETRICS, generate_openmetrics)):
        for attempt in ("first", "cached"):
            body, _ = exposition.render(daemon.registry, accept)
            expected = fresh(daemon.registry)
            assert body == expected, f"{attempt} {accept or 'text'} scrape differs from the uncached rendering"
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


def test_the_cached_scrape_stays_the_uncached_one_through_runs_promotions_and_reloads(
    scenario: Scenario, store: Store, tmp_path: Path
) -> None:
    daemon = RealDaemon(scenario.settings, store, startup_env=dict(scenario.passing.environment))
    assert_cached_equals_uncached(daemon)  # nothing ran yet
    for result in (scenario.passing, scenario.failing, scenario.no_baseline):
        daemon.dispatch(result)
        assert_cached_equals_uncached(daemon)

    # a run written by another client of the same store (another node, the CLI): no observe() here
    with Store(str(store.url)) as other:
        later = dataclasses.replace(scenario.passing, started_at=scenario.passing.finished_at + 10)
        later = dataclasses.replace(later, finished_at=later.started_at + 1)
        DatabaseSink(other).write(later)
    text = assert_cached_equals_uncached(daemon)
    assert _value(text, "onnxmon_last_run_timestamp_seconds", "clf") == pytest.approx(later.finished_at, abs=1e-3)

    # a promotion rewrites ACTIVE (the baseline id label moves)
    fresh_baseline = capture.capture_baseline(plan_for(scenario.settings, "clf"))
    daemon.promote(fresh_baseline.id, by="test")
    text = assert_cached_equals_uncached(daemon)
    assert f'baseline_id="{fresh_baseline.id}"' in text

    # a reload that removes a model, then one that brings it back
    only_fresh = scenario.settings.model_copy(update={"models": [scenario.settings.model("fresh")]})
    daemon.metrics.declare(only_fresh)
    text = assert_cached_equals_uncached(daemon)
    assert _models(text, "onnxmon_runs_total") == {"fresh"}
    assert _models(text, "onnxmon_output_max_abs_error") == {"fresh"}
    daemon.metrics.declare(scenario.settings)
    daemon.metrics.config_reloaded(True)
    daemon.metrics.record_missed("clf")
    assert_cached_equals_uncached(daemon)


def test_a_failing_store_is_cached_apart_from_an_answering_one(
    scenario: Scenario, store: Store, tmp_path: Path
) -> None:
    broken = Store(f"sqlite:///{tmp_path / 'missing-dir' / 'history.db'}")
    daemon = RealDaemon(scenario.settings, broken)
    daemon.metrics.observe(scenario.passing)
    text = assert_cached_equals_uncached(daemon)
    assert "onnxmon_store_up 0.0" in text


def test_the_api_serves_the_cached_body(scenario: Scenario, store: Store) -> None:
    daemon = RealDaemon(scenario.settings, store)
    daemon.dispatch(scenario.passing)
    client = TestClient(create_app(daemon))
    for accept, fresh in (("text/plain", generate_latest), (OPENMETRICS, generate_openmetrics)):
        first, second = (client.get("/metrics", headers={"accept": accept}) for _ in range(2))
        assert first.content == second.content == fresh(daemon.registry)
        assert first.headers["content-type"].startswith(accept.split(";")[0])


def test_a_registry_without_the_cache_is_rendered_by_the_plain_encoder() -> None:
    from prometheus_client import CollectorRegistry, Counter

    registry = CollectorRegistry()
    Counter("onnxmon_test_plain", "A counter outside install().", registry=registry).inc()
    body, content_type = exposition.render(registry, "")
    assert body == generate_latest(registry) and content_type.startswith("text/plain")


def test_pieces_are_reused_in_each_format_and_hostile_accept_headers_keep_memory_bounded(
    scenario: Scenario, store: Store
) -> None:
    daemon = RealDaemon(scenario.settings, store)
    daemon.dispatch(scenario.passing)
    cache = exposition._installed[daemon.registry]
    for accept in ("", OPENMETRICS):
        _, content_type = exposition.render(daemon.registry, accept)
        first = dict(cache._kept[content_type])
        exposition.render(daemon.registry, "text/plain" if accept else OPENMETRICS)  # the other format between
        _, again = exposition.render(daemon.registry, accept)
        reused = [key for key, piece in cache._kept[again].items() if first.get(key) is piece]
        assert cache._kept[again].keys() == first.keys()
        assert again == content_type and len(reused) == len(first), f"{content_type}: pieces formatted again"
    for minor in range(50):
        body, _ = exposition.render(daemon.registry, f"application/openmetrics-text; version=1.{minor}.0")
        assert body == generate_openmetrics(daemon.registry)
    assert len(cache._kept) <= 4


def test_a_config_declared_at_a_freed_configs_address_is_not_served_that_configs_blocks(
    scenario: Scenario, store: Store
) -> None:
    """Blocks were keyed by ``id(settings)``: a text scrape under A, an OpenMetrics one under B (A freed),
    then C at A's address, and the text scrape served A's tolerances. Now the key is the declare count."""
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
    exposition.render(daemon.registry, "")  # text: blocks of the first config kept
    daemon.metrics.declare(scenario.settings.model_copy(update={"models": models_with_atol(0.25)}))
    exposition.render(daemon.registry, OPENMETRICS)  # the first config is now referenced only here
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
    text = assert_cached_equals_uncached(daemon)
    atol = next(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "onnxmon_output_tolerance_atol" and s.labels == {"model": "clf", "output": "logits"}
    )
    assert atol == 0.125
