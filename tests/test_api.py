"""The HTTP API through FastAPI's TestClient over a real daemon handle (real store, checks, baselines)."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from monitor.api.app import create_app
from monitor.config.settings import Settings
from monitor.results import AppliedTolerance, CheckResult, OutputMetrics, OutputStats, Verdict
from monitor.store import RunRecord, Store
from tests.test_metrics import RealDaemon, Scenario

TOKEN = "s3cret-token-value-9f2c"


def with_api(settings: Settings, **api: object) -> Settings:
    return settings.model_copy(update={"api": settings.api.model_copy(update=api)})


@pytest.fixture
def daemon(scenario: Scenario, store: Store) -> RealDaemon:
    handle = RealDaemon(with_api(scenario.settings, token=TOKEN), store, startup_env=dict(scenario.passing.environment))
    handle.dispatch(scenario.passing)
    handle.dispatch(scenario.failing)
    handle.dispatch(scenario.no_baseline)
    return handle


@pytest.fixture
def client(daemon: RealDaemon) -> TestClient:
    return TestClient(create_app(daemon), raise_server_exceptions=False)


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- health and metrics ------------------------------------------------------------------------------


def test_metrics_are_served_in_the_prometheus_text_format(client: TestClient) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'onnxmon_runs_total{model="clf"} 2.0' in response.text
    openmetrics = client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    assert openmetrics.text.endswith("# EOF\n")


def test_health_is_always_ok_and_readiness_needs_everything(client: TestClient, daemon: RealDaemon) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200
    daemon.scheduler_running = False
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["failed"] == ["scheduler_running"]


def test_readiness_is_503_when_the_store_is_unreachable(scenario: Scenario, tmp_path: Path) -> None:
    broken = RealDaemon(scenario.settings, Store(f"sqlite:///{tmp_path / 'no-such-dir' / 'h.db'}"))
    client = TestClient(create_app(broken), raise_server_exceptions=False)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "ready": False,
        "checks": {"config_loaded": True, "store_reachable": False, "scheduler_running": True},
        "failed": ["store_reachable"],
        "info": {},
        "reasons": {},
    }
    models = client.get("/api/v1/models")
    assert models.status_code == 503
    assert models.json() == {"detail": "the history store is unreachable; retry later"}
    assert client.get("/metrics").status_code == 200, "a scrape never fails for the store"


# --- reads ---------------------------------------------------------------------------------------------


def test_models_list_the_config_with_last_verdict_and_active_baseline(client: TestClient, scenario: Scenario) -> None:
    models = {m["name"]: m for m in client.get("/api/v1/models").json()}
    assert list(models) == ["clf", "fresh"]
    assert models["clf"]["last_verdict"] == "fail"
    assert models["clf"]["active_baseline_id"] == scenario.baseline_id
    assert models["fresh"]["last_verdict"] == "error" and models["fresh"]["active_baseline_id"] is None


def test_runs_of_a_model_newest_first_with_limit_and_filters(client: TestClient) -> None:
    runs = client.get("/api/v1/models/clf/runs").json()
    assert [r["verdict"] for r in runs] == ["fail", "pass"]
    assert len(client.get("/api/v1/models/clf/runs", params={"limit": 1}).json()) == 1
    assert client.get("/api/v1/models/clf/runs", params={"since": "2999-01-01T00:00:00"}).json() == []
    assert client.get("/api/v1/models/clf/runs", params={"node": "elsewhere"}).json() == []


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/api/v1/models/nope/runs", 404),
        ("/api/v1/models/nope/baselines", 404),
        ("/api/v1/runs/999999", 404),
        ("/api/v1/environments/abcdef12", 404),
        ("/api/v1/environments/diff?a=abcdef12&b=abcdef13", 404),
        ("/api/v1/models/clf/runs?limit=0", 422),
        ("/api/v1/models/clf/runs?limit=abc", 422),
        ("/api/v1/models/clf/runs?since=yesterday", 422),
        ("/api/v1/runs/not-a-number", 422),
        ("/api/v1/runs/%C2%A01", 422),  # a non-breaking space before 1: pydantic's lax int took it as run 1
        ("/api/v1/runs/1_0", 422),
        ("/api/v1/incidents/%201", 422),
        ("/api/v1/runs/99999999999999999999999", 422),
        ("/api/v1/environments/xyz", 422),
        ("/api/v1/events?limit=100000", 422),
        ("/api/v1/models/..%2Fetc/runs", 404),
    ],
)
def test_unknown_things_are_404_and_bad_parameters_422(client: TestClient, path: str, status: int) -> None:
    response = client.get(path)
    assert response.status_code == status, response.text
    assert "Traceback" not in response.text
    if status == 404:
        assert response.json()["detail"]


def test_run_detail_has_outputs_reasons_attribution_and_the_env_diff(client: TestClient, scenario: Scenario) -> None:
    failing_id = client.get("/api/v1/models/clf/runs").json()[0]["id"]
    run = client.get(f"/api/v1/runs/{failing_id}").json()
    assert run["verdict"] == "fail" and run["attribution"] == "model_changed"
    assert {r["code"] for r in run["reasons"]} == {"model_changed"}
    outputs = {o["name"]: o for o in run["outputs"]}
    assert outputs["logits"]["verdict"] == "fail" and outputs["logits"]["metrics"]["max_abs_error"] > 0
    assert outputs["logits"]["error_ratio"] > 1 and outputs["prob"]["error_ratio"] > 1, "exact ratios"
    assert outputs["logits"]["tolerance"]["atol"] == 1e-4
    diff = run["env_diff"]
    assert diff["a"] == scenario.passing.environment["fingerprint"] == diff["b"]
    assert diff["summary"] == "no environment change" and diff["note"] is None
    assert all(not c["stable"] for c in diff["changes"]), "same process: only volatile fields moved"


def test_non_finite_metrics_are_encoded_as_strings(client: TestClient, daemon: RealDaemon) -> None:
    metrics = OutputMetrics(element_count=4, max_abs_error=math.inf, snr_db=-math.inf, cosine_similarity=math.nan)
    tolerance = AppliedTolerance(atol=1e-5, rtol=1e-4)
    output = OutputStats("prob", Verdict.FAIL, metrics, tolerance, dtype="float32", shape=(1, 4))
    now = time.time() + 60  # the newest run
    daemon.dispatch(CheckResult("clf", Verdict.FAIL, now, now + 1, outputs=(output,), timings={"x": math.inf}))
    run_id = client.get("/api/v1/models/clf/runs", params={"limit": 1}).json()[0]["id"]
    response = client.get(f"/api/v1/runs/{run_id}")
    assert response.status_code == 200
    prob = response.json()["outputs"][0]
    assert (prob["metrics"]["max_abs_error"], prob["metrics"]["snr_db"]) == ("Infinity", "-Infinity")
    assert prob["metrics"]["cosine_similarity"] == "NaN"
    assert response.json()["timings"] == {"x": "Infinity"}
    json.loads(response.text, parse_constant=_no_bare_tokens)  # strict JSON: the strings, never bare tokens


def _no_bare_tokens(token: str) -> Any:
    raise AssertionError(f"bare {token} token in the response")


def test_baselines_of_a_model_say_which_is_active(client: TestClient, scenario: Scenario) -> None:
    (baseline,) = client.get("/api/v1/models/clf/baselines").json()
    assert baseline["baseline_id"] == scenario.baseline_id and baseline["active"] is True
    assert baseline["outputs"] == ["logits", "prob"] and baseline["source"] == "captured"
    assert client.get("/api/v1/models/fresh/baselines").json() == []


def test_environments_by_fingerprint_prefix_and_their_diff(client: TestClient, scenario: Scenario) -> None:
    fingerprint = scenario.passing.environment["fingerprint"]
    full = client.get(f"/api/v1/environments/{fingerprint}").json()
    assert full["fingerprint"] == fingerprint and "fields" in full["snapshot"]
    assert client.get(f"/api/v1/environments/{fingerprint[:8]}").json()["fingerprint"] == fingerprint
    diff = client.get("/api/v1/environments/diff", params={"a": scenario.baseline_id, "b": fingerprint[:10]}).json()
    assert (diff["a"], diff["b"]) == (fingerprint, fingerprint)
    assert diff["summary"] == "no environment change"


def test_events_filter_by_model_and_limit(client: TestClient) -> None:
    events = client.get("/api/v1/events", params={"model": "clf"}).json()
    assert [e["kind"] for e in events] == ["verdict_changed", "model_changed"]  # the cause sorts before its effect
    assert events[0]["new"] == "fail"
    assert len(client.get("/api/v1/events", params={"limit": 1}).json()) == 1
    assert client.get("/api/v1/events", params={"model": "nobody"}).json() == []


def test_the_openapi_document_describes_every_endpoint(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert {
        "/metrics",
        "/healthz",
        "/readyz",
        "/api/v1/models",
        "/api/v1/models/{name}/runs",
        "/api/v1/runs/{run_id}",
        "/api/v1/models/{name}/baselines",
        "/api/v1/environments/{fingerprint}",
        "/api/v1/environments/diff",
        "/api/v1/events",
        "/api/v1/models/{name}/check",
        "/api/v1/baselines/{baseline_id}/promote",
        "/-/reload",
    } <= set(paths)


# --- mutating calls and the token ----------------------------------------------------------------------

MUTATIONS = [
    ("/api/v1/models/fresh/check", {}),
    ("/api/v1/baselines/{baseline}/promote", {"by": "tester"}),
    ("/-/reload", {}),
]


@pytest.mark.parametrize(("path", "params"), MUTATIONS)
def test_mutating_calls_are_disabled_without_a_configured_token(
    scenario: Scenario, store: Store, path: str, params: dict[str, str]
) -> None:
    client = TestClient(create_app(RealDaemon(scenario.settings, store)))
    response = client.post(path.format(baseline=scenario.baseline_id), params=params, headers=bearer())
    assert response.status_code == 403
    assert "api.token" in response.json()["detail"]


@pytest.mark.parametrize(("path", "params"), MUTATIONS)
@pytest.mark.parametrize("headers", [{}, bearer("wrong"), {"Authorization": f"Basic {TOKEN}"}, bearer(TOKEN + "x")])
def test_a_missing_or_wrong_token_is_refused(
    client: TestClient, scenario: Scenario, path: str, params: dict[str, str], headers: dict[str, str]
) -> None:
    response = client.post(path.format(baseline=scenario.baseline_id), params=params, headers=headers)
    assert response.status_code in (401, 403)
    assert response.status_code == 401 or not headers.get("Authorization", "").startswith("Bearer")


def test_the_right_token_runs_a_check_promotes_and_reloads(
    client: TestClient, daemon: RealDaemon, scenario: Scenario, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        check = client.post("/api/v1/models/fresh/check", headers=bearer())
        promote = client.post(f"/api/v1/baselines/{scenario.baseline_id}/promote", headers=bearer())
        unknown = client.post("/api/v1/models/nope/check", headers=bearer())
        missing = client.post("/api/v1/baselines/nope-1/promote", headers=bearer())
        reload = client.post("/-/reload", headers=bearer())  # the file has no token: last mutating call
        scrape = client.get("/metrics").text
    assert check.status_code == 200 and check.json()["verdict"] == "error"
    assert check.json()["result"]["reasons"][0]["code"] == "no_baseline"
    assert promote.status_code == 200 and promote.json() == {
        "baseline_id": scenario.baseline_id,
        "model": "clf",
        "promoted_by": "api",
    }
    assert reload.status_code == 200 and reload.json()["reloaded"] is True
    assert unknown.status_code == 404 and missing.status_code == 404
    assert 'onnxmon_runs_total{model="fresh"} 2.0' in scrape
    everything = [r.text for r in (check, promote, reload, unknown, missing)] + [scrape, caplog.text]
    assert not any(TOKEN in text for text in everything), "the token never leaves the process"


def test_a_rotated_token_file_works_without_a_restart(scenario: Scenario, store: Store, tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("first-token\n")
    client = TestClient(create_app(RealDaemon(with_api(scenario.settings, token_file=secret), store)))
    promote = "/api/v1/baselines/nope-1/promote"  # 404 once past the token check, and changes nothing
    assert client.post(promote, headers=bearer("first-token")).status_code == 404
    secret.write_text("second-token\n")
    assert client.post(promote, headers=bearer("first-token")).status_code == 401
    assert client.post(promote, headers=bearer("second-token")).status_code == 404
    secret.unlink()
    assert client.post(promote, headers=bearer("second-token")).status_code == 403


def test_a_failed_reload_keeps_the_old_config_and_says_so(client: TestClient, daemon: RealDaemon) -> None:
    source = daemon.settings.source
    assert source is not None
    good = source.read_text()
    source.write_text("models: [ {name: broken} ]\n")
    try:
        response = client.post("/-/reload", headers=bearer())
    finally:
        source.write_text(good)
    assert response.status_code == 409 and response.json()["reloaded"] is False
    assert [m.name for m in daemon.settings.models] == ["clf", "fresh"]
    assert "onnxmon_config_last_reload_successful 0.0" in client.get("/metrics").text


def test_an_unexpected_error_is_a_bare_500_with_the_traceback_only_in_the_log(
    daemon: RealDaemon, caplog: pytest.LogCaptureFixture
) -> None:
    def explode() -> list[RunRecord]:
        raise RuntimeError("secret internals /etc/onnxmon")

    daemon.store.latest_per_model = explode  # type: ignore[method-assign]
    client = TestClient(create_app(daemon), raise_server_exceptions=False)
    with caplog.at_level(logging.ERROR, logger="monitor.api.app"):
        response = client.get("/api/v1/models")
    assert response.status_code == 500
    assert response.json() == {"detail": "internal error; the daemon log has the details"}
    assert "secret internals" in caplog.text


@pytest.mark.parametrize("since", ["0.0", "-18439448"])
def test_since_takes_iso_8601_only_with_a_validation_error_otherwise(client: TestClient, since: str) -> None:
    """Found by the fuzz profile: a unix time was accepted as ``since``."""
    answer = client.get("/api/v1/events", params={"since": since})
    assert answer.status_code == 422
    assert isinstance(answer.json()["detail"], list)


def test_a_since_before_utc_can_hold_means_from_the_beginning(client: TestClient) -> None:
    """Found by the fuzz profile: 0001-01-01T00:00:01+01:00 is valid ISO 8601 but outside UTC's range (was a 422)."""
    everything = client.get("/api/v1/events").json()
    answer = client.get("/api/v1/events", params={"since": "0001-01-01T00:00:01+01:00"})
    assert answer.status_code == 200
    assert answer.json() == everything


@pytest.mark.parametrize("path", ["/api/v1/events", "/api/v1/models/clf/runs"])
def test_a_since_after_utc_can_hold_finds_nothing_not_everything(client: TestClient, path: str) -> None:
    """Issue 42 (low): 9999-12-31T23:59:59-14:00 is 10000-01-01 UTC; clamped to year 1, it returned every run."""
    assert client.get(path).json() != []
    for since in ("9999-12-31T23:59:59-14:00", "9999-12-31T10:00:00-14:00", "9999-12-31T23:59:59.999999-00:01"):
        answer = client.get(path, params={"since": since})
        assert answer.status_code == 200, answer.text
        assert answer.json() == [], since
    assert client.get(path, params={"since": "9999-12-31T23:59:59+14:00"}).json() == []  # in range: still nothing


# --- the index ---------------------------------------------------------------------------------------


def test_the_api_root_is_an_index_of_its_routes_and_the_openapi_document(client: TestClient) -> None:
    answer = client.get("/api/v1/")
    assert answer.status_code == 200
    index = answer.json()
    assert index["openapi"] == "/openapi.json" and client.get(index["openapi"]).status_code == 200
    listed = {route["path"]: route for route in index["routes"]}
    documented = {
        p for p in client.get("/openapi.json").json()["paths"] if p.startswith("/api/v1/") and p != "/api/v1/"
    }
    assert set(listed) == documented, "every route of the API under /api/v1, no more"
    assert listed["/api/v1/models"]["methods"] == ["GET"] and listed["/api/v1/models"]["summary"]
    assert "POST" in listed["/api/v1/models/{name}/check"]["methods"]
    for bare in ("/api", "/api/v1"):
        moved = client.get(bare, follow_redirects=False)
        assert (moved.status_code, moved.headers["location"]) == (308, "/api/v1/")
        assert client.get(bare).json() == index
