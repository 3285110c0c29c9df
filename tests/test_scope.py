"""Baseline scope: one baseline for the fleet, per GPU pool, or per node — the rule is in config."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor import capture
from monitor.check import run_check
from monitor.config import scope
from monitor.config.plan import plan_for
from monitor.results import Verdict
from tests import modelzoo
from tests.workspace import Workspace


@pytest.mark.parametrize(
    ("daemon", "environ", "gpu", "expected"),
    [
        ({}, {}, "NVIDIA H100 80GB HBM3", "baselines"),
        ({"baseline_scope": "pool"}, {}, "NVIDIA H100 80GB HBM3", "baselines/pools/nvidia-h100-80gb-hbm3"),
        ({"baseline_scope": "pool"}, {}, None, "baselines/pools/cpu"),
        ({"baseline_scope": "pool", "pool": "L4 pool"}, {}, "NVIDIA L4", "baselines/pools/l4-pool"),
        ({"baseline_scope": "node"}, {"ONNXMON_NODE_NAME": "gpu-node-7"}, None, "baselines/nodes/gpu-node-7"),
        ({"baseline_scope": "node"}, {"NODE_NAME": "Node_B"}, None, "baselines/nodes/node_b"),
    ],
)
def test_the_baseline_directory_follows_the_configured_scope(
    tmp_path: Path, daemon: dict[str, str], environ: dict[str, str], gpu: str | None, expected: str
) -> None:
    ws = Workspace(tmp_path)
    ws.extra["daemon"] = daemon
    scoped = scope.apply(ws.settings(), environ=environ, gpu_name=lambda: gpu)
    assert scoped.store.baselines_dir == tmp_path / expected


def test_with_per_node_scope_each_node_is_held_to_its_own_baseline(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("clf", modelzoo.classifier())
    ws.extra["daemon"] = {"baseline_scope": "node"}
    node_a = scope.apply(ws.settings(), environ={"ONNXMON_NODE_NAME": "node-a"}, gpu_name=lambda: None)
    node_b = scope.apply(ws.settings(), environ={"ONNXMON_NODE_NAME": "node-b"}, gpu_name=lambda: None)
    baseline = capture.capture_baseline(plan_for(node_a, "clf"))
    assert baseline.directory.parent == tmp_path / "baselines" / "nodes" / "node-a" / "clf"
    assert run_check(plan_for(node_a, "clf")).verdict is Verdict.PASS
    other = run_check(plan_for(node_b, "clf"))
    assert other.verdict is Verdict.ERROR and other.reasons[0].code == "no_baseline"


def test_a_shared_scope_leaves_the_configured_directory_alone(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    settings = ws.settings()
    assert scope.apply(settings, environ={"ONNXMON_NODE_NAME": "x"}, gpu_name=lambda: None) is settings


def test_node_identity_has_one_reader_and_one_fallback_order() -> None:
    from monitor.config.identity import identity

    assert identity({"ONNXMON_NODE_NAME": "a", "NODE_NAME": "b", "POD_NAME": "p"}).node == "a"
    assert identity({"NODE_NAME": "b"}).node == "b"
    none = identity({})
    assert (none.node, none.pod, none.namespace) == (None, None, None) and none.node_or_host()
    # every module that needs the node reads it through monitor/config/identity.py
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "monitor"
    readers = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if '"ONNXMON_NODE_NAME"' in p.read_text(encoding="utf-8") or '"NODE_NAME"' in p.read_text(encoding="utf-8")
    )
    assert readers == ["config/identity.py"], readers
