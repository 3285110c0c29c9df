"""The chart bends to a platform team's cluster (issue 16): ServiceMonitor and PrometheusRule
options, custom resources rendered when enabled, day-2 hooks (init containers, volumes, env,
labels), NetworkPolicy and PodDisruptionBudget, and the dashboard following the chart's values.

Everything runs the real ``helm template``; objects are validated by kubernetes-validate and the
Prometheus Operator CRD schemas in tests/test_helm.py (scenario ``kube-prometheus-stack``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.chart import CHART, ROOT, helm_binary, render, run_helm, validate_custom_resource

pytestmark = pytest.mark.helm

RULES = ROOT / "deploy" / "prometheus" / "alerts.yaml"
CHART_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))["version"]
ALERTS = [
    r["alert"] for g in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"] for r in g["rules"] if "alert" in r
]
ON = {"enabled": True}


@pytest.fixture(scope="module")
def helm() -> str:
    return helm_binary()


def kinds(objects: list[dict[str, Any]]) -> set[str]:
    return {o["kind"] for o in objects}


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, [o["kind"] for o in objects]
    return found[0]


def alerts_of(rule: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}


def exprs_of(rule: dict[str, Any]) -> list[str]:
    return [str(r["expr"]) for g in rule["spec"]["groups"] for r in g["rules"]]


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, "Deployment")["spec"]["template"]["spec"]
    return spec


def dashboard_of(objects: list[dict[str, Any]]) -> dict[str, Any]:
    configmap = next(o for o in objects if o["metadata"]["name"].endswith("-dashboard"))
    loaded: dict[str, Any] = json.loads(configmap["data"]["onnxmon.json"])
    return loaded


# --------------------------------------------------------------------------- custom resources


def test_operator_objects_are_off_by_default_and_rendered_when_enabled_without_asking_the_cluster(
    helm: str, tmp_path: Path
) -> None:
    enabled = {"monitoring": {"serviceMonitor": ON, "prometheusRule": ON}}
    assert not {"ServiceMonitor", "PrometheusRule"} & kinds(render(helm, {}, tmp_path, operator=True))
    # helm template in a GitOps pipeline knows nothing of the cluster: the objects must still come out
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds(render(helm, enabled, tmp_path))


def test_the_capability_check_is_opt_in_and_skips_only_where_the_api_is_not_served(helm: str, tmp_path: Path) -> None:
    checked = {"monitoring": {"capabilityCheck": True, "serviceMonitor": ON, "prometheusRule": ON}}
    assert not {"ServiceMonitor", "PrometheusRule"} & kinds(render(helm, checked, tmp_path))
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds(render(helm, checked, tmp_path, operator=True))


# --------------------------------------------------------------------------- PrometheusRule


def test_prometheus_rule_of_a_release_named_onnxmon_is_the_rules_file_unchanged(helm: str, tmp_path: Path) -> None:
    rule = one(render(helm, {"monitoring": {"prometheusRule": ON}}, tmp_path), "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]


@pytest.mark.parametrize(
    ("values", "job"),
    [
        ({"fullnameOverride": "gpu-precision"}, "gpu-precision"),
        ({"nameOverride": "precision"}, "onnxmon-precision"),
        ({"monitoring": {"prometheusRule": {"job": "onnxmon-static"}}}, "onnxmon-static"),
    ],
)
def test_every_selector_of_every_rule_names_the_release_job(
    helm: str, tmp_path: Path, values: dict[str, Any], job: str
) -> None:
    values = {**values, "monitoring": {**values.get("monitoring", {})}}
    values["monitoring"]["prometheusRule"] = {**values["monitoring"].get("prometheusRule", {}), "enabled": True}
    values["monitoring"]["serviceMonitor"] = ON
    objects = render(helm, values, tmp_path)
    rule = one(objects, "PrometheusRule")
    if "job" not in values["monitoring"]["prometheusRule"]:
        # the ServiceMonitor gives the job the Service's name: the alerts select what it scrapes
        assert one(objects, "Service")["metadata"]["name"] == job
    for expr in exprs_of(rule):
        assert re.findall(r'job\s*=~?\s*"([^"]*)"', expr), f"a rule without a job selector: {expr}"
        assert set(re.findall(r'job\s*=~?\s*"([^"]*)"', expr)) == {job}, expr
        # every metric selector carries it (a second release would otherwise be evaluated too)
        assert len(re.findall(r"\b(?:onnxmon[_:][a-z_:]+|up)\{", expr)) == expr.count(f'job="{job}"'), expr


def test_alerts_can_be_disabled_relabelled_and_given_their_own_severity_and_for(helm: str, tmp_path: Path) -> None:
    values = {
        "monitoring": {
            "prometheusRule": {
                "enabled": True,
                "additionalLabels": {"team": "ml-platform", "severity": "page"},
                "disabled": {"OnnxmonNondeterministic": True, "OnnxmonEnvironmentChanged": False},
                "overrides": {
                    "OnnxmonChecksStale": {"severity": "critical", "for": "15m"},
                    "OnnxmonProviderFallback": {"for": "10m", "labels": {"pager": "gpu-oncall"}},
                },
            }
        }
    }
    source = alerts_of({"spec": yaml.safe_load(RULES.read_text(encoding="utf-8"))})
    alerts = alerts_of(one(render(helm, values, tmp_path), "PrometheusRule"))
    assert set(alerts) == set(ALERTS) - {"OnnxmonNondeterministic"}
    assert all(a["labels"]["team"] == "ml-platform" for a in alerts.values())
    assert (alerts["OnnxmonChecksStale"]["labels"]["severity"], alerts["OnnxmonChecksStale"]["for"]) == (
        "critical",
        "15m",
    )
    fallback = alerts["OnnxmonProviderFallback"]
    assert (fallback["for"], fallback["labels"]["pager"], fallback["labels"]["severity"]) == (
        "10m",
        "gpu-oncall",
        "critical",
    )
    # additionalLabels add labels, they never replace an alert's own severity
    assert {
        name: a["labels"]["severity"]
        for name, a in alerts.items()
        if name not in values["monitoring"]["prometheusRule"]["overrides"]
    } == {
        name: source[name]["labels"]["severity"]
        for name in alerts
        if name not in values["monitoring"]["prometheusRule"]["overrides"]
    }
    assert alerts["OnnxmonDown"]["for"] == source["OnnxmonDown"]["for"]


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("", f"https://github.com/onnxmon/onnxmon/blob/v{CHART_VERSION}/docs/runbook.md#onnxmondown"),
        ("https://wiki.example/onnxmon.html", "https://wiki.example/onnxmon.html#onnxmondown"),
        ("https://wiki.example/runbooks/onnxmon/", "https://wiki.example/runbooks/onnxmon/onnxmondown"),
    ],
)
def test_runbook_urls_follow_the_base_url_and_default_to_this_chart_versions_docs(
    helm: str, tmp_path: Path, base: str, expected: str
) -> None:
    values = {"monitoring": {"prometheusRule": {"enabled": True, "runbookBaseUrl": base}}}
    objects = render(helm, values, tmp_path)
    alerts = alerts_of(one(objects, "PrometheusRule"))
    assert alerts["OnnxmonDown"]["annotations"]["runbook_url"] == expected
    anchor = expected.rsplit("#", 1)[-1].rsplit("/", 1)[-1]
    for name, alert in alerts.items():
        assert alert["annotations"]["runbook_url"] == expected.replace(anchor, name.lower())
    dashboard = dashboard_of(objects)
    runbook_base = expected.removesuffix("#onnxmondown").removesuffix("onnxmondown")
    assert next(link for link in dashboard["links"] if link["title"] == "Runbook")["url"] == runbook_base
    panel_links = [link["url"] for panel in dashboard["panels"] for link in panel.get("links", [])]
    assert panel_links and all(url.startswith(runbook_base) and url != runbook_base for url in panel_links)


def test_an_unknown_alert_name_is_refused_even_without_the_schema(helm: str, tmp_path: Path) -> None:
    values = {"monitoring": {"prometheusRule": {"enabled": True, "overrides": {"OnnxmonDwn": {"for": "1m"}}}}}
    done = run_helm(helm, values, "--skip-schema-validation", tmp=tmp_path)
    assert done.returncode != 0
    assert 'no alert named "OnnxmonDwn"' in done.stderr and "OnnxmonDown" in done.stderr, done.stderr


def test_the_schema_knows_exactly_the_alerts_of_the_rules_file() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    assert schema["$defs"]["alertNames"]["enum"] == ALERTS


# --------------------------------------------------------------------------- ServiceMonitor


def test_service_monitor_puts_the_node_name_in_node_then_applies_the_platforms_relabelings(
    helm: str, tmp_path: Path
) -> None:
    extra = [{"targetLabel": "cluster", "replacement": "gpu-eu-1", "action": "replace"}]
    dropped = [{"sourceLabels": ["__name__"], "regex": "onnxmon_run_duration_seconds_bucket", "action": "drop"}]
    values = {
        "monitoring": {
            "serviceMonitor": {
                "enabled": True,
                "namespace": "monitoring",
                "honorLabels": True,
                "relabelings": extra,
                "metricRelabelings": dropped,
                "labels": {"release": "kube-prometheus-stack"},
                "interval": "1m",
            }
        }
    }
    monitor = one(render(helm, values, tmp_path), "ServiceMonitor")
    validate_custom_resource(monitor)
    endpoint = monitor["spec"]["endpoints"][0]
    node = {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"}
    assert endpoint["relabelings"] == [node, *extra]
    assert endpoint["metricRelabelings"] == dropped
    assert (endpoint["honorLabels"], endpoint["interval"]) == (True, "1m")
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # the object may live with Prometheus; it still selects the Service in the release namespace
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["gpu-monitoring"]


def test_the_node_relabeling_can_be_turned_off(helm: str, tmp_path: Path) -> None:
    values = {"monitoring": {"serviceMonitor": {"enabled": True, "nodeRelabeling": False}}}
    endpoint = one(render(helm, values, tmp_path), "ServiceMonitor")["spec"]["endpoints"][0]
    assert "relabelings" not in endpoint and endpoint["honorLabels"] is False


def test_the_crd_schema_catches_a_misspelt_relabeling_the_values_schema_lets_through(helm: str, tmp_path: Path) -> None:
    values = {"monitoring": {"serviceMonitor": {"enabled": True, "relabelings": [{"sourceLabel": ["x"]}]}}}
    monitor = one(render(helm, values, tmp_path), "ServiceMonitor")
    with pytest.raises(jsonschema.ValidationError, match="sourceLabel"):
        validate_custom_resource(monitor)


# --------------------------------------------------------------------------- day-2 hooks


def test_extra_init_containers_run_after_the_migration_under_the_restricted_profile(helm: str, tmp_path: Path) -> None:
    own = {"runAsNonRoot": True, "runAsUser": 20002, "allowPrivilegeEscalation": False}
    values = {
        "extraInitContainers": [
            {"name": "models", "image": "busybox", "volumeMounts": [{"name": "data", "mountPath": "/var/lib/onnxmon"}]},
            {"name": "baselines", "image": "busybox", "securityContext": own},
        ],
        "extraEnv": [{"name": "ONNXMON_DEFAULTS__REPEATS", "value": "3"}],
        "extraVolumes": [{"name": "models-ro", "configMap": {"name": "tiny-models"}}],
        "extraVolumeMounts": [{"name": "models-ro", "mountPath": "/models", "readOnly": True}],
    }
    spec = pod_spec(render(helm, values, tmp_path))
    init = spec["initContainers"]
    assert [c["name"] for c in init] == ["db-upgrade", "models", "baselines"]
    assert init[1]["securityContext"] == init[0]["securityContext"]
    assert init[1]["securityContext"]["readOnlyRootFilesystem"] is True
    assert init[2]["securityContext"] == own
    for container in [init[0], spec["containers"][0]]:
        assert {"name": "ONNXMON_DEFAULTS__REPEATS", "value": "3"} in container["env"]
        assert {"name": "models-ro", "mountPath": "/models", "readOnly": True} in container["volumeMounts"]
    assert {"name": "models-ro", "configMap": {"name": "tiny-models"}} in spec["volumes"]


def test_extra_init_containers_alone_still_make_an_init_container_list(helm: str, tmp_path: Path) -> None:
    values = {"migrations": {"enabled": False}, "extraInitContainers": [{"name": "models", "image": "busybox"}]}
    assert [c["name"] for c in pod_spec(render(helm, values, tmp_path))["initContainers"]] == ["models"]


def test_common_labels_go_on_every_object_and_pod_labels_only_on_pods(helm: str, tmp_path: Path) -> None:
    values = {
        "commonLabels": {"team": "ml-platform"},
        "podLabels": {"sidecar.istio.io/inject": "false"},
        "networkPolicy": ON,
        "podDisruptionBudget": ON,
        "monitoring": {"serviceMonitor": ON, "prometheusRule": ON},
    }
    objects = render(helm, values, tmp_path)
    assert {"NetworkPolicy", "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule"} <= kinds(objects)
    for obj in objects:
        assert obj["metadata"]["labels"]["team"] == "ml-platform", obj["kind"]
        assert "sidecar.istio.io/inject" not in obj["metadata"]["labels"], obj["kind"]
    pod_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["team"] == "ml-platform" and pod_labels["sidecar.istio.io/inject"] == "false"
    # selectors never carry them (a label change would orphan the pods)
    assert one(objects, "Deployment")["spec"]["selector"]["matchLabels"].keys() == {
        "app.kubernetes.io/name",
        "app.kubernetes.io/instance",
    }


# --------------------------------------------------------------------------- NetworkPolicy, PDB


def test_network_policy_and_disruption_budget_are_off_by_default(helm: str, tmp_path: Path) -> None:
    assert not {"NetworkPolicy", "PodDisruptionBudget"} & kinds(render(helm, {}, tmp_path))


def test_network_policy_opens_only_the_http_port_and_limits_egress_when_asked(helm: str, tmp_path: Path) -> None:
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    database = {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": [{"port": 5432, "protocol": "TCP"}]}
    objects = render(helm, {"networkPolicy": {"enabled": True, "ingressFrom": peers}}, tmp_path)
    policy = one(objects, "NetworkPolicy")["spec"]
    pod_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}], "from": peers}]
    assert policy["policyTypes"] == ["Ingress"] and "egress" not in policy
    values = {"networkPolicy": {"enabled": True, "restrictEgress": True, "egress": [database]}}
    limited = one(render(helm, values, tmp_path), "NetworkPolicy")["spec"]
    assert limited["policyTypes"] == ["Ingress", "Egress"]
    assert limited["egress"][0]["ports"] == [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
    assert limited["egress"][1:] == [database]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, {"maxUnavailable": 1}),
        ({"minAvailable": "50%"}, {"minAvailable": "50%"}),
        ({"maxUnavailable": 0}, {"maxUnavailable": 0}),
    ],
)
def test_disruption_budget_selects_the_pods_with_max_unavailable_or_min_available(
    helm: str, tmp_path: Path, values: dict[str, Any], expected: dict[str, Any]
) -> None:
    objects = render(helm, {"podDisruptionBudget": {"enabled": True, **values}}, tmp_path)
    budget = one(objects, "PodDisruptionBudget")["spec"]
    selector = budget.pop("selector")["matchLabels"]
    assert budget == expected
    assert selector.items() <= one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"].items()


# --------------------------------------------------------------------------- dashboard, database URL


@pytest.mark.parametrize(("shown", "hide"), [(False, 2), (True, 0)])
def test_the_cluster_variable_is_hidden_unless_the_platform_is_multi_cluster(
    helm: str, tmp_path: Path, shown: bool, hide: int
) -> None:
    values = {"monitoring": {"grafanaDashboard": {"showMultiCluster": shown}}}
    variables = {v["name"]: v for v in dashboard_of(render(helm, values, tmp_path))["templating"]["list"]}
    assert variables["cluster"]["hide"] == hide
    assert variables["job"]["hide"] == 0


def test_the_mounted_database_url_file_is_what_the_config_loader_reads(helm: str, tmp_path: Path) -> None:
    """store.url_file (wt-16b's key) read from the path the chart mounts the Secret at."""
    from monitor.config.schema import StoreConfig

    if "url_file" not in StoreConfig.model_fields:
        pytest.skip("store.url_file is not in the config schema on this branch (issue 16, CLI part)")
    objects = render(helm, {"database": {"url": "postgresql+psycopg://u:pw@db/x"}}, tmp_path)
    env = {e["name"]: e.get("value") for e in pod_spec(objects)["containers"][0]["env"]}
    configmap = next(o for o in objects if o["kind"] == "ConfigMap" and "onnxmon.yaml" in o["data"])
    config = tmp_path / "onnxmon.yaml"
    config.write_text(configmap["data"]["onnxmon.yaml"], encoding="utf-8")
    secret = tmp_path / "database-url"
    secret.write_text("sqlite:///" + str(tmp_path / "x.db") + "\n", encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from monitor.cli import main; sys.exit(main(sys.argv[1:]))",
            "config",
            "validate",
            "-c",
            str(config),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "ONNXMON_STORE__URL_FILE": str(secret)},
        check=False,
    )
    assert env["ONNXMON_STORE__URL_FILE"] == "/var/run/secrets/onnxmon-database/database-url"
    assert done.returncode == 0, done.stdout + done.stderr
