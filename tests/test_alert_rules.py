"""The Prometheus alert rules: valid, unit-tested with promtool, labelled and annotated, and each
alert explained in docs/runbook.md under a heading its ``runbook_url`` points at.

The same unit tests run against the chart's PrometheusRule rendered for another job name, and a
second set against a rendering with the platform's overrides (severity, ``for:``, disabled alerts,
routing labels, runbook base URL): one rule file, two ways to deploy it, both tested by promtool.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import CHART, helm_binary, render
from tests.conftest import need_binary

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "alerts.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yaml"
RUNBOOK = ROOT / "docs" / "runbook.md"
VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))["version"]
# the docs of this release (a tag), never a moving branch
RUNBOOK_URL = f"https://github.com/onnxmon/onnxmon/blob/v{VERSION}/docs/runbook.md#"

REQUIRED_ALERTS = {
    "OnnxmonOutputOutOfTolerance": "critical",
    "OnnxmonCheckFailing": "critical",
    "OnnxmonChecksStale": "warning",
    "OnnxmonRunErrors": "warning",
    "OnnxmonProviderFallback": "critical",
    "OnnxmonEnvironmentChanged": "info",
    "OnnxmonNondeterministic": "warning",
    "OnnxmonNumericDriftWarning": "warning",
    "OnnxmonNodeComputesDifferently": "critical",
    "OnnxmonDown": "warning",
    "OnnxmonConfigReloadFailed": "warning",
}
# Reason codes of verdict fail (drift); every other code means verdict error and belongs in
# the OnnxmonRunErrors reason list. A new code must be put on one side or the other.
DRIFT_REASONS = frozenset(
    {
        "atol_rtol",
        "cosine",
        "snr",
        "topk",
        "nan_mismatch",
        "inf_mismatch",
        "exact_mismatch",
        "nondeterministic",
        "provider_fallback",
        "model_changed",
        "benchset_changed",
        "decision_changed",
    }
)


def _rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def _alerts() -> list[dict[str, Any]]:
    return [rule for rule in _rules() if "alert" in rule]


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.process
def test_rules_pass_promtool_check() -> None:
    promtool = need_binary("prometheus", "promtool")
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.process
def test_rules_pass_their_promtool_unit_tests() -> None:
    promtool = need_binary("prometheus", "promtool")
    done = subprocess.run(
        [promtool, "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_rules_are_one_group_named_onnxmon() -> None:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    assert [g["name"] for g in groups] == ["onnxmon"]


@pytest.mark.parametrize(("name", "severity"), REQUIRED_ALERTS.items())
def test_required_alert_exists_with_its_severity(name: str, severity: str) -> None:
    alerts = {a["alert"]: a for a in _alerts()}
    assert name in alerts
    assert alerts[name]["labels"]["severity"] == severity


@pytest.mark.parametrize("alert", _alerts(), ids=lambda a: str(a["alert"]))
def test_alert_is_camel_case_with_severity_summary_description_and_runbook_url(alert: dict[str, Any]) -> None:
    assert re.fullmatch(r"Onnxmon(?:[A-Z][a-z0-9]*)+", alert["alert"])
    assert alert["labels"]["severity"] in {"critical", "warning", "info"}
    annotations = alert["annotations"]
    assert set(annotations) >= {"summary", "description", "runbook_url"}
    assert annotations["summary"].strip() and annotations["description"].strip()
    assert annotations["runbook_url"] == RUNBOOK_URL + alert["alert"].lower()


@pytest.mark.parametrize("alert", _alerts(), ids=lambda a: str(a["alert"]))
def test_runbook_url_anchor_is_a_heading_in_the_runbook(alert: dict[str, Any]) -> None:
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", RUNBOOK.read_text(encoding="utf-8"), re.MULTILINE)
    anchor = alert["annotations"]["runbook_url"].split("#", 1)[1]
    assert anchor in {github_anchor(h) for h in headings}
    assert alert["alert"] in headings, "the section is headed by the exact alert name"


@pytest.mark.parametrize("alert", _alerts(), ids=lambda a: str(a["alert"]))
def test_alert_has_a_firing_and_a_quiet_unit_test(alert: dict[str, Any]) -> None:
    cases = [
        case
        for test in yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))["tests"]
        for case in test.get("alert_rule_test", [])
        if case["alertname"] == alert["alert"]
    ]
    assert any(case["exp_alerts"] for case in cases), "no case where it fires"
    assert any(not case["exp_alerts"] for case in cases), "no case where it stays quiet"


# Gauges read from the history store at every scrape: true from a new target's first sample.
STORE_GAUGES = frozenset(
    {
        "onnxmon_output_recent_failing_runs",
        "onnxmon_recent_failing_runs",
        "onnxmon_recent_error_runs",
        "onnxmon_environment_changed_timestamp_seconds",
        "onnxmon_last_run_timestamp_seconds",
        "onnxmon_provider_fallback",
        "onnxmon_output_nondeterministic",
        "onnxmon_output_numeric_warning",
        "onnxmon_schedule_interval_seconds",
        "onnxmon_config_last_reload_successful",
        # set after each check from the daemon's vote over the shared store (docs/fleet.md): a gauge
        # that is right from the first vote after a restart, never a counter that must move
        "onnxmon_fleet_consistent",
    }
)


@pytest.mark.parametrize("alert", _alerts(), ids=lambda a: str(a["alert"]))
def test_no_alert_depends_on_a_counter_moving_while_prometheus_watched(alert: dict[str, Any]) -> None:
    # In Kubernetes an upgrade is a restart: a new target whose first checks finish before its first
    # scrape. increase()/changes()/rate() of a counter that is already 1 at the first sample are 0,
    # so an alert built on them never fires for the event it exists for (issue 23).
    expr = str(alert["expr"])
    assert not re.search(r"\b(increase|rate|irate|changes|delta|resets)\(", expr), expr
    metrics = set(re.findall(r"\b(onnxmon_[a-z_]+)", expr))
    assert metrics <= STORE_GAUGES, f"{alert['alert']} reads {sorted(metrics - STORE_GAUGES)}"


def test_every_paging_alert_waits_or_counts_runs_before_it_pages() -> None:
    """A critical alert fires on one evaluation only when its expression already counts runs."""
    for alert in _alerts():
        if alert["labels"]["severity"] == "critical":
            assert "for" in alert or "_recent_" in str(alert["expr"]), alert["alert"]
    provider = next(a for a in _alerts() if a["alert"] == "OnnxmonProviderFallback")
    assert provider["for"] == "5m"


def test_the_runbook_version_is_the_chart_and_package_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["version"] == VERSION, "Chart.yaml version and pyproject.toml version differ"
    assert "blob/main/" not in RULES.read_text(encoding="utf-8")


# --------------------------------------------------------------------------- the chart's rendering


def _promtool_test(tmp_path: Path, rules: dict[str, Any], tests: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    promtool = need_binary("prometheus", "promtool")
    (tmp_path / "rendered.yaml").write_text(yaml.safe_dump({"groups": rules["spec"]["groups"]}), encoding="utf-8")
    (tmp_path / "rendered_test.yaml").write_text(
        yaml.safe_dump({**tests, "rule_files": ["rendered.yaml"]}), encoding="utf-8"
    )
    return subprocess.run(
        [promtool, "test", "rules", "rendered_test.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


def _rendered_rule(tmp_path: Path, values: dict[str, Any]) -> dict[str, Any]:
    monitoring = {"prometheusRule": {"enabled": True, **values.pop("prometheusRule", {})}}
    objects = render(helm_binary(), {**values, "monitoring": monitoring}, tmp_path)
    return next(o for o in objects if o["kind"] == "PrometheusRule")


@pytest.mark.helm
def test_the_unit_tests_pass_against_the_chart_rendering_for_another_job(tmp_path: Path) -> None:
    rule = _rendered_rule(tmp_path, {"fullnameOverride": "gpu-precision"})
    text = RULE_TESTS.read_text(encoding="utf-8")
    moved = text.replace('job="onnxmon"', 'job="gpu-precision"').replace("job: onnxmon", "job: gpu-precision")
    assert moved != text
    done = _promtool_test(tmp_path, rule, yaml.safe_load(moved))
    assert done.returncode == 0, done.stdout + done.stderr
    # and they fail when the series come from another release's job: the selectors do select
    done = _promtool_test(tmp_path, rule, yaml.safe_load(text))
    assert done.returncode != 0


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    rendered = ", ".join(f'{k}="{v}"' for k, v in {"job": "gpu-precision", "instance": "gpu-0:8080", **labels}.items())
    return {"series": f"{name}{{{rendered}}}", "values": values}


@pytest.mark.helm
def test_overridden_rules_fire_with_the_platforms_severity_for_labels_and_runbooks(tmp_path: Path) -> None:
    rule = _rendered_rule(
        tmp_path,
        {
            "fullnameOverride": "gpu-precision",
            "prometheusRule": {
                "additionalLabels": {"team": "ml-platform"},
                "runbookBaseUrl": "https://wiki.example/runbooks/onnxmon/",
                "disabled": {"OnnxmonNondeterministic": True},
                "overrides": {
                    "OnnxmonProviderFallback": {"severity": "warning", "for": "15m"},
                    "OnnxmonChecksStale": {"severity": "critical", "for": "1m"},
                },
            },
        },
    )
    labels = {"job": "gpu-precision", "instance": "gpu-0:8080", "team": "ml-platform"}
    runbook = "https://wiki.example/runbooks/onnxmon/"
    tests = {
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    _series("onnxmon_provider_fallback", "1x30", model="on_cpu"),
                    _series("onnxmon_output_nondeterministic", "1x30", model="bert", output="logits"),
                    _series("onnxmon_schedule_interval_seconds", "60x30", model="stuck"),
                    _series("onnxmon_last_run_timestamp_seconds", "0x30", model="stuck"),
                ],
                "alert_rule_test": [
                    # for: 15m instead of 5m: still pending at 10m
                    {"eval_time": "10m", "alertname": "OnnxmonProviderFallback", "exp_alerts": []},
                    {
                        "eval_time": "16m",
                        "alertname": "OnnxmonProviderFallback",
                        "exp_alerts": [
                            {
                                "exp_labels": {**labels, "model": "on_cpu", "severity": "warning"},
                                "exp_annotations": {
                                    "summary": "on_cpu runs without a requested execution provider (CPU fallback)",
                                    "description": (
                                        "The last run of model on_cpu on gpu-0:8080 did not get every execution "
                                        "provider its config asks for: ONNX Runtime fell back (typically CUDA to "
                                        "CPU), so the numbers and the latency are not those of production."
                                    ),
                                    "runbook_url": runbook + "onnxmonproviderfallback",
                                },
                            }
                        ],
                    },
                    # disabled: never fires, whatever the series say
                    {"eval_time": "20m", "alertname": "OnnxmonNondeterministic", "exp_alerts": []},
                    # for: 1m instead of 5m, severity critical instead of warning
                    {
                        "eval_time": "4m",
                        "alertname": "OnnxmonChecksStale",
                        "exp_alerts": [
                            {
                                "exp_labels": {**labels, "model": "stuck", "severity": "critical"},
                                "exp_annotations": {
                                    "summary": "stuck has not been checked for more than twice its interval",
                                    "description": (
                                        "The last run of model stuck on gpu-0:8080 finished 4m 0s ago, more than "
                                        "2 x its schedule interval. Its numbers are not being watched. When "
                                        "OnnxmonRunErrors fires for the same model, that is the cause (its runs end "
                                        "in error and are backed off; the shipped Alertmanager inhibition silences "
                                        "this alert then); otherwise the scheduler is stuck, runs are skipped or "
                                        "missed, or checks hang."
                                    ),
                                    "runbook_url": runbook + "onnxmonchecksstale",
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    done = _promtool_test(tmp_path, rule, tests)
    assert done.returncode == 0, done.stdout + done.stderr
