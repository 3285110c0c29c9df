"""Decisions where a result goes: the store, the API, the run page, Prometheus and the log line.

One workspace: ``clf`` decides ``logits`` (argmax) and ``prob`` (threshold); its weights are moved
enough to flip classes (a ``fail`` with ``decision_changed``), and ``quiet`` (``numeric: warn``)
drifts in its low bits under another optimization level without flipping anything (a ``pass``
with warnings). Both go through a real daemon handle (``tests/test_metrics.RealDaemon``).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from monitor import capture
from monitor.api.app import create_app
from monitor.check import run_check
from monitor.config.plan import plan_for
from monitor.results import CheckResult, Verdict
from monitor.store import Store
from tests import modelzoo
from tests.test_metrics import RealDaemon, migrated_store, scrape, value
from tests.workspace import Workspace


@dataclass(frozen=True)
class Runs:
    ws: Workspace
    flipped: CheckResult
    warned: CheckResult


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    ws = Workspace(tmp_path_factory.mktemp("decisions"))
    model = modelzoo.classifier()
    decisions = {"logits": {"kind": "argmax"}, "prob": {"kind": "threshold", "value": 0.5}}
    ws.add_model("clf", model, count=4, dims={"batch": 50}, decisions=decisions)
    ws.add_model(
        "quiet", modelzoo.layernorm_gelu(), count=4, dims={"batch": 16},
        session={"graph_optimization_level": "disable"}, decisions={"y": {"kind": "argmax"}},
        tolerance={"default": {"atol": 1e-8, "rtol": 1e-7, "numeric": "warn"}},
    )  # fmt: skip
    for name in ("clf", "quiet"):
        capture.capture_baseline(plan_for(ws.settings(), name))
    ws.replace_model("clf", modelzoo.perturb_initializer(model, "w2", 0.3))
    ws.set("quiet", session={"graph_optimization_level": "all"})
    settings = ws.settings()
    flipped, warned = run_check(plan_for(settings, "clf")), run_check(plan_for(settings, "quiet"))
    assert flipped.verdict is Verdict.FAIL and warned.verdict is Verdict.PASS
    return Runs(ws, flipped, warned)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    yield from migrated_store(tmp_path)


@pytest.fixture
def daemon(runs: Runs, store: Store, caplog: pytest.LogCaptureFixture) -> RealDaemon:
    daemon = RealDaemon(runs.ws.settings(), store, startup_env=dict(runs.flipped.environment))
    with caplog.at_level(logging.INFO, logger="tests.onnxmon.checks"):
        daemon.dispatch(runs.flipped)
        daemon.dispatch(runs.warned)
    return daemon


def test_the_store_gives_back_the_decisions_and_warnings_it_was_given(daemon: RealDaemon, runs: Runs) -> None:
    latest = {r.model: r for r in daemon.store.latest_per_model()}
    assert latest["clf"].outputs == runs.flipped.outputs
    assert latest["quiet"].outputs == runs.warned.outputs
    (y,) = latest["quiet"].outputs
    assert y.warnings and y.decisions is not None and y.decisions.flipped == 0


def test_the_api_and_check_json_carry_decisions_and_warnings(daemon: RealDaemon, runs: Runs) -> None:
    client = TestClient(create_app(daemon), raise_server_exceptions=False)
    ids = {m: client.get(f"/api/v1/models/{m}/runs").json()[0]["id"] for m in ("clf", "quiet")}
    outputs = {o["name"]: o for o in client.get(f"/api/v1/runs/{ids['clf']}").json()["outputs"]}
    logits = outputs["logits"]["decisions"]
    expected = next(o for o in runs.flipped.outputs if o.name == "logits").decisions
    assert expected is not None and expected.flipped > 0
    assert logits == {**expected.to_dict(), "flips": [list(f) for f in expected.flips]}
    assert set(logits) == {"kind", "total", "flipped", "ratio", "flips"}
    assert "decision_changed" in {r["code"] for r in outputs["logits"]["reasons"]}
    (y,) = client.get(f"/api/v1/runs/{ids['quiet']}").json()["outputs"]
    assert y["verdict"] == "pass" and [w["code"] for w in y["warnings"]] == ["atol_rtol"]
    assert y["tolerance"]["numeric"] == "warn"
    printed = json.loads(json.dumps(runs.flipped.to_dict()))  # what `check -o json` prints per output
    assert {o["name"]: o["decisions"]["flipped"] for o in printed["outputs"]} == {
        o.name: o.decisions.flipped for o in runs.flipped.outputs if o.decisions is not None
    }

    page = client.get(f"/runs/{ids['clf']}")
    assert page.status_code == 200 and "Decisions" in page.text
    first = expected.flips[0]
    assert f"sample {first[0]} row {first[1]}" in page.text and "changed" in page.text
    quiet = client.get(f"/runs/{ids['quiet']}").text
    assert "no decision flipped" in quiet and "atol_rtol" in quiet and "warning" in quiet


def test_prometheus_exports_the_flipped_ratio_and_the_warning(daemon: RealDaemon, runs: Runs) -> None:
    s = scrape(daemon.registry)
    for output in runs.flipped.outputs:
        assert output.decisions is not None
        got = value(s, "onnxmon_output_decisions_flipped_ratio", model="clf", output=output.name)
        assert got == pytest.approx(output.decisions.ratio)
        assert value(s, "onnxmon_output_numeric_warning", model="clf", output=output.name) == 0
    assert value(s, "onnxmon_output_decisions_flipped_ratio", model="clf", output="logits") > 0
    assert value(s, "onnxmon_output_decisions_flipped_ratio", model="quiet", output="y") == 0
    assert value(s, "onnxmon_output_numeric_warning", model="quiet", output="y") == 1


def test_before_any_run_the_decided_series_exist_as_nan(runs: Runs, store: Store) -> None:
    s = scrape(RealDaemon(runs.ws.settings(), store).registry)
    assert math.isnan(value(s, "onnxmon_output_decisions_flipped_ratio", model="clf", output="prob"))
    assert not [k for k in s if k[0] == "onnxmon_output_decisions_flipped_ratio" and ("output", "y") not in k[1]
                and ("model", "quiet") in k[1]]  # fmt: skip


def test_a_warned_pass_is_logged_at_warning_level(daemon: RealDaemon, caplog: pytest.LogCaptureFixture) -> None:
    lines = {
        json.loads(r.getMessage())["model"]: r for r in caplog.get_records("setup") if r.name == "tests.onnxmon.checks"
    }
    assert lines["quiet"].levelno == logging.WARNING
    assert json.loads(lines["quiet"].getMessage())["warnings"] == ["atol_rtol"]
