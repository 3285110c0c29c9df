"""The chart in a platform team's cluster (issue 25), part 2: how it is reached and scraped, and where
its objects live. Ingress, Service labels and target port, ServiceMonitor scheme/TLS/target labels,
the PodMonitor alternative, custom alert rules, namespaceOverride, commonAnnotations, extra
containers and envFrom, the DaemonSet NOTES, and a description for every value issue 25 added.

Plain ``helm template`` (NOTES: ``helm install --dry-run=client``), validated with kubernetes-validate
(strict) and the Prometheus Operator CRD schemas.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.chart import CHART, helm_binary, render, run_helm, validate_objects

pytestmark = pytest.mark.helm

ON = {"enabled": True}
DAEMONSET = {"mode": "daemonset", "existingSecret": "onnxmon-credentials", "persistence": {"existingClaim": "m"}}
# the values issue 25 added, each of which must say what it does in values.schema.json
NEW_VALUES = [
    "global",
    "global.imageRegistry",
    "image.registry",
    "namespaceOverride",
    "commonAnnotations",
    "gpu.shared",
    "gpu.runtimeClassName",
    "gpu.resourceName",
    "podSecurityContext.runAsUser",
    "podSecurityContext.runAsGroup",
    "podSecurityContext.fsGroup",
    "securityContext",
    "terminationGracePeriodSeconds",
    "updateStrategy",
    "updateStrategy.type",
    "updateStrategy.rollingUpdate",
    "updateStrategy.rollingUpdate.maxUnavailable",
    "updateStrategy.rollingUpdate.maxSurge",
    "service.targetPort",
    "service.labels",
    "ingress",
    "ingress.enabled",
    "ingress.className",
    "ingress.annotations",
    "ingress.labels",
    "ingress.hosts",
    "ingress.tls",
    "monitoring.serviceMonitor.scheme",
    "monitoring.serviceMonitor.tlsConfig",
    "monitoring.serviceMonitor.targetLabels",
    "monitoring.podMonitor",
    *(
        f"monitoring.podMonitor.{key}"
        for key in ("enabled", "labels", "namespace", "interval", "scrapeTimeout", "honorLabels", "nodeRelabeling")
    ),
    *(f"monitoring.podMonitor.{key}" for key in ("relabelings", "metricRelabelings", "scheme", "tlsConfig")),
    "monitoring.podMonitor.podTargetLabels",
    "monitoring.prometheusRule.rules",
    "topologySpreadConstraints",
    "extraContainers",
    "extraArgs",
    "envFrom",
]


@pytest.fixture(scope="module")
def helm() -> str:
    return helm_binary()


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, [o["kind"] for o in objects]
    return found[0]


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] in ("Deployment", "DaemonSet")]
    assert len(found) == 1
    spec: dict[str, Any] = found[0]["spec"]["template"]["spec"]
    return spec


def test_an_ingress_sends_every_host_and_path_to_the_services_http_port(helm: str, tmp_path: Path) -> None:
    values = {
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "annotations": {"nginx.ingress.kubernetes.io/auth-url": "https://auth.example/check"},
            "hosts": [
                {"host": "onnxmon.example", "paths": [{"path": "/", "pathType": "Prefix"}]},
                {"host": "gpu.example", "paths": [{"path": "/onnxmon", "pathType": "ImplementationSpecific"}]},
            ],
            "tls": [{"secretName": "onnxmon-tls", "hosts": ["onnxmon.example"]}],
        }
    }
    objects = render(helm, values, tmp_path)
    validate_objects(objects)
    ingress = one(objects, "Ingress")
    service = one(objects, "Service")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["metadata"]["annotations"] == values["ingress"]["annotations"]
    assert ingress["spec"]["tls"] == values["ingress"]["tls"]
    rules = {r["host"]: r["http"]["paths"] for r in ingress["spec"]["rules"]}
    assert [p["path"] for p in rules["gpu.example"]] == ["/onnxmon"]
    backend = rules["onnxmon.example"][0]["backend"]["service"]
    assert backend == {"name": service["metadata"]["name"], "port": {"name": "http"}}
    assert [p["name"] for p in service["spec"]["ports"]] == ["http"]
    assert "Ingress" not in {o["kind"] for o in render(helm, {}, tmp_path)}


def test_an_ingress_without_a_host_matches_every_host(helm: str, tmp_path: Path) -> None:
    objects = render(helm, {"ingress": {"enabled": True}}, tmp_path)
    validate_objects(objects)
    assert [set(rule) for rule in one(objects, "Ingress")["spec"]["rules"]] == [{"http"}]


def test_service_labels_and_target_port_reach_the_service_monitor_and_network_policy(helm: str, tmp_path: Path) -> None:
    proxy = {"name": "auth-proxy", "image": "quay.io/brancz/kube-rbac-proxy:v0.19.1"}
    proxy |= {"ports": [{"name": "https", "containerPort": 8443}], "args": ["--upstream=http://127.0.0.1:8080/"]}
    values = {
        "service": {"labels": {"team": "ml-platform"}, "targetPort": "https"},
        "extraContainers": [proxy],
        "envFrom": [{"secretRef": {"name": "onnxmon-overrides"}}],
        "networkPolicy": ON,
        "monitoring": {
            "serviceMonitor": {
                "enabled": True,
                "scheme": "https",
                "tlsConfig": {"serverName": "onnxmon", "ca": {"secret": {"name": "onnxmon-ca", "key": "ca.crt"}}},
                "targetLabels": ["team"],
            }
        },
    }
    objects = render(helm, values, tmp_path)
    validate_objects(objects)
    service = one(objects, "Service")
    assert service["metadata"]["labels"]["team"] == "ml-platform"
    assert service["spec"]["ports"][0]["targetPort"] == "https"
    monitor = one(objects, "ServiceMonitor")
    endpoint = monitor["spec"]["endpoints"][0]
    assert (endpoint["scheme"], endpoint["tlsConfig"]["serverName"]) == ("https", "onnxmon")
    assert monitor["spec"]["targetLabels"] == ["team"]
    assert one(objects, "NetworkPolicy")["spec"]["ingress"][0]["ports"] == [{"port": "https", "protocol": "TCP"}]
    spec = pod_spec(objects)
    assert [c["name"] for c in spec["containers"]] == ["onnxmon", "auth-proxy"]
    assert spec["containers"][1]["securityContext"]["readOnlyRootFilesystem"] is True
    for container in [*spec["initContainers"], spec["containers"][0]]:
        assert container["envFrom"] == values["envFrom"]
    assert "envFrom" not in spec["containers"][1]


def test_a_pod_monitor_scrapes_the_pods_under_the_services_job(helm: str, tmp_path: Path) -> None:
    values = {
        "monitoring": {
            "podMonitor": {
                "enabled": True,
                "labels": {"release": "kube-prometheus-stack"},
                "relabelings": [{"targetLabel": "cluster", "replacement": "gpu-eu-1", "action": "replace"}],
                "podTargetLabels": ["team"],
                "scheme": "http",
            },
            "prometheusRule": ON,
        }
    }
    objects = render(helm, values, tmp_path)
    validate_objects(objects)
    monitor = one(objects, "PodMonitor")
    assert "ServiceMonitor" not in {o["kind"] for o in objects}
    pod_labels = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["gpu-monitoring"]
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == ("http", "/metrics", "http")
    job, node, cluster = endpoint["relabelings"]
    # the alerts select job="<the Service's name>": the PodMonitor's targets get that job too
    assert job == {
        "targetLabel": "job",
        "replacement": one(objects, "Service")["metadata"]["name"],
        "action": "replace",
    }
    assert 'job="onnxmon"' in str(one(objects, "PrometheusRule")["spec"]["groups"])
    assert node["sourceLabels"] == ["__meta_kubernetes_pod_node_name"] and cluster["replacement"] == "gpu-eu-1"
    assert monitor["spec"]["podTargetLabels"] == ["team"]


def test_a_pod_monitor_follows_a_numeric_target_port(helm: str, tmp_path: Path) -> None:
    values = {"service": {"targetPort": 8443}, "monitoring": {"podMonitor": ON}}
    objects = render(helm, values, tmp_path)
    validate_objects(objects)
    assert one(objects, "PodMonitor")["spec"]["podMetricsEndpoints"][0]["portNumber"] == 8443


def test_a_service_monitor_and_a_pod_monitor_together_are_refused(helm: str, tmp_path: Path) -> None:
    done = run_helm(helm, {"monitoring": {"serviceMonitor": ON, "podMonitor": ON}}, tmp=tmp_path)
    assert done.returncode != 0 and "scraped twice" in done.stderr, done.stderr


def test_custom_rules_go_in_a_group_of_their_own_with_the_routing_labels(helm: str, tmp_path: Path) -> None:
    alert = {"alert": "ResnetSlow", "expr": 'onnxmon_run_duration_seconds{model="resnet50"} > 60', "for": "30m"}
    record = {"record": "onnxmon:fails:rate1h", "expr": "sum(rate(onnxmon_runs_total[1h]))"}
    values = {"prometheusRule": {"enabled": True, "additionalLabels": {"team": "ml"}, "rules": [alert, record]}}
    rule = one(render(helm, {"monitoring": values}, tmp_path), "PrometheusRule")
    validate_objects([rule])
    groups = {g["name"]: g["rules"] for g in rule["spec"]["groups"]}
    assert groups["onnxmon.custom"] == [{**alert, "labels": {"team": "ml"}}, record]
    assert "onnxmon" in groups


def test_a_custom_rule_named_like_a_built_in_alert_is_refused(helm: str, tmp_path: Path) -> None:
    values = {"monitoring": {"prometheusRule": {"enabled": True, "rules": [{"alert": "OnnxmonDown", "expr": "1"}]}}}
    done = run_helm(helm, values, tmp=tmp_path)
    assert done.returncode != 0 and 'alert "OnnxmonDown" is one of onnxmon' in done.stderr, done.stderr


EVERYTHING = {
    "monitoring": {"serviceMonitor": ON, "prometheusRule": ON},
    "ingress": ON,
    "networkPolicy": ON,
    "podDisruptionBudget": ON,
    "api": {"token": "t0ken"},
    "spool": {"persistence": ON},
}


def test_namespace_override_moves_every_namespaced_object_and_what_selects_them(helm: str, tmp_path: Path) -> None:
    objects = render(helm, {**EVERYTHING, "namespaceOverride": "precision"}, tmp_path)
    validate_objects(objects)
    assert {o["metadata"]["namespace"] for o in objects} == {"precision"}, "every object: none left in the release's"
    assert one(objects, "ServiceMonitor")["spec"]["namespaceSelector"]["matchNames"] == ["precision"]
    default = render(helm, EVERYTHING, tmp_path)
    assert {o["metadata"]["namespace"] for o in default} == {"gpu-monitoring"}


def test_common_annotations_go_on_every_object_and_an_objects_own_win(helm: str, tmp_path: Path) -> None:
    common = {"owner.example/team": "ml-platform", "argocd.argoproj.io/sync-wave": "1"}
    values = {
        **EVERYTHING,
        "commonAnnotations": common,
        "service": {"annotations": {"argocd.argoproj.io/sync-wave": "2"}},
    }
    objects = render(helm, values, tmp_path)
    validate_objects(objects)
    for obj in objects:
        annotations = obj["metadata"]["annotations"]
        assert annotations["owner.example/team"] == "ml-platform", obj["kind"]
        wave = "2" if obj["kind"] == "Service" else "1"
        assert annotations["argocd.argoproj.io/sync-wave"] == wave, obj["kind"]
    claims = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert len(claims) == 2 and all(c["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep" for c in claims)
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert "owner.example/team" not in pod, "pods carry podAnnotations only"


def notes(helm: str, tmp_path: Path, values: dict[str, Any]) -> str:
    done = run_helm(helm, values, tmp=tmp_path)  # the values file it writes
    assert done.returncode == 0, done.stderr
    command = [helm, "install", "onnxmon", str(CHART), "-n", "gpu-monitoring", "--dry-run=client"]
    install = subprocess.run(
        [*command, "-f", str(tmp_path / "values.yaml")], capture_output=True, text=True, timeout=60
    )
    assert install.returncode == 0, install.stderr
    return install.stdout[install.stdout.index("NOTES:") :]


def test_daemonset_notes_say_how_to_reach_one_nodes_pod_and_the_status_page(helm: str, tmp_path: Path) -> None:
    text = notes(helm, tmp_path, {**DAEMONSET, "ingress": {"enabled": True, "hosts": [{"host": "onnxmon.example"}]}})
    assert "--field-selector spec.nodeName=$NODE" in text
    assert "-l app.kubernetes.io/name=onnxmon,app.kubernetes.io/instance=onnxmon" in text
    assert "port-forward $POD 8080:http" in text
    assert "port-forward svc/onnxmon 8080:8080" in text and "any pod serves them" in text
    assert "http://onnxmon.example/" in text
    single = notes(helm, tmp_path, {})
    assert "spec.nodeName" not in single and "port-forward svc/onnxmon" in single


def test_shared_gpu_notes_say_no_gpu_is_requested(helm: str, tmp_path: Path) -> None:
    text = notes(helm, tmp_path, {"gpu": {"shared": True}})
    assert "no pod requests a GPU" in text and "runtimeClassName nvidia" in text and "requests 1" not in text


@pytest.mark.parametrize("values", [{}, {"gpu": {"shared": True}}, DAEMONSET], ids=["exclusive", "shared", "daemonset"])
def test_gpu_notes_check_the_gpu_through_series_every_pod_exports(
    helm: str, tmp_path: Path, values: dict[str, Any]
) -> None:
    """No log line names the provider (the check line carries reason codes only): the NOTES read the
    series that say it, each one the metrics reference documents."""
    text = notes(helm, tmp_path, values)
    assert "grep -i provider" not in text
    command = next(line for line in text.splitlines() if "/metrics | grep" in line)
    assert "http://127.0.0.1:8080/metrics" in command
    metrics_doc = (CHART.parent.parent / "docs" / "metrics.md").read_text(encoding="utf-8")
    for name in ("runtime_info", "provider_fallback", "worker_gpu_memory_bytes"):
        assert name in command and f"| `onnxmon_{name}` |" in metrics_doc, name
    assert "/metrics | grep" not in notes(helm, tmp_path, {"gpu": {"enabled": False}})


def test_an_objects_own_labels_win_over_common_labels_and_each_key_is_written_once(helm: str, tmp_path: Path) -> None:
    """Appended one after the other, commonLabels and service.labels naming one key wrote it twice
    (render() refuses a duplicate key, as an API server's strict field validation does)."""
    on = {"enabled": True, "labels": {"team": "monitors"}}
    values = {
        "commonLabels": {"team": "ml", "tier": "observability"},
        "podLabels": {"team": "pods"},
        "service": {"labels": {"team": "serving"}},
        "ingress": {"enabled": True, "labels": {"team": "edge"}},
        "monitoring": {"serviceMonitor": on, "prometheusRule": on, "grafanaDashboard": {"labels": {"team": "dash"}}},
    }
    objects = render(helm, values, tmp_path)
    validate_objects(objects)
    own = {"Service": "serving", "Ingress": "edge", "ServiceMonitor": "monitors", "PrometheusRule": "monitors"}
    for obj in objects:
        labels = obj["metadata"]["labels"]
        dashboard = obj["metadata"]["name"].endswith("-dashboard")
        assert labels["team"] == ("dash" if dashboard else own.get(obj["kind"], "ml")), obj["kind"]
        assert labels["tier"] == "observability" and labels["app.kubernetes.io/part-of"] == "onnxmon", obj["kind"]
    template = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["metadata"]
    pod = template["labels"]
    assert (pod["team"], pod["tier"], pod["app.kubernetes.io/component"]) == ("pods", "observability", "monitor")
    checksum = render(helm, {"podAnnotations": {"checksum/config": "mine", "a": "b"}}, tmp_path)
    annotations = next(o for o in checksum if o["kind"] == "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert len(annotations["checksum/config"]) == 64 and annotations["a"] == "b", "the chart's checksum, once"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"commonLabels": {"app.kubernetes.io/part-of": "platform"}}, "commonLabels sets app.kubernetes.io/part-of"),
        ({"podLabels": {"app.kubernetes.io/component": "x"}}, "podLabels sets app.kubernetes.io/component"),
        ({"service": {"labels": {"app.kubernetes.io/name": "x"}}}, "service.labels sets app.kubernetes.io/name"),
        (
            {"monitoring": {"podMonitor": {"labels": {"app.kubernetes.io/instance": "x"}}}},
            "monitoring.podMonitor.labels sets app.kubernetes.io/instance",
        ),
    ],
    ids=["common-part-of", "pod-component", "service-name", "pod-monitor-instance"],
)
def test_a_label_the_chart_sets_itself_is_refused_with_its_value(
    helm: str, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    """A podLabels component would leave the PodMonitor selecting no pod; others would be written twice."""
    done = run_helm(helm, values, tmp=tmp_path)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def schema_node(schema: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = schema
    for part in dotted.split("."):
        node = node["properties"][part]
    return node


@pytest.mark.parametrize("dotted", NEW_VALUES)
def test_every_value_issue_25_added_is_in_the_strict_schema_with_a_description(dotted: str) -> None:
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    node = schema_node(schema, dotted)
    assert len(node.get("description", "")) > 10, f"{dotted}: no description in values.schema.json"
    parent = schema_node(schema, dotted.rpartition(".")[0]) if "." in dotted else schema
    # strict everywhere but `global`, which carries other subcharts' values too
    assert parent.get("additionalProperties") is (dotted.startswith("global.")), dotted


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"ingress": {"hots": []}}, "hots"),
        ({"ingress": {"hosts": [{"host": "x", "paths": [{"path": "no-slash"}]}]}}, "/ingress/hosts/0/paths/0/path"),
        (
            {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "ten"}}},
            "/updateStrategy/rollingUpdate/maxUnavailable",
        ),
        ({"podSecurityContext": {"runAsUser": "1000"}}, "/podSecurityContext/runAsUser"),
        ({"monitoring": {"serviceMonitor": {"scheme": "ftp"}}}, "/monitoring/serviceMonitor/scheme"),
        ({"monitoring": {"podMonitor": {"targetLabels": []}}}, "targetLabels"),
        ({"monitoring": {"prometheusRule": {"rules": [{"expr": "1"}]}}}, "/monitoring/prometheusRule/rules/0"),
        ({"extraArgs": "--log-level debug"}, "/extraArgs"),
        ({"config": {"logging": {"format": "xml"}}}, "/config/logging/format"),
        ({"image": {"registy": "x"}}, "registy"),
        (
            {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "150%"}}},
            "/updateStrategy/rollingUpdate/maxUnavailable",
        ),
        ({"podDisruptionBudget": {"maxUnavailable": "101%"}}, "/podDisruptionBudget/maxUnavailable"),
        ({"config": {"daemon": {"gpu_memory_limit": "2Gi"}}}, "/config/daemon/gpu_memory_limit"),
        ({"config": {"daemon": {"gpu_memory_limit": 0}}}, "/config/daemon/gpu_memory_limit"),
        ({"config": {"daemon": {"gpu_arena_extend_strategy": "kSame"}}}, "/config/daemon/gpu_arena_extend_strategy"),
        ({"config": {"daemon": {"gpu_arena_shrinkage": "yes"}}}, "/config/daemon/gpu_arena_shrinkage"),
    ],
)
def test_the_schema_refuses_misspelt_or_impossible_new_values(
    helm: str, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    done = run_helm(helm, values, tmp=tmp_path)
    assert done.returncode != 0 and message in done.stderr, done.stderr
