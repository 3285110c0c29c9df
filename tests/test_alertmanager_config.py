"""The Alertmanager configuration shipped for onnxmon's alerts: valid for a real Alertmanager (amtool),
and the chart's AlertmanagerConfig says the same (one route grouped by model, the same inhibition).

What it does with real alerts is ``tests/test_alertmanager_e2e.py``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import CHART, helm_binary, render, run_helm
from tests.conftest import need_binary

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "deploy" / "alertmanager" / "onnxmon.yaml"


def shipped() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    return loaded


@pytest.mark.process
def test_the_shipped_config_passes_amtool() -> None:
    amtool = need_binary("alertmanager", "amtool")
    done = subprocess.run([amtool, "check-config", str(SHIPPED)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_checks_stale_is_inhibited_by_run_errors_of_the_same_model() -> None:
    (rule,) = shipped()["inhibit_rules"]
    assert rule["source_matchers"] == ['alertname = "OnnxmonRunErrors"']
    assert rule["target_matchers"] == ['alertname = "OnnxmonChecksStale"']
    assert {"model", "instance", "job", "namespace"} <= set(rule["equal"]), "the same model on the same target"


@pytest.mark.process
def test_the_charts_alertmanager_config_routes_and_inhibits_as_the_shipped_one(tmp_path: Path) -> None:
    helm = helm_binary()
    values = {
        "monitoring": {
            "capabilityCheck": False,
            "alertmanagerConfig": {
                "enabled": True,
                "receivers": [{"name": "pager"}],
                "labels": {"alertmanager": "main"},
            },
        }
    }
    (config,) = [o for o in render(helm, values, tmp_path) if o["kind"] == "AlertmanagerConfig"]
    route, ours = config["spec"]["route"], shipped()["route"]["routes"][0]
    assert route["receiver"] == "pager" and config["spec"]["receivers"] == [{"name": "pager"}]
    assert route["groupBy"] == ours["group_by"]
    assert [route["groupWait"], route["groupInterval"], route["repeatInterval"]] == [
        ours["group_wait"],
        ours["group_interval"],
        ours["repeat_interval"],
    ]
    assert route["matchers"] == [{"name": "alertname", "matchType": "=~", "value": "Onnxmon.*"}]
    (inhibit,) = config["spec"]["inhibitRules"]
    (rule,) = shipped()["inhibit_rules"]
    assert inhibit["equal"] == rule["equal"]
    assert [m["value"] for m in inhibit["sourceMatch"] + inhibit["targetMatch"]] == [
        "OnnxmonRunErrors",
        "OnnxmonChecksStale",
    ]
    assert config["metadata"]["labels"]["alertmanager"] == "main"
    off = render(helm, {"monitoring": {"capabilityCheck": False}}, tmp_path)
    assert not [o for o in off if o["kind"] == "AlertmanagerConfig"], "off by default"


@pytest.mark.process
def test_the_charts_alertmanager_config_wants_a_receiver(tmp_path: Path) -> None:
    values = {"monitoring": {"capabilityCheck": False, "alertmanagerConfig": {"enabled": True}}}
    done = run_helm(helm_binary(), values, tmp=tmp_path)
    assert done.returncode != 0 and "receivers" in done.stderr, done.stderr
    assert (CHART / "templates" / "alertmanagerconfig.yaml").is_file()
