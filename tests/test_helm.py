"""The Helm chart renders valid, restricted, correctly wired Kubernetes objects.

Every case runs the real ``helm`` (``.tools/bin/helm`` from ``scripts/fetch-helm``, or one on
PATH) and validates what it renders with ``kubernetes-validate`` against a current Kubernetes
schema; the Prometheus Operator kinds, which it does not know, against the operator's own CRD
schemas (tests/fixtures/crds, unknown fields refused) and structurally here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from tests.chart import (
    CHART,
    KUBERNETES_VERSION,
    MONITORING_API,
    ROOT,
    helm_binary,
    render,
    run_helm,
    validate_custom_resource,
)

MONITORING = {"monitoring": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}}
# the `onnxmon` console script, run in a fresh process
ONNXMON_CLI = "import sys; from monitor.cli import main; sys.exit(main(sys.argv[1:]))"

DATABASE_URL = "postgresql+psycopg://onnxmon:secret@postgres:5432/onnxmon"
GPU_NODES = {
    "nodeSelector": {"nvidia.com/gpu.present": "true"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
}
MODELS = {
    "benchsets": [{"name": "resnet-bench", "npz": ["/var/lib/onnxmon/benchsets/resnet.npz"]}],
    "models": [
        {
            "name": "resnet50",
            "path": "/var/lib/onnxmon/models/resnet50.onnx",
            "benchset": "resnet-bench",
            "providers": ["CUDAExecutionProvider", "CPUExecutionProvider"],
            "schedule": {"interval": "5m"},
            "timeout": "2m",
        }
    ],
}
SCENARIOS: dict[str, dict[str, Any]] = {
    "deployment": {},
    "deployment-with-models": {"config": MODELS, "api": {"token": "t0ken"}},
    "sharded": {
        "replicas": 3,
        "sharding": {"enabled": True},
        "database": {"url": DATABASE_URL},
        "persistence": {"accessModes": ["ReadWriteMany"]},
    },
    "daemonset": {
        "mode": "daemonset",
        "existingSecret": "onnxmon-credentials",
        "persistence": {"existingClaim": "onnx-models"},
        "config": {"daemon": {"baseline_scope": "node"}},
        **GPU_NODES,
    },
    "existing-secret-and-claim": {
        "existingSecret": "onnxmon-credentials",
        "existingSecretKeys": {"databaseUrl": "", "apiToken": "token"},
        "persistence": {"existingClaim": "onnx-models"},
    },
    "cpu": {"valuesFile": "values-cpu.yaml"},
    # what a platform team next to kube-prometheus-stack sets (docs/adopting.md)
    "kube-prometheus-stack": {"valuesFile": "values-kube-prometheus-stack.yaml"},
    # issue 25: OpenShift's restricted-v2 SCC (no fixed UID), a fleet whose GPUs serving holds
    "openshift": {"valuesFile": "values-openshift.yaml"},
    "shared-gpu": {"valuesFile": "values-shared-gpu.yaml"},
}
VALUES_FILES = sorted(path.name for path in CHART.glob("values-*.yaml"))


@pytest.fixture(scope="session")
def helm() -> str:
    """The helm binary: the pinned one from scripts/fetch-helm, else one on PATH."""
    return helm_binary()


def with_monitoring(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the ServiceMonitor and the PrometheusRule enabled (their other values kept)."""
    monitoring = {key: dict(value) for key, value in values.get("monitoring", {}).items()}
    for kind in ("serviceMonitor", "prometheusRule"):
        monitoring[kind] = {**monitoring.get(kind, {}), "enabled": True}
    return {**values, "monitoring": monitoring}


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {[o['kind'] for o in objects]}"
    return found[0]


def workload(objects: list[dict[str, Any]]) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] in ("Deployment", "DaemonSet")]
    assert len(found) == 1
    return found[0]


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = workload(objects)["spec"]["template"]["spec"]
    return spec


def monitor_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = pod_spec(objects)["containers"][0]
    return container


def rendered_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    configmap = next(o for o in objects if o["kind"] == "ConfigMap" and "onnxmon.yaml" in o["data"])
    config: dict[str, Any] = yaml.safe_load(configmap["data"]["onnxmon.yaml"])
    return config


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container["env"]}


def check_monitoring_object(obj: dict[str, Any], service: dict[str, Any]) -> None:
    """What kubernetes-validate cannot: the operator's CRD schema, and the wiring to our Service."""
    validate_custom_resource(obj)
    assert obj["metadata"]["name"]
    if obj["kind"] == "ServiceMonitor":
        selector = obj["spec"]["selector"]["matchLabels"]
        assert selector.items() <= service["metadata"]["labels"].items(), "ServiceMonitor does not select the Service"
        assert [e["port"] for e in obj["spec"]["endpoints"]] == ["http"]
        assert all(e["path"] == "/metrics" for e in obj["spec"]["endpoints"])
    elif obj["kind"] == "PrometheusRule":
        assert obj["spec"]["groups"], "PrometheusRule without groups"
        for group in obj["spec"]["groups"]:
            assert isinstance(group["name"], str) and group["rules"]
            for rule in group["rules"]:
                assert ("alert" in rule) != ("record" in rule), rule
                assert isinstance(rule["expr"], str | int | float)
                assert set(rule) <= {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
    else:
        raise AssertionError(f"unexpected kind {obj['kind']}")


@pytest.mark.helm
@pytest.mark.parametrize("values_file", [None, *VALUES_FILES])
def test_chart_passes_helm_lint_strict(helm: str, values_file: str | None) -> None:
    args = ["-f", str(CHART / values_file)] if values_file else []
    done = subprocess.run([helm, "lint", "--strict", str(CHART), *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.helm
@pytest.mark.parametrize("monitoring", [False, True], ids=["defaults", "operator-objects"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_rendered_object_is_valid_kubernetes(helm: str, tmp_path: Path, scenario: str, monitoring: bool) -> None:
    values = with_monitoring(SCENARIOS[scenario]) if monitoring else SCENARIOS[scenario]
    objects = render(helm, values, tmp_path)
    service = one(objects, "Service")
    if monitoring:
        assert {"ServiceMonitor", "PrometheusRule"} <= {o["kind"] for o in objects}
    for obj in objects:
        if obj["apiVersion"] == MONITORING_API:
            check_monitoring_object(obj, service)
            continue
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.helm
def test_validation_would_catch_a_misspelt_field(helm: str, tmp_path: Path) -> None:
    deployment = workload(render(helm, {}, tmp_path))
    deployment["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFilesytem"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


@pytest.mark.helm
def test_dashboard_configmap_is_labelled_for_the_grafana_sidecar(helm: str, tmp_path: Path) -> None:
    dashboard = next(o for o in render(helm, {}, tmp_path) if o["metadata"]["name"].endswith("-dashboard"))
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    # the file as it is: the default runbook base is the file's own, the Cluster variable stays hidden
    assert json.loads(dashboard["data"]["onnxmon.json"]) == json.loads((CHART / "files" / "onnxmon.json").read_bytes())


@pytest.mark.helm
@pytest.mark.parametrize("scenario", ["deployment", "daemonset"])
def test_pods_run_under_the_restricted_security_profile(helm: str, tmp_path: Path, scenario: str) -> None:
    spec = pod_spec(render(helm, SCENARIOS[scenario], tmp_path))
    pod = spec["securityContext"]
    assert (pod["runAsNonRoot"], pod["runAsUser"], pod["fsGroup"]) == (True, 10001, 10001)
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in spec["containers"] + spec["initContainers"]:
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True
        assert security["capabilities"] == {"drop": ["ALL"]}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert {mounts["/tmp"], mounts["/home/onnxmon"]} == {"tmp", "home"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes["tmp"] and "emptyDir" in volumes["home"]
    assert env_of(spec["containers"][0])["XDG_CACHE_HOME"]["value"].startswith("/home/onnxmon/")


@pytest.mark.helm
def test_gpu_is_requested_by_default_and_not_by_the_cpu_variant(helm: str, tmp_path: Path) -> None:
    gpu = monitor_container(render(helm, {"gpu": {"count": 2}}, tmp_path))
    cpu = monitor_container(render(helm, SCENARIOS["cpu"], tmp_path))
    assert gpu["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert "nvidia.com/gpu" not in cpu["resources"].get("limits", {})
    assert cpu["image"].endswith("-cpu")


@pytest.mark.helm
def test_probes_use_the_health_endpoints_on_the_http_port(helm: str, tmp_path: Path) -> None:
    container = monitor_container(render(helm, {"api": {"port": 9090}}, tmp_path))
    assert container["ports"] == [{"name": "http", "containerPort": 9090, "protocol": "TCP"}]
    probes = {name: container[name]["httpGet"] for name in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"] == {"path": "/healthz", "port": "http"}
    assert probes["readinessProbe"] == {"path": "/readyz", "port": "http"}
    assert probes["startupProbe"]["path"] == "/healthz"


@pytest.mark.helm
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_object_carries_the_standard_labels(helm: str, tmp_path: Path, scenario: str) -> None:
    for obj in render(helm, with_monitoring(SCENARIOS[scenario]), tmp_path):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "onnxmon", obj["kind"]
        assert labels["app.kubernetes.io/instance"] == "onnxmon"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert "app.kubernetes.io/version" in labels


@pytest.mark.helm
def test_config_checksum_changes_with_the_config_and_only_then(helm: str, tmp_path: Path) -> None:
    def checksum(values: dict[str, Any]) -> str:
        annotations = workload(render(helm, values, tmp_path))["spec"]["template"]["metadata"]["annotations"]
        return str(annotations["checksum/config"])

    base = checksum({})
    assert len(base) == 64
    assert checksum({"resources": {"limits": {"memory": "2Gi"}}}) == base
    assert checksum({"config": {"defaults": {"schedule": {"interval": "30m"}}}}) != base


@pytest.mark.helm
def test_init_container_migrates_the_database_with_the_same_config(helm: str, tmp_path: Path) -> None:
    spec = pod_spec(render(helm, SCENARIOS["sharded"], tmp_path))
    init = spec["initContainers"][0]
    main = spec["containers"][0]
    assert [*init["command"], *init["args"]] == ["onnxmon", "db", "upgrade", "-c", "/etc/onnxmon/onnxmon.yaml"]
    assert [*main["command"], *main["args"]] == ["onnxmon", "serve", "-c", "/etc/onnxmon/onnxmon.yaml"]
    assert init["env"] == main["env"] and init["volumeMounts"] == main["volumeMounts"]
    assert "nvidia.com/gpu" not in init["resources"].get("limits", {})


@pytest.mark.helm
def test_pods_learn_their_node_name_and_namespace_from_the_downward_api(helm: str, tmp_path: Path) -> None:
    digest = "sha256:" + "ab" * 32
    env = env_of(monitor_container(render(helm, {"image": {"digest": digest}}, tmp_path)))
    assert env["ONNXMON_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["ONNXMON_IMAGE_DIGEST"]["value"] == digest


@pytest.mark.helm
@pytest.mark.parametrize(
    ("scenario", "secret", "url_key", "token_key"),
    [
        ("deployment", None, None, None),
        ("deployment-with-models", "onnxmon", None, "api-token"),
        ("sharded", "onnxmon", "database-url", None),
        ("daemonset", "onnxmon-credentials", "database-url", "api-token"),
        ("existing-secret-and-claim", "onnxmon-credentials", None, "token"),
    ],
)
def test_credentials_come_from_the_secret_never_the_configmap(
    helm: str, tmp_path: Path, scenario: str, secret: str | None, url_key: str | None, token_key: str | None
) -> None:
    objects = render(helm, SCENARIOS[scenario], tmp_path)
    spec = pod_spec(objects)
    env = env_of(spec["containers"][0])
    config = rendered_config(objects)
    assert "token" not in config["api"]
    assert "ONNXMON_STORE__URL" not in env, "the password must not travel in an environment variable"
    if url_key:
        # store.url_file: the URL is a file mounted from the Secret
        assert env["ONNXMON_STORE__URL_FILE"] == {
            "name": "ONNXMON_STORE__URL_FILE",
            "value": "/var/run/secrets/onnxmon-database/database-url",
        }
        volume = next(v for v in spec["volumes"] if v["name"] == "database-url")["secret"]
        assert (volume["secretName"], volume["items"]) == (secret, [{"key": url_key, "path": "database-url"}])
        mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "database-url")
        assert mount == {"name": "database-url", "mountPath": "/var/run/secrets/onnxmon-database", "readOnly": True}
        assert "url" not in config["store"]
    else:
        assert "ONNXMON_STORE__URL_FILE" not in env
        assert config["store"]["url"] == "sqlite:////var/lib/onnxmon/onnxmon.db"
    if token_key:
        assert env["ONNXMON_API__TOKEN_FILE"]["value"] == "/var/run/secrets/onnxmon/api-token"
        volume = next(v for v in spec["volumes"] if v["name"] == "api-token")["secret"]
        assert (volume["secretName"], volume["items"]) == (secret, [{"key": token_key, "path": "api-token"}])
    else:
        assert "ONNXMON_API__TOKEN_FILE" not in env
    chart_secrets = [o for o in objects if o["kind"] == "Secret"]
    assert len(chart_secrets) == (1 if secret == "onnxmon" else 0)


@pytest.mark.helm
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"config": {"api": {"token": "t0ken"}}}, "config.api.token does not reach the daemon"),
        ({"existingSecret": "creds", "api": {"token": "t0ken"}}, 'the daemon reads key "api-token" of Secret "creds"'),
        (
            {"existingSecret": "creds", "existingSecretKeys": {"apiToken": ""}, "api": {"token": "t0ken"}},
            'api.token is not used with existingSecret "creds", and existingSecretKeys.apiToken is empty',
        ),
    ],
)
def test_a_token_the_daemon_would_never_see_fails_the_render(
    helm: str, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    """Issue 42: the chart dropped these tokens in silence, and the API then refused every mutating call."""
    done = run_helm(helm, values, tmp=tmp_path)
    assert done.returncode != 0, "rendered a pod that never gets the token"
    assert message in done.stderr, done.stderr


@pytest.mark.helm
@pytest.mark.parametrize(
    ("scenario", "kind", "daemon_mode", "claim"),
    [
        ("deployment", "Deployment", "single", "onnxmon-data"),
        ("sharded", "Deployment", "sharded", "onnxmon-data"),
        ("daemonset", "DaemonSet", "daemonset", "onnx-models"),
    ],
)
def test_workload_kind_sets_the_daemon_mode(
    helm: str, tmp_path: Path, scenario: str, kind: str, daemon_mode: str, claim: str
) -> None:
    objects = render(helm, SCENARIOS[scenario], tmp_path)
    spec = pod_spec(objects)
    assert workload(objects)["kind"] == kind
    assert rendered_config(objects)["daemon"]["mode"] == daemon_mode
    assert rendered_config(objects)["api"]["host"] == "0.0.0.0"
    data = next(v for v in spec["volumes"] if v["name"] == "data")
    assert data["persistentVolumeClaim"]["claimName"] == claim
    if kind == "Deployment":
        assert workload(objects)["spec"]["strategy"] == {"type": "Recreate"}
    else:
        assert spec["nodeSelector"] == GPU_NODES["nodeSelector"]
        assert spec["tolerations"] == GPU_NODES["tolerations"]


@pytest.mark.helm
@pytest.mark.parametrize(
    "scenario",
    ["deployment-with-models", "daemonset", "sharded", "cpu", "kube-prometheus-stack", "openshift", "shared-gpu"],
)
def test_rendered_config_passes_onnxmon_config_validate(helm: str, tmp_path: Path, scenario: str) -> None:
    config = tmp_path / "onnxmon.yaml"
    config.write_text(yaml.safe_dump(rendered_config(render(helm, SCENARIOS[scenario], tmp_path))), encoding="utf-8")
    done = subprocess.run(
        # the models live on the release's volume, not here: the schema and cross-references only
        [sys.executable, "-c", ONNXMON_CLI, "config", "validate", "--no-files", "-c", str(config)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.helm
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicas": 2}, "/sharding/enabled"),
        ({"replicas": 0}, "/replicas"),
        ({"mode": "statefulset"}, "'deployment', 'daemonset'"),
        ({"api": {"port": 70000}}, "/api/port"),
        ({"service": {"port": 0}}, "/service/port"),
        ({"config": {"defaults": {"schedule": {"interval": 0}}}}, "/config/defaults/schedule/interval"),
        ({"config": {"defaults": {"schedule": {"interval": -5}}}}, "/config/defaults/schedule/interval"),
        ({"config": {"defaults": {"schedule": {"interval": "0m"}}}}, "/config/defaults/schedule/interval"),
        ({"config": {"daemon": {"baseline_scope": "cluster"}}}, "'shared', 'pool', 'node'"),
        ({"config": {"modles": []}}, "modles"),
        ({"image": {"digest": "latest"}}, "/image/digest"),
        # strict at every level: a misspelt key is refused, not ignored
        ({"commonLabel": {"team": "x"}}, "commonLabel"),
        ({"probes": {"startup": {"period": 5}}}, "period"),
        ({"service": {"portt": 80}}, "portt"),
        ({"monitoring": {"serviceMonitor": {"relabeling": []}}}, "relabeling"),
        ({"monitoring": {"prometheusRule": {"disabled": {"OnnxmonDwn": True}}}}, "OnnxmonDwn"),
        ({"monitoring": {"prometheusRule": {"overrides": {"OnnxmonDown": {"for": "5 minutes"}}}}}, "/for"),
        ({"monitoring": {"prometheusRule": {"overrides": {"OnnxmonDown": {"severty": "page"}}}}}, "severty"),
        ({"podDisruptionBudget": {"maxUnavailable": "half"}}, "/podDisruptionBudget/maxUnavailable"),
        ({"extraEnv": [{"value": "x"}]}, "name"),
        ({"resources": {"limit": {"memory": "1Gi"}}}, "limit"),
        ({"monitoring": {"prometheusRule": {"additionalLabels": {"team.example/owner": "ml"}}}}, "team.example/owner"),
        # ... the onnxmon config too, every level (keys generated from monitor/config)
        ({"config": {"store": {"urll": "sqlite://"}}}, "urll"),
        ({"config": {"models": [{**MODELS["models"][0], "benchmark": "x"}]}}, "benchmark"),
        ({"config": {"defaults": {"tolerance": {"topk": {"k": 5, "min_agreemnt": 0.9}}}}}, "min_agreemnt"),
        (
            {
                "config": {
                    "models": [{**MODELS["models"][0], "providers": [{"name": "CUDAExecutionProvider", "option": {}}]}]
                }
            },
            "option",
        ),
    ],
)
def test_schema_rejects_nonsense_with_the_offending_value(
    helm: str, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    done = run_helm(helm, values, tmp=tmp_path)
    assert done.returncode != 0
    assert "schema" in done.stderr and message in done.stderr, done.stderr


@pytest.mark.helm
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicas": 2}, "replicas=2 needs sharding.enabled=true"),
        ({"mode": "daemonset"}, "cannot share a SQLite file"),
        ({"replicas": 2, "sharding": {"enabled": True}, "database": {"url": DATABASE_URL}}, "ReadWriteMany"),
        ({"persistence": {"enabled": False}}, "nowhere to keep the SQLite file"),
        (
            {
                "mode": "daemonset",
                "database": {"url": DATABASE_URL},
                "persistence": {"existingClaim": "onnx-models"},
                "spool": {"persistence": {"enabled": True}},
            },
            "cannot share one spool claim",
        ),
    ],
)
def test_template_refuses_layouts_that_cannot_work(
    helm: str, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    done = run_helm(helm, values, "--skip-schema-validation", tmp=tmp_path)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr


@pytest.mark.helm
@pytest.mark.parametrize("persistent", [False, True])
def test_the_result_spool_has_a_volume_of_its_own(helm: str, tmp_path: Path, persistent: bool) -> None:
    """Issue 17: a full data volume (the SQLite file) must not take the spool with it."""
    objects = render(helm, {"spool": {"persistence": {"enabled": persistent}}}, tmp_path)
    volumes = {v["name"]: v for v in pod_spec(objects)["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in monitor_container(objects)["volumeMounts"]}
    assert mounts["spool"] == "/var/lib/onnxmon-spool" != mounts["data"]
    assert rendered_config(objects)["store"]["spool_dir"] == "/var/lib/onnxmon-spool"
    claims = {o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"}
    if persistent:
        claim = volumes["spool"]["persistentVolumeClaim"]["claimName"]
        assert claim in claims and claim != volumes["data"]["persistentVolumeClaim"]["claimName"]
    else:
        assert volumes["spool"]["emptyDir"] == {"sizeLimit": "1Gi"}
        assert len(claims) == 1, "only the data claim"


@pytest.mark.process
def test_chart_copies_of_alerts_and_dashboard_match_the_originals() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sync-chart-files"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_every_example_values_file_is_a_rendered_scenario() -> None:
    """A values file added to the chart is linted and validated like the others (issue 25)."""
    rendered = {values["valuesFile"] for values in SCENARIOS.values() if "valuesFile" in values}
    assert rendered == set(VALUES_FILES)
