"""A real fleet on this machine (issue 38's Done means): node processes with their own ``ONNXMON_NODE_NAME``
sharing one real PostgreSQL and one pool of baselines, a committed corpus model, each cycle what a daemon
does (check, record, vote for itself: ``tests/fleet_node.py``).

The odd node's ONNX Runtime is patched in that node's processes only (a ``sitecustomize`` on its
``PYTHONPATH``): it flips the lowest mantissa bit of one element of the first float output, far within
tolerance. Ground truth is the construction: which node flips, and whether it keeps flipping.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import onnx
import pytest

from monitor import capture
from monitor.config.plan import plan_for
from monitor.config.settings import from_mapping
from monitor.fleet import report
from monitor.store import Store
from tests import realmodels, stacks
from tests.databases import postgres_schema
from tests.workspace import Workspace

pytestmark = [pytest.mark.process, pytest.mark.database, pytest.mark.postgres, pytest.mark.slow]
REPO = Path(__file__).resolve().parent.parent
MODEL = "sk-logreg-nozipmap"  # committed: every machine has it; cheap enough for 50 cycles of 7 nodes
MOVED = (
    "vietcombank-captcha"  # a CNN whose numbers ONNX Runtime 1.20.1 -> 1.32.0 moved at level disable (drift-study.md)
)
DIMS = {MODEL: {"input:0": 8}, MOVED: {"input:0": 2}}
FIELDS: dict[str, dict[str, Any]] = {MODEL: {}, MOVED: {"session": {"graph_optimization_level": "disable"}}}
HEALTHY = [f"node-{i}" for i in range(7)]

FLIP = """
import os
import numpy as np
import onnxruntime as ort

_run = ort.InferenceSession.run


def run(self, output_names, input_feed, run_options=None):
    outputs = _run(self, output_names, input_feed, run_options)
    if os.environ.get("FLIP_MODE") == "once":
        try:
            os.unlink(os.environ["FLIP_MARKER"])  # only the run that removes the marker flips
        except FileNotFoundError:
            return outputs
    for index, value in enumerate(outputs):
        if isinstance(value, np.ndarray) and value.dtype == np.float32 and value.size:
            flipped = value.copy()
            flipped.reshape(-1).view(np.uint32)[0] ^= 1
            outputs[index] = flipped
            break
    return outputs


ort.InferenceSession.run = run
"""


@pytest.fixture
def fleet(tmp_path: Path, postgres_url: str, request: pytest.FixtureRequest) -> Iterator[tuple[Workspace, str]]:
    name = getattr(request, "param", MODEL)
    with postgres_schema(postgres_url) as url:
        ws = Workspace(tmp_path / "ws")
        model = realmodels.MODELS[name]
        ws.add_model(name, onnx.load(str(realmodels.source_file(model))), count=4, dims=DIMS[name], **FIELDS[name])
        ws.extra = {"store": {"url": url, "baselines_dir": "baselines", "benchsets_dir": "benchsets"}}
        settings = ws.settings()
        capture.capture_baseline(plan_for(settings, name))  # the one pool of baselines every node reads
        with Store(url) as store:
            store.upgrade()
        yield ws, url


def node(
    ws: Workspace,
    name: str,
    cycles: int = 1,
    *,
    python: str = sys.executable,
    flip: str | None = None,
    extra_path: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    env = stacks.child_env() | {"ONNXMON_NODE_NAME": name}
    path = [str(REPO), *extra_path]
    if flip is not None:
        patch = ws.root / f"patch-{name}"
        patch.mkdir(exist_ok=True)
        (patch / "sitecustomize.py").write_text(FLIP)
        marker = ws.root / f"marker-{name}"
        marker.write_text("flip")
        path.insert(0, str(patch))
        env |= {"FLIP_MODE": flip, "FLIP_MARKER": str(marker)}
    env["PYTHONPATH"] = os.pathsep.join(path)
    done = subprocess.run(
        [python, "-m", "tests.fleet_node", str(ws.config_file), next(iter(ws.models)), str(cycles)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def vote(url: str) -> dict[str, Any]:
    settings = from_mapping({"store": {"url": url}}, origin=Path("/nonexistent/onnxmon.yaml"))
    from datetime import UTC, datetime

    with Store(url) as store:
        (found,) = report.vote(store, settings, datetime.now(UTC))
    return report.document(found)


def healthy_cycle(ws: Workspace, cycles: int = 1) -> list[dict[str, Any]]:
    with ThreadPoolExecutor(2) as pool:  # two at a time: this machine has two cores
        return [line for lines in pool.map(lambda n: node(ws, n, cycles), HEALTHY) for line in lines]


def test_one_node_flipping_a_bit_is_suspect_hardware_within_one_cycle(fleet: tuple[Workspace, str]) -> None:
    ws, url = fleet
    lines = healthy_cycle(ws)
    assert {line["verdict"] for line in lines} == {"pass"} and len({line["run_digest"] for line in lines}) == 1
    (odd,) = node(ws, "node-odd", flip="always")
    assert odd["verdict"] == "pass", "the flip is within tolerance: the check against the baseline passes"
    assert odd["run_digest"] != lines[0]["run_digest"]
    assert (odd["kind"], odd["consistent"]) == ("suspect_hardware", 0.0)
    document = vote(url)
    (outlier,) = document["outliers"]
    assert (outlier["node"], outlier["kind"]) == ("node-odd", "suspect_hardware")
    assert len(document["groups"]) == 1 and len(document["groups"][0]["nodes"]) == 8
    assert "dcgmi diag -r 3" in outlier["detail"]


@pytest.mark.prometheus
@pytest.mark.server
def test_the_shipped_alert_fires_for_the_odd_node_with_a_real_prometheus(fleet: tuple[Workspace, str]) -> None:
    from tests.serving import free_port
    from tests.test_prometheus_e2e import Prometheus, need_binary, wait_until

    binary = need_binary("prometheus", "prometheus")
    ws, _ = fleet
    healthy_cycle(ws)
    port = free_port()
    env = stacks.child_env() | {"ONNXMON_NODE_NAME": "node-odd", "FLIP_MODE": "always"}
    patch = ws.root / "patch-alert"
    patch.mkdir()
    (patch / "sitecustomize.py").write_text(FLIP)
    env["PYTHONPATH"] = os.pathsep.join([str(patch), str(REPO)])
    command = [sys.executable, "-m", "tests.fleet_node", str(ws.config_file), MODEL, "1", str(port)]
    odd = subprocess.Popen(command, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    prometheus = None
    try:
        assert odd.stdout is not None
        lines = [json.loads(odd.stdout.readline()) for _ in range(2)]
        assert lines[0]["kind"] == "suspect_hardware" and lines[1] == {"serving": port}
        prometheus = Prometheus(binary, ws.root / "prometheus", port)  # the unmodified shipped rules
        series = f'onnxmon_fleet_consistent{{job="onnxmon", model="{MODEL}"}}'
        wait_until(lambda: prometheus.value(series) == 0.0, "the odd node's series scraped", prometheus.process)
        # the rule holds `for: 5m` before it pages: pending is its firing condition met (as test_prometheus_e2e)
        wait_until(
            lambda: prometheus.alert_state("OnnxmonNodeComputesDifferently", model=MODEL) == "pending",
            "OnnxmonNodeComputesDifferently for the odd node",
            prometheus.process,
        )
        # the dashboard's fleet panels and the rule, as test_prometheus_e2e queries every other expression
        from tests.test_prometheus_e2e import ELSEWHERE, condition_less, key, promql_expressions

        for expr in [e for e in promql_expressions(substituted=True) if key(e) in ELSEWHERE]:
            query = condition_less(expr.expr) if expr.kind == "alert" else expr.expr
            assert prometheus.query(query), f"{key(expr)} returned no data: {query}"
    finally:
        if prometheus is not None:
            prometheus.stop()
        odd.communicate(input="", timeout=30)


def test_a_flip_that_happens_once_is_transient(fleet: tuple[Workspace, str]) -> None:
    ws, url = fleet
    healthy_cycle(ws)
    (once,) = node(ws, "node-once", flip="once")
    assert once["verdict"] == "pass" and (once["kind"], once["consistent"]) == ("transient", 1.0)
    document = vote(url)
    assert [(o["node"], o["kind"]) for o in document["outliers"]] == [("node-once", "transient")]
    assert document["consistent"] is True


def test_no_outlier_over_fifty_cycles_of_healthy_nodes(fleet: tuple[Workspace, str]) -> None:
    ws, url = fleet
    lines = healthy_cycle(ws, cycles=50)
    assert len(lines) == 7 * 50 and all(line["consistent"] == 1.0 and line["kind"] is None for line in lines)
    assert len({line["run_digest"] for line in lines}) == 1
    assert vote(url)["outliers"] == []


@pytest.mark.realmodels
@pytest.mark.parametrize("fleet", [MOVED], indirect=True)
def test_a_node_on_another_onnxruntime_release_is_a_stack_difference(fleet: tuple[Workspace, str]) -> None:
    ws, url = fleet
    older = stacks.older_stack()
    healthy_cycle(ws)
    # the upgrade suite's environment has onnxmon without the postgres extra: this process's psycopg (built
    # for the same interpreter) is lent to it, and nothing else
    lent = ws.root / "psycopg-lent"
    lent.mkdir()
    import psycopg
    import psycopg_binary  # type: ignore[import-not-found,unused-ignore]

    for package in (psycopg, psycopg_binary):
        where = Path(str(package.__file__)).parent
        (lent / package.__name__).symlink_to(where)
        for info in where.parent.glob(f"{package.__name__}-*.dist-info"):  # its version, as SQLAlchemy reads it
            (lent / info.name).symlink_to(info)
    (other,) = node(ws, "node-old", python=str(older.python), extra_path=(str(lent),))
    document = vote(url)
    if other["run_digest"] == document["groups"][0]["digest"]:
        pytest.fail(f"onnxruntime {older.ort_version} computes {MOVED} bit for bit alike: the drift study says not")
    assert [(o["node"], o["kind"]) for o in document["outliers"]] == [("node-old", "stack")]
    assert document["separated_by"][0] == "onnxruntime.version"
    assert "onnxruntime.version" in document["outliers"][0]["detail"]
