"""Rendering the Helm chart in tests: the helm binary, ``helm template`` with values, and the
Prometheus Operator CRD schemas the chart's custom resources are validated against.

Shared by tests/test_helm.py (the objects), tests/test_helm_platform.py and tests/test_helm_exposure.py
(issue 25's values) and tests/test_alert_rules.py (the rendered rules under promtool), so all render
the chart the same way.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import yaml

from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "onnxmon"
CRDS = Path(__file__).resolve().parent / "fixtures" / "crds"
MONITORING_API = "monitoring.coreos.com/v1"
KUBERNETES_VERSION = "1.34"


def helm_binary() -> str:
    """The pinned helm from scripts/fetch-helm, else one on PATH; skips (or fails under CI) without."""
    pinned = ROOT / ".tools" / "bin" / "helm"
    found = str(pinned) if pinned.is_file() else shutil.which("helm")
    if found is None:
        unavailable("helm", "no .tools/bin/helm (run scripts/fetch-helm) and no helm on PATH")
        raise AssertionError("unreachable")
    return found


def run_helm(helm: str, values: dict[str, Any], *args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """``helm template onnxmon`` in namespace gpu-monitoring with ``values`` (plus ``valuesFile``)."""
    values = dict(values)
    files = [str(CHART / values.pop("valuesFile"))] if "valuesFile" in values else []
    override = tmp / "values.yaml"
    override.write_text(yaml.safe_dump(values), encoding="utf-8")
    command = [helm, "template", "onnxmon", str(CHART), "--namespace", "gpu-monitoring"]
    for file in [*files, str(override)]:
        command += ["-f", file]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60, check=False)


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key written twice in one mapping: YAML forbids it, PyYAML
    keeps the last silently, and an API server's strict field validation refuses the object."""


def _unique_mapping(loader: UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    mapping: dict[Any, Any] = loader.construct_mapping(node, deep=deep)
    return mapping


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def render(helm: str, values: dict[str, Any], tmp: Path, *, operator: bool = False) -> list[dict[str, Any]]:
    """The rendered objects; ``operator`` tells helm the cluster serves monitoring.coreos.com/v1.
    A key written twice in one mapping fails the render (``UniqueKeyLoader``)."""
    args = ["--api-versions", MONITORING_API] if operator else []
    done = run_helm(helm, values, *args, tmp=tmp)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.load_all(done.stdout, Loader=UniqueKeyLoader) if doc]


def _closed(schema: Any) -> Any:
    """``schema`` with unknown fields refused wherever it lists properties (kubectl's strict field
    validation; a CRD's structural schema would silently prune them instead)."""
    if isinstance(schema, dict):
        closed = {key: _closed(value) for key, value in schema.items()}
        if (
            "properties" in closed
            and "additionalProperties" not in closed
            and not closed.get("x-kubernetes-preserve-unknown-fields")
        ):
            closed["additionalProperties"] = False
        return closed
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    return schema


@cache
def crd_schema(kind: str) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of the vendored Prometheus Operator CRD for ``kind``, closed."""
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        if crd["spec"]["names"]["kind"] == kind:
            version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
            schema: dict[str, Any] = _closed(version["schema"]["openAPIV3Schema"])
            schema["properties"]["metadata"] = {"type": "object"}
            return schema
    raise AssertionError(f"no vendored CRD for {kind} in {CRDS}")


def validate_custom_resource(obj: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``obj`` fits its Prometheus Operator CRD."""
    assert obj["apiVersion"] == MONITORING_API, obj["apiVersion"]
    jsonschema.Draft7Validator(crd_schema(obj["kind"])).validate(obj)


def validate_objects(objects: list[dict[str, Any]]) -> None:
    """Every rendered object: core kinds by kubernetes-validate (strict: unknown fields refused),
    the Prometheus Operator's by their CRD schemas."""
    for obj in objects:
        if obj["apiVersion"] == MONITORING_API:
            validate_custom_resource(obj)
        else:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
