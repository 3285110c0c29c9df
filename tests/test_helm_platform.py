"""The chart in a platform team's cluster (issue 25), part 1: as a subchart, from a registry mirror,
rolled out across a large fleet, spread, without a fixed UID, on a shared GPU, and stopped without
losing the check in flight.

Every case runs plain ``helm template`` (tests/chart.py) and validates what it renders with
kubernetes-validate (strict) and, for the Prometheus Operator kinds, their CRD schemas.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from monitor.config.schema import Defaults, StoreConfig
from monitor.config.serve_schema import DaemonConfig
from tests.chart import CHART, UniqueKeyLoader, helm_binary, render, run_helm, validate_objects

pytestmark = pytest.mark.helm

DATABASE = {"existingSecret": "onnxmon-credentials", "persistence": {"existingClaim": "onnx-models"}}
DAEMONSET = {"mode": "daemonset", **DATABASE}
MIRROR = "mirror.example:5000"


@pytest.fixture(scope="module")
def helm() -> str:
    return helm_binary()


def workload(objects: list[dict[str, Any]]) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] in ("Deployment", "DaemonSet")]
    assert len(found) == 1, [o["kind"] for o in objects]
    return found[0]


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = workload(objects)["spec"]["template"]["spec"]
    return spec


def containers(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    spec = pod_spec(objects)
    return [*spec.get("initContainers", []), *spec["containers"]]


def refused(helm: str, tmp_path: Path, values: dict[str, Any], *args: str) -> str:
    done = run_helm(helm, values, *args, tmp=tmp_path)
    assert done.returncode != 0, "rendered although it should not"
    return done.stderr


# --------------------------------------------------------------------------- a subchart


def umbrella(tmp_path: Path, values: dict[str, Any]) -> Path:
    """An umbrella chart (what an Argo CD or Flux bundle is) with onnxmon unpacked in charts/."""
    root = tmp_path / "platform"
    (root / "charts").mkdir(parents=True)
    shutil.copytree(CHART, root / "charts" / "onnxmon")
    chart = {"apiVersion": "v2", "name": "platform", "version": "1.0.0", "dependencies": [{"name": "onnxmon"}]}
    (root / "Chart.yaml").write_text(yaml.safe_dump(chart), encoding="utf-8")
    (root / "values.yaml").write_text(yaml.safe_dump(values), encoding="utf-8")
    return root


@pytest.mark.parametrize(
    "globals_", [None, {"imageRegistry": MIRROR, "storageClass": "fast"}], ids=["no-globals", "globals"]
)
def test_the_chart_renders_as_a_subchart_of_an_umbrella_chart(
    helm: str, tmp_path: Path, globals_: dict[str, Any] | None
) -> None:
    """Helm hands a subchart `global` (the schema refused it); global.imageRegistry is the mirror,
    and globals meant for other subcharts (storageClass) are let through."""
    values: dict[str, Any] = {"onnxmon": {"monitoring": {"serviceMonitor": {"enabled": True}}}}
    if globals_ is not None:
        values["global"] = globals_
    command = [helm, "template", "platform", str(umbrella(tmp_path, values)), "--namespace", "gpu-monitoring"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    objects = [doc for doc in yaml.load_all(done.stdout, Loader=UniqueKeyLoader) if doc]
    validate_objects(objects)
    assert workload(objects)["metadata"]["name"] == "platform-onnxmon"
    registry = MIRROR if globals_ else "ghcr.io"
    assert {c["image"] for c in containers(objects)} == {f"{registry}/onnxmon/onnxmon:0.1.0"}


# --------------------------------------------------------------------------- image, arguments


@pytest.mark.parametrize(
    ("image", "global_registry", "expected"),
    [
        ({"registry": MIRROR}, "", f"{MIRROR}/onnxmon/onnxmon:0.1.0"),
        ({"registry": MIRROR, "repository": "ml/onnxmon", "tag": "0.1.0-cpu"}, "", f"{MIRROR}/ml/onnxmon:0.1.0-cpu"),
        ({"registry": "registry.example/team"}, "", "registry.example/team/onnxmon/onnxmon:0.1.0"),
        ({"registry": "registry.example"}, MIRROR, f"{MIRROR}/onnxmon/onnxmon:0.1.0"),
        ({"repository": "localhost/onnxmon"}, MIRROR, f"{MIRROR}/onnxmon:0.1.0"),
        ({"registry": MIRROR, "digest": "sha256:" + "ab" * 32}, "", f"{MIRROR}/onnxmon/onnxmon@sha256:{'ab' * 32}"),
        ({}, "", "ghcr.io/onnxmon/onnxmon:0.1.0"),
    ],
)
def test_a_registry_mirror_replaces_the_repositorys_host_and_the_global_one_wins(
    helm: str, tmp_path: Path, image: dict[str, Any], global_registry: str, expected: str
) -> None:
    objects = render(helm, {"image": image, "global": {"imageRegistry": global_registry}}, tmp_path)
    validate_objects(objects)
    assert {c["image"] for c in containers(objects)} == {expected}


def test_extra_args_follow_the_serve_command_and_not_the_migration(helm: str, tmp_path: Path) -> None:
    objects = render(helm, {"extraArgs": ["--log-level", "debug", "--access-log"]}, tmp_path)
    validate_objects(objects)
    migration, monitor = containers(objects)
    assert monitor["args"] == ["serve", "-c", "/etc/onnxmon/onnxmon.yaml", "--log-level", "debug", "--access-log"]
    assert migration["args"] == ["db", "upgrade", "-c", "/etc/onnxmon/onnxmon.yaml"]


# --------------------------------------------------------------------------- rollouts


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (DAEMONSET, {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
        (
            {**DAEMONSET, "updateStrategy": {"rollingUpdate": {"maxUnavailable": "10%"}}},
            {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%", "maxSurge": 0}},
        ),
        ({**DAEMONSET, "updateStrategy": {"type": "OnDelete"}}, {"type": "OnDelete"}),
        ({}, {"type": "Recreate"}),
        (
            {"updateStrategy": {"type": "RollingUpdate"}},
            {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
        ),
    ],
    ids=[
        "daemonset-default",
        "daemonset-10-percent",
        "daemonset-on-delete",
        "deployment-default",
        "deployment-rolling",
    ],
)
def test_the_update_strategy_is_configurable_in_both_modes_and_never_surges(
    helm: str, tmp_path: Path, values: dict[str, Any], expected: dict[str, Any]
) -> None:
    objects = render(helm, values, tmp_path)
    validate_objects(objects)
    kind = workload(objects)
    assert kind["spec"]["updateStrategy" if kind["kind"] == "DaemonSet" else "strategy"] == expected


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"updateStrategy": {"type": "OnDelete"}}, 'updateStrategy.type "OnDelete" does not apply to mode=deployment'),
        ({**DAEMONSET, "updateStrategy": {"type": "Recreate"}}, "use one of RollingUpdate, OnDelete"),
        ({**DAEMONSET, "updateStrategy": {"rollingUpdate": {"maxSurge": 1}}}, "maxSurge=1 would run a new pod"),
        ({**DAEMONSET, "updateStrategy": {"rollingUpdate": {"maxUnavailable": 0}}}, "never replaces a pod"),
        ({**DAEMONSET, "updateStrategy": {"rollingUpdate": {"maxUnavailable": "00%"}}}, "never replaces a pod"),
        (
            {**DAEMONSET, "updateStrategy": {"type": "OnDelete", "rollingUpdate": {"maxUnavailable": 2}}},
            "applies only to type RollingUpdate",
        ),
    ],
)
def test_update_strategies_that_cannot_work_are_refused_with_the_value_to_change(
    helm: str, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    assert message in refused(helm, tmp_path, values, "--skip-schema-validation")


def test_topology_spread_selects_this_releases_pods_unless_told_otherwise(helm: str, tmp_path: Path) -> None:
    zone = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
    own = {**zone, "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "x"}}}
    values = {"replicas": 3, "sharding": {"enabled": True}, "database": {"url": "postgresql://u:p@db/x"}}
    values |= {"persistence": {"accessModes": ["ReadWriteMany"]}, "topologySpreadConstraints": [zone, own]}
    objects = render(helm, values, tmp_path)
    validate_objects(objects)
    spread = pod_spec(objects)["topologySpreadConstraints"]
    pod_labels = workload(objects)["spec"]["template"]["metadata"]["labels"]
    assert spread[0] == {**zone, "labelSelector": {"matchLabels": workload(objects)["spec"]["selector"]["matchLabels"]}}
    assert spread[0]["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    assert spread[1] == own


# --------------------------------------------------------------------------- security contexts


def test_null_pod_uid_gid_and_fs_group_leave_no_key_at_all(helm: str, tmp_path: Path) -> None:
    """OpenShift assigns them: `runAsUser: null` must not render `runAsUser:` (an empty key)."""
    values = {"podSecurityContext": {"runAsUser": None, "runAsGroup": None, "fsGroup": None}}
    done = run_helm(helm, values, tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    for key in ("runAsUser", "runAsGroup", "fsGroup", "fsGroupChangePolicy"):
        assert f"{key}:" not in done.stdout, key
    objects = [doc for doc in yaml.load_all(done.stdout, Loader=UniqueKeyLoader) if doc]
    validate_objects(objects)
    assert pod_spec(objects)["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    for container in containers(objects):
        assert container["securityContext"]["runAsNonRoot"] is True
        assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_container_security_context_can_be_overridden_key_by_key(helm: str, tmp_path: Path) -> None:
    selinux = {"type": "spc_t"}
    values = {
        "securityContext": {"seLinuxOptions": selinux, "runAsUser": None, "capabilities": {"drop": ["ALL"], "add": []}},
        "extraInitContainers": [{"name": "models", "image": "busybox"}],
        "extraContainers": [{"name": "proxy", "image": "proxy", "securityContext": {"runAsNonRoot": True}}],
    }
    objects = render(helm, values, tmp_path)
    validate_objects(objects)
    by_name = {c["name"]: c["securityContext"] for c in containers(objects)}
    for name in ("db-upgrade", "models", "onnxmon"):
        assert by_name[name]["seLinuxOptions"] == selinux and "runAsUser" not in by_name[name], name
        assert by_name[name]["runAsGroup"] == 10001 and by_name[name]["allowPrivilegeEscalation"] is False
    assert by_name["proxy"] == {"runAsNonRoot": True}, "a container's own securityContext is kept as it is"


# --------------------------------------------------------------------------- GPU modes


def test_a_shared_gpu_requests_none_and_sees_the_nodes_gpus_through_the_nvidia_runtime(
    helm: str, tmp_path: Path
) -> None:
    objects = render(helm, {**DAEMONSET, "gpu": {"shared": True}}, tmp_path)
    validate_objects(objects)
    spec = pod_spec(objects)
    assert spec["runtimeClassName"] == "nvidia"
    for container in containers(objects):
        for kind in ("limits", "requests"):
            assert not any(name.startswith("nvidia.com/") for name in container["resources"].get(kind, {}))
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert (env["NVIDIA_VISIBLE_DEVICES"], env["NVIDIA_DRIVER_CAPABILITIES"]) == ("all", "compute,utility")
    assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in spec["initContainers"][0]["env"]}


def test_a_shared_gpu_keeps_the_platforms_runtime_class_and_env(helm: str, tmp_path: Path) -> None:
    values = {
        "gpu": {"shared": True},
        "runtimeClassName": "nvidia-cdi",
        "extraEnv": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}],
    }
    spec = pod_spec(render(helm, values, tmp_path))
    env = [e for e in spec["containers"][0]["env"] if e["name"] == "NVIDIA_VISIBLE_DEVICES"]
    assert spec["runtimeClassName"] == "nvidia-cdi" and env == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}]


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared"])
def test_an_exclusive_gpu_requests_the_resource_named_mig_and_time_slices_included(
    helm: str, tmp_path: Path, resource: str
) -> None:
    objects = render(helm, {"gpu": {"resourceName": resource}}, tmp_path)
    validate_objects(objects)
    spec = pod_spec(objects)
    assert spec["containers"][0]["resources"]["limits"][resource] == 1
    assert "runtimeClassName" not in spec
    assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in spec["containers"][0]["env"]}


def test_a_shared_gpu_without_a_gpu_is_refused(helm: str, tmp_path: Path) -> None:
    assert "gpu.shared=true needs gpu.enabled=true" in refused(
        helm, tmp_path, {"gpu": {"enabled": False, "shared": True}}
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"gpu": {"shared": True, "resourceName": "nvidia.com/mig-1g.10gb"}},
            "gpu.resourceName=nvidia.com/mig-1g.10gb",
        ),
        ({"gpu": {"shared": True, "count": 2}}, "gpu.count=2 would be ignored"),
        (
            {"gpu": {"shared": True}, "resources": {"limits": {"nvidia.com/gpu": 1}}},
            "resources.limits names nvidia.com/gpu",
        ),
        (
            {"gpu": {"shared": True}, "resources": {"requests": {"nvidia.com/mig-1g.10gb": 1}}},
            "resources.requests names nvidia.com/mig-1g.10gb",
        ),
    ],
    ids=["mig-slice", "count", "limit", "request"],
)
def test_a_shared_gpu_with_a_gpu_resource_is_refused_not_silently_dropped(
    helm: str, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    """shared requests nothing: a MIG slice asked for beside it would become the whole node's GPUs."""
    assert message in refused(helm, tmp_path, values)


def test_the_charts_gpu_footprint_types_are_the_configs() -> None:
    """helm lint refuses gpu_memory_limit: 2Gi (a Kubernetes habit) with the bounds onnxmon would apply at start."""
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    daemon = schema["properties"]["config"]["allOf"][0]["properties"]["daemon"]["properties"]
    limit = next(branch for branch in daemon["gpu_memory_limit"]["oneOf"] if branch["type"] == "integer")
    bounds = {type(m).__name__: m for m in DaemonConfig.model_fields["gpu_memory_limit"].metadata}
    assert (limit["minimum"], limit["maximum"]) == (bounds["Ge"].ge, bounds["Le"].le)
    strategy = DaemonConfig.model_fields["gpu_arena_extend_strategy"].annotation
    assert set(daemon["gpu_arena_extend_strategy"]["enum"]) == {*get_args(get_args(strategy)[0]), None}


# --------------------------------------------------------------------------- stopping (issue 30)


def grace(helm: str, tmp_path: Path, values: dict[str, Any]) -> int:
    seconds: int = pod_spec(render(helm, values, tmp_path))["terminationGracePeriodSeconds"]
    return seconds


def test_the_grace_period_is_derived_from_onnxmons_own_defaults(helm: str, tmp_path: Path) -> None:
    """With no timeout in the values the chart assumes onnxmon's defaults: they must be the schema's."""
    assert grace(helm, tmp_path, {"config": {}}) == Defaults().timeout + StoreConfig().write_timeout + 50
    on = {"config": {"daemon": {"diagnose_on_fail": True}}}
    assert (
        grace(helm, tmp_path, on)
        == Defaults().timeout + DaemonConfig().diagnose_budget + StoreConfig().write_timeout + 50
    )
    assert DaemonConfig().diagnose_on_fail is False


@pytest.mark.parametrize(
    ("config", "stop"),
    [
        ({"defaults": {"timeout": "10m"}}, 600 + 10),
        (
            {"defaults": {"timeout": "20m", "schedule": {"interval": "1h"}}, "daemon": {"diagnose_on_fail": True}},
            1200 + 120 + 10,
        ),
        (
            {"daemon": {"diagnose_on_fail": True, "diagnose_budget": "5m"}, "store": {"write_timeout": 30}},
            600 + 300 + 30,
        ),
        ({"daemon": {"diagnose_on_fail": False, "diagnose_budget": "5m"}}, 600 + 10),
        (
            {
                "defaults": {"timeout": 90, "schedule": {"interval": "2h"}},
                "benchsets": [{"name": "b", "npz": ["/var/lib/onnxmon/b.npz"]}],
                "models": [
                    {"name": "a", "path": "/var/lib/onnxmon/a.onnx", "benchset": "b", "timeout": "45m"},
                    {"name": "c", "path": "/var/lib/onnxmon/c.onnx", "benchset": "b", "timeout": None},
                ],
            },
            2700 + 10,
        ),
        ({"defaults": {"timeout": "90.5s"}}, 91 + 10),
    ],
)
def test_the_grace_period_covers_the_longest_check_its_diagnosis_and_its_write(
    helm: str, tmp_path: Path, config: dict[str, Any], stop: int
) -> None:
    assert grace(helm, tmp_path, {"config": config}) == stop + 50
    assert grace(helm, tmp_path, {"config": config, "terminationGracePeriodSeconds": stop}) == stop
    message = refused(helm, tmp_path, {"config": config, "terminationGracePeriodSeconds": stop - 1})
    assert f"terminationGracePeriodSeconds={stop - 1} is shorter than a stop can take: {stop}s" in message, message
    assert f"at least {stop}" in message
