"""Baseline files stay inside the baselines directory, whatever ids and metadata say (issue 17, items 8 and 11).

The outside attack made ``baseline show`` hash ``/etc/passwd`` because ``baseline.json`` listed it,
and ``baseline promote ../../outside/evil`` write ``ACTIVE`` and a promotion record outside
``baselines_dir``; a non-UTF-8 ``baseline.json`` or ``ACTIVE`` gave a traceback, an
``internal_error`` verdict and an API 500. Each is a one-line ``BaselineError`` now.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from monitor import capture
from monitor.api.app import create_app
from monitor.check import run_check
from monitor.cli import main
from monitor.config.plan import plan_for
from monitor.files import baselines
from monitor.results import Verdict
from monitor.store import Store
from tests import modelzoo
from tests.test_metrics import RealDaemon
from tests.workspace import Workspace


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    workspace = Workspace(tmp_path / "project")
    workspace.root.mkdir()
    workspace.add_model("clf", modelzoo.classifier(), count=2)
    capture.capture_baseline(plan_for(workspace.settings(), "clf"))
    return workspace


def cli(ws: Workspace, *args: str) -> int:
    return main([*args, "-c", str(ws.config_file)])


def test_promote_refuses_an_id_that_walks_out_of_the_baselines_directory(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = ws.root.parent / "outside" / "evil"
    (outside).mkdir(parents=True)
    (outside / "baseline.json").write_text("{}")
    assert cli(ws, "baseline", "promote", "../../outside/evil") == 2
    err = capsys.readouterr().err
    assert "is not a baseline id" in err and "Traceback" not in err
    assert sorted(p.name for p in outside.parent.rglob("*")) == ["baseline.json", "evil"]


def test_show_never_reads_a_file_that_baseline_json_places_outside_the_baseline(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = baselines.active(ws.settings().store.baselines_dir, "clf")
    assert baseline is not None
    meta_path = baseline.directory / "baseline.json"
    meta = json.loads(meta_path.read_text())
    secret = ws.root.parent / "secret.txt"
    secret.write_text("do not hash me")
    meta["files"]["../../../secret.txt"] = "0" * 64
    meta["files"]["/etc/passwd"] = "0" * 64
    meta_path.write_text(json.dumps(meta))
    assert cli(ws, "baseline", "show", baseline.id) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert sum("escapes the baseline directory" in p for p in problems) == 2, problems


@pytest.mark.parametrize("damaged", ["baseline.json", "ACTIVE"])
def test_a_non_utf8_metadata_file_is_a_baseline_error_not_a_traceback(
    ws: Workspace, damaged: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = ws.settings().store.baselines_dir
    baseline = baselines.active(root, "clf")
    assert baseline is not None
    target = baseline.directory / damaged if damaged == "baseline.json" else root / "clf" / "ACTIVE"
    target.write_bytes(b"\xff\xfe\x00 not utf-8 \xc3\x28")
    assert cli(ws, "baseline", "list", "clf") == 2
    err = capsys.readouterr().err
    assert str(target) in err and "Traceback" not in err
    result = run_check(plan_for(ws.settings(), "clf"))
    assert result.verdict is Verdict.ERROR
    assert [r.code for r in result.reasons] == ["baseline_error"], result.reasons


def test_an_active_file_naming_a_path_is_refused(ws: Workspace) -> None:
    root = ws.settings().store.baselines_dir
    (root / "clf" / "ACTIVE").write_text("../../../etc\n")
    with pytest.raises(baselines.BaselineError, match="is not a baseline id"):
        baselines.active(root, "clf")


@pytest.mark.parametrize("damaged", ["baseline.json", "ACTIVE"])
def test_the_api_answers_with_the_damaged_file_named_not_a_500(ws: Workspace, damaged: str) -> None:
    settings = ws.settings()
    root = settings.store.baselines_dir
    baseline = baselines.active(root, "clf")
    assert baseline is not None
    target = baseline.directory / damaged if damaged == "baseline.json" else root / "clf" / "ACTIVE"
    target.write_bytes(b"\xff\xfe not utf-8")
    store = Store(settings.store.url)
    store.upgrade()
    try:
        client = TestClient(create_app(RealDaemon(settings, store)), raise_server_exceptions=False)
        models = client.get("/api/v1/models")
        assert models.status_code == 200
        listed = client.get("/api/v1/models/clf/baselines")
        if damaged == "baseline.json":
            assert listed.status_code == 409 and str(target) in listed.json()["detail"]
        else:
            assert listed.status_code == 200 and not any(b["active"] for b in listed.json())
        assert client.get("/models/clf").status_code == 200  # the status page shows the model all the same
    finally:
        store.close()
