"""The DCGM join example (deploy/prometheus/dcgm-join.example.yaml): valid rules, and it tells a faulty GPU apart.

promtool checks the file and runs a unit test: a drift on a node whose GPU logged an XID fires the
critical alert, a drift on a healthy node the warning, and neither fires on the other's node.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "dcgm-join.example.yaml"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

TEST = {
    "rule_files": [str(RULES)],
    "evaluation_interval": "1m",
    "tests": [
        {
            "interval": "1m",
            "input_series": [
                {
                    "series": 'onnxmon_output_recent_failing_runs{job="onnxmon",node="n1",model="m",output="y"}',
                    "values": "2x20",
                },
                {
                    "series": 'onnxmon_output_recent_failing_runs{job="onnxmon",node="n2",model="m",output="y"}',
                    "values": "2x20",
                },
                {"series": 'DCGM_FI_DEV_XID_ERRORS{Hostname="n1",gpu="0"}', "values": "79x20"},
                {"series": 'DCGM_FI_DEV_XID_ERRORS{Hostname="n2",gpu="0"}', "values": "0x20"},
                {"series": 'DCGM_FI_DEV_THERMAL_VIOLATION{Hostname="n2",gpu="0"}', "values": "0x20"},
            ],
            "alert_rule_test": [
                {
                    "eval_time": "10m",
                    "alertname": "OnnxmonDriftOnUnhealthyGpu",
                    "exp_alerts": [{"exp_labels": {"node": "n1", "model": "m", "severity": "critical"}}],
                },
                {
                    "eval_time": "10m",
                    "alertname": "OnnxmonDriftOnHealthyGpu",
                    "exp_alerts": [{"exp_labels": {"node": "n2", "model": "m", "severity": "warning"}}],
                },
            ],
        }
    ],
}


def _annotations(alert: str, node: str, model: str) -> dict[str, str]:
    """The alert's annotations as Prometheus renders them for ``node`` and ``model``."""
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"][0]["rules"]
    (rule,) = [r for r in rules if r.get("alert") == alert]
    render = {"{{ $labels.node }}": node, "{{ $labels.model }}": model}
    out = {}
    for key, text in rule["annotations"].items():
        for template, value in render.items():
            text = text.replace(template, value)
        out[key] = text
    return out


for case in TEST["tests"][0]["alert_rule_test"]:  # type: ignore[index]
    for expected in case["exp_alerts"]:
        labels = expected["exp_labels"]
        expected["exp_annotations"] = _annotations(case["alertname"], labels["node"], labels["model"])


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if not Path(PROMTOOL).exists():
        pytest.skip("promtool not installed")
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)


def test_the_example_rules_are_valid() -> None:
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_drift_on_a_gpu_with_an_xid_is_told_apart_from_one_on_a_healthy_gpu(tmp_path: Path) -> None:
    test_file = tmp_path / "dcgm_test.yaml"
    test_file.write_text(yaml.safe_dump(TEST, sort_keys=False), encoding="utf-8")
    done = promtool("test", "rules", str(test_file))
    assert done.returncode == 0, done.stdout + done.stderr
