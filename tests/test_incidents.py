"""Incidents noted on one failure are offered on the next with the same signature: CLI, API, page.

A real workspace (the tree-ensemble thread-count drift of ``tests/diagnose_scenarios``), the real
CLI (``monitor.cli.main``, checks in isolated children), a real SQLite history file, the real API
app over a real daemon handle. Plus the store side on SQLite and PostgreSQL: diagnoses and
incidents round-trip, and pruning a run keeps its incidents.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from monitor import jsonsafe
from monitor.api.app import create_app
from monitor.cli import main
from monitor.results import Verdict
from monitor.store import Store, incidents
from tests.databases import BACKENDS, database_url
from tests.diagnose_scenarios import SCENARIOS
from tests.test_metrics import RealDaemon
from tests.test_store import T0, result
from tests.workspace import Workspace

pytestmark = pytest.mark.slow
TOKEN = "incident-token-7f3a"


@dataclass
class Drift:
    workspace: Workspace
    config: str
    url: str


@pytest.fixture
def drift(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Drift:
    monkeypatch.chdir(tmp_path)
    workspace = Workspace(tmp_path)
    SCENARIOS[0].build(workspace)  # forest: baseline with 1 thread, config now says 2
    workspace.extra["api"] = {"token": TOKEN}
    config = str(workspace.write())
    return Drift(workspace, config, f"sqlite:///{tmp_path / 'onnxmon.db'}")


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def latest_run(url: str, model: str = "forest") -> int:
    with Store(url) as store:
        return store.runs(model, limit=1)[0].id


def test_an_incident_noted_through_the_cli_is_offered_on_the_next_failure(
    drift: Drift, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = cli(capsys, "check", "forest", "-c", drift.config)
    assert code == 1 and "forest: likely cause: thread_count" in out
    assert "similar to incident" not in out
    first = latest_run(drift.url)

    text = "pod moved to a 2-core node; sums reduce per thread"
    note = [
        "incident",
        "note",
        str(first),
        "--cause",
        "thread_count",
        "--text",
        text,
        "--fix",
        "intra_op_num_threads=1",
    ]
    code, out = cli(capsys, *note, "-c", drift.config)
    assert code == 0, out
    assert "incident 1 noted on run" in out

    code, out = cli(capsys, "check", "forest", "-c", drift.config)
    today = dt.datetime.now(dt.UTC).date().isoformat()
    assert code == 1
    assert f"similar to incident 1 on {today}: thread_count, fixed by intra_op_num_threads=1" in out

    code, out = cli(capsys, "diagnose", "forest", "-c", drift.config, "--json")
    assert code == 0, out
    document = jsonsafe.loads(out)
    assert document["hypotheses"][0]["cause"] == "thread_count"
    assert [i["id"] for i in document["similar_incidents"]] == [1]

    code, out = cli(capsys, "incident", "list", "-c", drift.config, "--json")
    listed = json.loads(out)
    assert [(i["id"], i["run_id"], i["cause"]) for i in listed] == [(1, first, "thread_count")]
    assert listed[0]["signature"]["outputs"] == ["variable"]
    code, out = cli(capsys, "incident", "show", "1", "-c", drift.config)
    assert code == 0 and "fix: intra_op_num_threads=1" in out


def test_incident_list_shows_the_whole_text_when_piped_and_with_wide(
    drift: Drift, capsys: pytest.CaptureFixture[str]
) -> None:
    cli(capsys, "check", "forest", "-c", drift.config)
    text = "the pod moved to a 2-core node, so the per-thread partial sums reduce in another order; " * 3
    code, out = cli(capsys, "incident", "note", str(latest_run(drift.url)), "--cause", "thread_count", "--text", text)
    assert code == 0, out
    for extra in ((), ("-o", "wide")):  # captured stdout is a pipe: tab-separated, nothing cut
        code, out = cli(capsys, "incident", "list", "-c", drift.config, *extra)
        assert code == 0
        (row,) = out.splitlines()[1:]
        assert row.split("\t")[-1] == text, "the whole text, not its first 80 characters"


def test_diagnose_run_stores_the_diagnosis_with_the_run(drift: Drift, capsys: pytest.CaptureFixture[str]) -> None:
    cli(capsys, "check", "forest", "-c", drift.config)
    run_id = latest_run(drift.url)
    code, out = cli(capsys, "diagnose", "forest", "--run", str(run_id), "-c", drift.config)
    assert code == 0 and "1. thread_count" in out and "session.intra_op_num_threads=1" in out
    with Store(drift.url) as store:
        stored = incidents.diagnosis(store, run_id)
    assert stored is not None and stored["run_id"] == run_id and stored["hypotheses"][0]["cause"] == "thread_count"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["incident", "note", "999", "--cause", "tf32", "--text", "x"], 2, "no run 999 in the history"),
        (["incident", "note", "1", "--cause", "cosmic", "--text", "x"], 2, "--cause 'cosmic' is not a cause code"),
        (["incident", "note", "1", "--cause", "tf32", "--text", "   "], 2, "--text is empty"),
        (["incident", "show", "42"], 2, "no incident 42"),
        (["diagnose", "forest", "--run", "999"], 2, "--run 999: no run 999 in the history"),
        (["diagnose", "nosuch"], 2, "nosuch"),
    ],
)  # fmt: skip
def test_bad_incident_and_diagnose_arguments_are_one_line_usage_errors(
    drift: Drift, capsys: pytest.CaptureFixture[str], args: list[str], code: int, message: str
) -> None:
    cli(capsys, "check", "forest", "-c", drift.config)
    got, out = cli(capsys, *args, "-c", drift.config)
    assert got == code and message in out and "Traceback" not in out


def test_an_incident_noted_through_the_api_is_offered_on_the_next_failure(
    drift: Drift, capsys: pytest.CaptureFixture[str]
) -> None:
    cli(capsys, "check", "forest", "-c", drift.config)
    first = latest_run(drift.url)
    with Store(drift.url) as store:
        client = TestClient(create_app(RealDaemon(drift.workspace.settings(), store)), raise_server_exceptions=False)
        body = {"cause": "thread_count", "text": "2 cores now", "fix": "intra_op_num_threads=1", "by": "oncall"}
        assert client.post(f"/api/v1/runs/{first}/incidents", json=body).status_code == 401
        bad = client.post(f"/api/v1/runs/{first}/incidents", json={**body, "cause": "gremlins"}, headers=_bearer())
        assert bad.status_code == 422 and "not a cause code" in bad.text
        assert client.post("/api/v1/runs/999/incidents", json=body, headers=_bearer()).status_code == 404
        noted = client.post(f"/api/v1/runs/{first}/incidents", json=body, headers=_bearer())
        assert noted.status_code == 201, noted.text
        assert noted.json()["id"] == 1 and noted.json()["created_by"] == "oncall"

    # the next failure, same signature; not diagnosed (check diagnoses each fail unless told not to)
    cli(capsys, "check", "forest", "--no-diagnose", "-c", drift.config)
    second = latest_run(drift.url)
    assert second != first
    with Store(drift.url) as store:
        client = TestClient(create_app(RealDaemon(drift.workspace.settings(), store)), raise_server_exceptions=False)
        similar = client.get(f"/api/v1/runs/{second}/similar-incidents").json()
        assert [(i["id"], i["cause"], i["fix"]) for i in similar] == [(1, "thread_count", "intra_op_num_threads=1")]
        assert client.get(f"/api/v1/runs/{first}/similar-incidents").json() == []  # not offered to itself
        assert client.get("/api/v1/incidents").json()[0]["id"] == 1
        assert client.get("/api/v1/incidents/1").json()["text"] == "2 cores now"
        assert client.get("/api/v1/incidents/2").status_code == 404
        undiagnosed = client.get(f"/api/v1/runs/{second}/diagnosis").json()
        assert undiagnosed["diagnosed"] is False and undiagnosed["similar_incidents"][0]["id"] == 1
        assert client.get("/api/v1/runs/999/diagnosis").status_code == 404
    code, _ = cli(capsys, "diagnose", "forest", "--run", str(second), "-c", drift.config)
    assert code == 0
    with Store(drift.url) as store:
        client = TestClient(create_app(RealDaemon(drift.workspace.settings(), store)), raise_server_exceptions=False)
        document = client.get(f"/api/v1/runs/{second}/diagnosis").json()
    assert document["diagnosed"] is True and document["hypotheses"][0]["cause"] == "thread_count"
    assert document["similar_incidents"][0]["id"] == 1


def test_the_run_page_shows_the_diagnosis_and_notes_an_incident_without_javascript(
    drift: Drift, capsys: pytest.CaptureFixture[str]
) -> None:
    cli(capsys, "diagnose", "forest", "-c", drift.config)
    run_id = latest_run(drift.url)
    with Store(drift.url) as store:
        client = TestClient(create_app(RealDaemon(drift.workspace.settings(), store)), raise_server_exceptions=False)
        page = client.get(f"/runs/{run_id}")
        assert page.status_code == 200
        html = page.text
        assert "<script" not in html and "form-action 'self'" in page.headers["content-security-policy"]
        assert "Diagnosis" in html and "thread_count" in html and "<svg" in html and "current setup" in html
        assert "likely cause: thread_count (measured: " in html and "measured: restores the baseline" in html
        assert f'<form method="post" action="/runs/{run_id}/incidents"' in html
        form = {"cause": "thread_count", "text": "<b>two</b> cores", "fix": "intra=1", "token": "wrong"}
        refused = client.post(f"/runs/{run_id}/incidents", data=form, follow_redirects=False)
        assert refused.status_code == 401 and "token" in refused.text
        accepted = client.post(f"/runs/{run_id}/incidents", data={**form, "token": TOKEN}, follow_redirects=False)
        assert accepted.status_code == 303 and accepted.headers["location"] == f"/runs/{run_id}#incidents"
        bad = client.post(
            f"/runs/{run_id}/incidents", data={**form, "token": TOKEN, "cause": "x"}, follow_redirects=False
        )
        assert bad.status_code == 422
        assert [i.text for i in incidents.incidents(store)] == ["<b>two</b> cores"]


def test_diagnose_on_fail_stores_the_diagnosis_and_exports_its_cause(
    drift: Drift, capsys: pytest.CaptureFixture[str]
) -> None:
    drift.workspace.extra["daemon"] = {"diagnose_on_fail": True, "diagnose_budget": "60s"}
    config = str(drift.workspace.write())
    code, out = cli(capsys, "check", "forest", "-c", config)
    assert code == 1 and "likely cause: thread_count (measured: " in out  # from the experiments, not the rule alone
    run_id = latest_run(drift.url)
    with Store(drift.url) as store:
        stored = incidents.diagnosis(store, run_id)
        assert stored is not None and stored["hypotheses"][0]["cause"] == "thread_count"
        client = TestClient(create_app(RealDaemon(drift.workspace.settings(), store)), raise_server_exceptions=False)
        metrics = client.get("/metrics").text
    assert 'onnxmon_diagnosis_info{cause="thread_count",model="forest"} 1.0' in metrics


def _bearer() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


# --- the store side, on SQLite and PostgreSQL -----------------------------------------------------


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with database_url(request.param, tmp_path, request) as url, Store(url) as opened:
        opened.upgrade()
        yield opened


def test_diagnoses_and_incidents_round_trip_and_outlive_pruned_runs(store: Store) -> None:
    document = {"hypotheses": [{"cause": "tf32", "confidence": 0.97, "evidence": [], "fix": "use_tf32=0"}]}
    failing = result(T0, Verdict.FAIL, details={"diagnosis": document})
    run_id = store.record_run(failing)
    store.record_run(result(T0 + dt.timedelta(days=400), Verdict.PASS))  # the latest run stays
    assert incidents.diagnosis(store, run_id) == document
    noted = incidents.record_incident(
        store, run_id, cause="tf32", text="Ampere node", fix="use_tf32=0", by="me", signature={"reasons": ["atol_rtol"]}
    )
    assert incidents.incident(store, noted.id) == noted
    assert noted.model == "resnet" and noted.run_id == run_id
    stats = store.prune(
        now=T0 + dt.timedelta(days=500),
        passing_older_than=dt.timedelta(days=1),
        failures_older_than=dt.timedelta(days=1),
    )
    assert stats.runs_deleted == 1
    kept = incidents.incident(store, noted.id)
    assert kept is not None and kept.run_id is None and kept.text == "Ampere node"
    assert incidents.diagnosis(store, run_id) is None


def test_the_daemon_diagnoses_a_fail_within_its_budget_and_offers_the_incident(
    drift: Drift, capsys: pytest.CaptureFixture[str]
) -> None:
    from monitor.daemon.root import Daemon

    cli(capsys, "check", "forest", "-c", drift.config)
    first = latest_run(drift.url)
    cli(capsys, "incident", "note", str(first), "--cause", "thread_count", "--text", "2 cores", "-c", drift.config)
    drift.workspace.extra["daemon"] = {"diagnose_on_fail": True, "diagnose_budget": "60s", "startup_spread": 0}
    settings = drift.workspace.settings()
    with Store(settings.store.url) as store:
        daemon = Daemon(settings, store=store)
        try:
            checked = daemon.run_now("forest")
        finally:
            daemon.stop()
        document = checked.details["diagnosis"]
        assert document["seconds"] < 60
        assert document["hypotheses"][0]["cause"] == "thread_count"
        assert [i["id"] for i in document["similar_incidents"]] == [1]
        stored = incidents.diagnosis(store, latest_run(drift.url))
        assert stored is not None and stored["hypotheses"][0]["source"] == "experiment"


def test_a_passing_daemon_run_is_not_diagnosed(drift: Drift) -> None:
    from monitor.daemon.root import Daemon

    drift.workspace.set("forest", session={"intra_op_num_threads": 1})
    drift.workspace.extra["daemon"] = {"diagnose_on_fail": True, "startup_spread": 0}
    settings = drift.workspace.settings()
    with Store(settings.store.url) as store:
        store.upgrade()
        daemon = Daemon(settings, store=store)
        try:
            checked = daemon.run_now("forest")
        finally:
            daemon.stop()
    assert checked.verdict is Verdict.PASS and "diagnosis" not in checked.details


def test_a_model_that_cannot_run_is_diagnosed_from_evidence_and_exits_3(
    drift: Drift, capsys: pytest.CaptureFixture[str]
) -> None:
    (drift.workspace.root / "models" / "forest.onnx").unlink()
    code, out = cli(capsys, "diagnose", "forest", "-c", drift.config, "--json")
    assert code == 3 and "Traceback" not in out
    document = jsonsafe.loads(out[: out.rindex("}") + 1])
    assert document["experiments"] == []
    assert any("could not measure" in note for note in document["notes"])


def test_a_tiny_budget_still_answers(drift: Drift, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = cli(capsys, "diagnose", "forest", "-c", drift.config, "--budget", "1", "--json")
    assert code == 0, out
    document = jsonsafe.loads(out)
    spent = ("time budget spent", "could not be replayed")  # cut before or after the first replay
    assert document["hypotheses"] and any(s in n for n in document["notes"] for s in spent)


def test_the_run_page_form_notes_a_long_unicode_text_whole_or_refuses_it_never_cut(
    drift: Drift, capsys: pytest.CaptureFixture[str]
) -> None:
    # 10 000 characters is what an incident may hold; URL-encoded, a '€' is 9 bytes: 90 kB of form.
    cli(capsys, "diagnose", "forest", "-c", drift.config)
    run_id = latest_run(drift.url)
    text = "€" * incidents.MAX_TEXT
    with Store(drift.url) as store:
        client = TestClient(create_app(RealDaemon(drift.workspace.settings(), store)), raise_server_exceptions=False)
        form = {"token": TOKEN, "cause": "thread_count", "text": text, "fix": text}
        accepted = client.post(f"/runs/{run_id}/incidents", data=form, follow_redirects=False)
        assert accepted.status_code == 303, accepted.text
        assert [i.text for i in incidents.incidents(store)] == [text]
        huge = client.post(f"/runs/{run_id}/incidents", data={**form, "by": "x" * 400_000}, follow_redirects=False)
        assert huge.status_code == 413 and "form" in huge.text
        assert len(incidents.incidents(store)) == 1
