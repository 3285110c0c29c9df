"""``/api/v1/environments/diff`` with ``current``: the daemon's stack now, against a recorded one.

A real check's environment is recorded in a real SQLite store; ``current`` is captured by the API
process itself, so the ground truth is ``envsnap.capture()`` in this test process (the same
machine and interpreter).
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from monitor.api.app import create_app
from monitor.runtime import envsnap
from monitor.store import Store
from tests.test_metrics import RealDaemon, Scenario


@pytest.fixture
def client(scenario: Scenario, store: Store) -> TestClient:
    daemon = RealDaemon(scenario.settings, store, startup_env=dict(scenario.passing.environment))
    daemon.dispatch(scenario.passing)
    return TestClient(create_app(daemon), raise_server_exceptions=False)


def test_a_recorded_fingerprint_against_current(client: TestClient, scenario: Scenario) -> None:
    recorded = scenario.passing.environment["fingerprint"]
    now = envsnap.capture().fingerprint
    for query in (f"a={recorded[:12]}&b=current", f"a={recorded[:16]}", f"a=current&b={recorded}"):
        response = client.get(f"/api/v1/environments/diff?{query}")
        assert response.status_code == 200, (query, response.text)
        body = response.json()
        assert {body["a"], body["b"]} == {recorded, now}, query
        assert body["note"] is None


def test_current_against_current_is_no_change_and_an_unknown_ref_is_404(client: TestClient) -> None:
    same = client.get("/api/v1/environments/diff?a=current").json()
    assert (same["a"] == same["b"] and same["summary"] == "no changes") or same["changes"] == []
    assert client.get("/api/v1/environments/diff?a=deadbeef0000").status_code == 404
