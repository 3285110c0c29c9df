"""Real traffic into a benchmark set through the HTTP API, end to end: OIP payloads and KServe request-logger
CloudEvents posted with the token, validated against the model's signature, deduplicated by digest, a new
set version only once a person promotes it, then a baseline and a check on it.

Ground truth for what is stored: the posted numbers read back with numpy from the promoted version."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from monitor import capture
from monitor.api.app import create_app
from monitor.config.plan import plan_for
from monitor.files import benchsets, traffic
from monitor.store import Store
from tests import modelzoo
from tests.test_metrics import RealDaemon
from tests.workspace import Workspace

TOKEN = "traffic-token-7f3a"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Workspace, TestClient]]:
    ws = Workspace(tmp_path)
    ws.add_model("clf", modelzoo.classifier(), count=2)
    ws.benchsets["traffic"] = {"name": "traffic", "imported": True}
    ws.models["live"] = {"name": "live", "path": "models/clf.onnx", "benchset": "traffic"}
    ws.extra["api"] = {"token": TOKEN}
    settings = ws.settings()
    with Store(settings.store.url) as store:
        store.upgrade()
        yield ws, TestClient(create_app(RealDaemon(settings, store)), raise_server_exceptions=False)


def request_payload(values: np.ndarray) -> dict[str, Any]:
    return {
        "id": "r1",
        "inputs": [{"name": "x", "shape": list(values.shape), "datatype": "FP32", "data": values.ravel().tolist()}],
    }


def test_posted_traffic_becomes_a_version_only_when_promoted_and_a_check_runs_on_it(served: Any) -> None:
    ws, client = served
    rng = np.random.default_rng(3)
    first, second = (rng.standard_normal((1, 16)).astype(np.float32) for _ in range(2))
    url = "/api/v1/benchsets/traffic/samples"

    # an OIP request payload
    answer = client.post(url, json=request_payload(first), headers=AUTH)
    assert answer.status_code == 201, answer.text
    # the same request again: a duplicate by digest, not stored twice
    again = client.post(url, json=request_payload(first), headers=AUTH)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    # KServe's request logger, CloudEvents binary mode: the request event is staged, the response event ignored
    event = {"ce-specversion": "1.0", "ce-id": "e1", "ce-source": "kserve", "content-type": "application/json"}
    body = json.dumps(request_payload(second))
    logged = client.post(url, content=body, headers={**AUTH, **event, "ce-type": traffic.REQUEST_EVENT})
    assert logged.status_code == 201, logged.text
    ignored = client.post(
        url, content=body, headers={**AUTH, **event, "ce-type": "org.kubeflow.serving.inference.response"}
    )
    assert ignored.status_code == 202
    # structured mode carries the same request: a duplicate
    structured = {
        "specversion": "1.0",
        "id": "e2",
        "source": "kserve",
        "type": traffic.REQUEST_EVENT,
        "data": request_payload(second),
    }
    assert client.post(url, json=structured, headers=AUTH).json()["duplicate"] is True

    assert client.get(url).json()["staged"] == 2
    root = ws.settings().store.benchsets_dir
    assert benchsets.newest_version(root, "traffic") is None, "nothing is a benchmark set before promotion"

    promoted = client.post("/api/v1/benchsets/traffic/promote", headers=AUTH)
    assert promoted.status_code == 201, promoted.text
    assert promoted.json()["version"] == 1 and promoted.json()["samples"] == 2
    assert client.get(url).json()["staged"] == 0

    made = benchsets.open_benchset(root, "traffic")
    stored = sorted(made.load_sample(i)["x"].tobytes() for i in range(len(made)))
    assert stored == sorted([first.tobytes(), second.tobytes()])  # the posted numbers, bit for bit

    settings = ws.settings()
    capture.capture_baseline(plan_for(settings, "live"), promote=True)
    checked = client.post("/api/v1/models/live/check", headers=AUTH)  # the check, through the API too
    assert checked.status_code == 200, checked.text
    assert checked.json()["verdict"] == "pass"
    assert checked.json()["result"]["benchset"] == "traffic"


@pytest.mark.parametrize(
    ("payload", "status", "words"),
    [
        ({"inputs": [{"name": "x", "shape": [1, 15], "datatype": "FP32", "data": [0.0] * 15}]}, 400, "x"),
        ({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 3}]}, 400, "does not fill"),
        ({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "BYTES", "data": ["a"] * 16}]}, 400, "BYTES"),
        ({"outputs": []}, 400, "inputs"),
    ],
)
def test_a_sample_that_does_not_fit_the_model_is_refused_with_why(
    served: Any, payload: Any, status: int, words: str
) -> None:
    _, client = served
    answer = client.post("/api/v1/benchsets/traffic/samples", json=payload, headers=AUTH)
    assert answer.status_code == status
    assert words in answer.text


def test_traffic_needs_the_token_and_an_imported_set(served: Any) -> None:
    _, client = served
    payload = request_payload(np.zeros((1, 16), np.float32))
    assert client.post("/api/v1/benchsets/traffic/samples", json=payload).status_code == 401
    refused = client.post("/api/v1/benchsets/clf-bench/samples", json=payload, headers=AUTH)
    assert refused.status_code == 409 and "imported" in refused.text
    assert client.post("/api/v1/benchsets/nope/samples", json=payload, headers=AUTH).status_code == 404
    assert client.post("/api/v1/benchsets/traffic/promote", headers=AUTH).status_code == 409  # nothing staged


def test_files_on_disk_are_staged_and_promoted_from_the_command_line(served: Any, tmp_path: Path, run_cli: Any) -> None:
    import yaml

    ws, _ = served
    rng = np.random.default_rng(5)
    npz, payload = tmp_path / "one.npz", tmp_path / "two.json"
    np.savez(npz, x=rng.standard_normal((1, 16)).astype(np.float32))
    payload.write_text(json.dumps(request_payload(rng.standard_normal((2, 16)).astype(np.float32))))
    config = str(ws.config_file)
    staged = run_cli("benchset", "stage", "traffic", npz, payload, npz, "-o", "yaml", "-c", config)
    assert staged.exit_code == 0, staged.output
    document = yaml.safe_load(staged.stdout)
    assert document["staged"] == 2 and [s["duplicate"] for s in document["samples"]] == [False, False, True]
    promoted = run_cli("benchset", "promote", "traffic", "-o", "json", "-c", config)
    assert promoted.exit_code == 0, promoted.output
    assert json.loads(promoted.stdout)["samples"] == 2
    assert benchsets.newest_version(ws.settings().store.benchsets_dir, "traffic") == 1
