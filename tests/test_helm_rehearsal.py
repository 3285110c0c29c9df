"""The chart's rehearsal Job (issue 24): ``onnxmon rehearse`` from a candidate image, through plain ``helm template``.

What a platform team relies on: the Job runs the candidate image's ``onnxmon rehearse`` with the
monitor's config, nodes, GPU request and store, the baselines' volume read-only, no spool; its pod is
selected by nothing that selects the monitor (Service, PodDisruptionBudget, ServiceMonitor); each
release revision is a new Job; without a database server the candidate runs are not stored (a SQLite
file on a read-only volume cannot take them). Every rendering passes kubernetes-validate (strict).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import CHART, helm_binary, render, run_helm, validate_objects
from tests.test_dockerfile import CPU, GPU, instructions, last

pytestmark = pytest.mark.helm

CANDIDATE = {"enabled": True, "image": {"tag": "0.2.0-ort1.33"}}
DATABASE = {"existingSecret": "onnxmon-credentials", "persistence": {"existingClaim": "onnx-models"}}


@pytest.fixture(scope="module")
def helm() -> str:
    return helm_binary()


def job(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == "Job"]
    return found


def monitor_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] in ("Deployment", "DaemonSet")]
    spec: dict[str, Any] = found["spec"]["template"]
    return spec


def image_python() -> str:
    """The interpreter onnxmon's images run onnxmon with, read from both Dockerfiles: the venv each
    creates (``python -m venv DIR``), copies into the final image and puts first on ``PATH``."""
    found = set()
    for dockerfile in (GPU, CPU):
        runs = [arguments for keyword, arguments in instructions(dockerfile) if keyword == "RUN"]
        (venv,) = {m for run in runs for m in re.findall(r"\bpython3? -m venv (\S+)", run)}
        copies = [arguments.split() for keyword, arguments in instructions(dockerfile) if keyword == "COPY"]
        assert ["--from=build", venv, venv] in copies, f"{dockerfile.name}: the final stage lacks {venv}"
        assert last(dockerfile, "ENV").startswith(f"PATH={venv}/bin:"), f"{dockerfile.name}: {venv}/bin first"
        found.add(f"{venv}/bin/python")
    (python,) = found  # one path for both images
    return python


def test_the_default_interpreter_is_the_one_both_images_install_onnxmon_in(helm: str, tmp_path: Path) -> None:
    """``--set rehearsal.enabled=true`` alone (the documented way) runs the image's own interpreter."""
    (container,) = job(render(helm, {"rehearsal": CANDIDATE}, tmp_path))["spec"]["template"]["spec"]["containers"]
    assert container["args"][:3] == ["rehearse", "--python", image_python()]
    assert (
        container["command"]
        == ["onnxmon"]
        == json.loads(last(GPU, "ENTRYPOINT"))
        == json.loads(last(CPU, "ENTRYPOINT"))
    )


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("mode", ["deployment", "daemonset"])
def test_the_rehearsal_job_runs_the_candidate_image_on_the_monitors_nodes_and_store(
    helm: str, tmp_path: Path, mode: str
) -> None:
    values = {"mode": mode, "rehearsal": CANDIDATE, "nodeSelector": {"gpu": "h200"}, **DATABASE}
    objects = render(helm, values, tmp_path, operator=True)
    validate_objects(objects)
    rehearsal = job(objects)
    assert rehearsal["metadata"]["name"].endswith("-rehearsal-1"), "the release revision names the Job"
    assert rehearsal["spec"]["backoffLimit"] == 0
    pod = rehearsal["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "ghcr.io/onnxmon/onnxmon:0.2.0-ort1.33"
    assert container["args"][:3] == ["rehearse", "--python", image_python()]
    assert "--no-store" not in container["args"], "a database server takes the candidate runs"
    assert pod["spec"]["restartPolicy"] == "Never" and "initContainers" not in pod["spec"]
    monitor = monitor_pod(objects)
    assert pod["spec"]["nodeSelector"] == monitor["spec"]["nodeSelector"] == {"gpu": "h200"}
    (serving,) = monitor["spec"]["containers"]
    assert container["resources"] == serving["resources"] and container["env"] == serving["env"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["data"]["readOnly"] is True and "spool" not in mounts
    assert "spool" not in {v["name"] for v in pod["spec"]["volumes"]}
    labels = pod["metadata"]["labels"]
    for selecting in (o for o in objects if o["kind"] in ("Service", "PodDisruptionBudget", "ServiceMonitor")):
        selector = selecting["spec"]["selector"]
        assert not selects(selector.get("matchLabels", selector), labels), f"{selecting['kind']} selects the Job"


def test_without_a_database_server_the_job_does_not_store(helm: str, tmp_path: Path) -> None:
    (container,) = job(render(helm, {"rehearsal": CANDIDATE}, tmp_path))["spec"]["template"]["spec"]["containers"]
    assert "--no-store" in container["args"]


def test_models_a_mirror_and_a_digest_reach_the_job(helm: str, tmp_path: Path) -> None:
    digest = "sha256:" + "a" * 64
    values = {
        "global": {"imageRegistry": "mirror.example:5000"},
        "rehearsal": {"enabled": True, "image": {"digest": digest}, "models": ["resnet", "bert"]},
        **DATABASE,
    }
    objects = render(helm, values, tmp_path)
    validate_objects(objects)
    (container,) = job(objects)["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"mirror.example:5000/onnxmon/onnxmon@{digest}"
    assert container["args"][-2:] == ["resnet", "bert"]


def test_no_job_unless_enabled_and_no_candidate_without_a_tag(helm: str, tmp_path: Path) -> None:
    assert not [o for o in render(helm, {}, tmp_path) if o["kind"] == "Job"]
    done = run_helm(helm, {"rehearsal": {"enabled": True}}, tmp=tmp_path)
    assert done.returncode != 0 and "rehearsal.image.tag" in done.stderr
    typo = run_helm(helm, {"rehearsal": {"enabled": True, "image": {"tag": "x"}, "pyhton": "/x"}}, tmp=tmp_path)
    assert typo.returncode != 0 and "pyhton" in typo.stderr, "the strict schema refuses a misspelt value"


@pytest.mark.parametrize("mode", ["deployment", "daemonset"])
def test_the_chart_with_a_rehearsal_passes_helm_lint_strict(helm: str, tmp_path: Path, mode: str) -> None:
    """The chart's own lint (tests/test_helm.py) runs its values files, none of which enables a rehearsal."""
    values = tmp_path / "rehearsal.yaml"
    values.write_text(yaml.safe_dump({"mode": mode, "rehearsal": CANDIDATE, **DATABASE}), encoding="utf-8")
    done = subprocess.run([helm, "lint", "--strict", str(CHART), "-f", str(values)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
