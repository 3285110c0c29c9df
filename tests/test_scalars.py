"""0-d (scalar) tensors end to end: a scalar input in a benchmark set, a scalar output in a baseline.

Real models have them (silero-vad's sample rate ``sr``, a loss, a count); ``np.ascontiguousarray``
once turned shape ``()`` into ``(1,)`` on save, so a generated set failed its own verification and a
scalar output came back ``shape_changed``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from monitor import capture
from monitor.check import run_check
from monitor.config.plan import plan_for
from monitor.files import baselines, benchsets
from monitor.results import Verdict
from tests.workspace import Workspace


def scalar_model() -> onnx.ModelProto:
    """y = x * gain (``gain`` a 0-d input), total = sum(y) (a 0-d output)."""
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "gain"], ["y"]),
            helper.make_node("ReduceSum", ["y"], ["total"], keepdims=0),
        ],
        "scalars",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("gain", TensorProto.FLOAT, []),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("total", TensorProto.FLOAT, []),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_scalar_input_and_output_round_trip_through_benchset_baseline_and_check(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("sc", scalar_model())
    plan = plan_for(ws.settings(), "sc")
    bench = benchsets.ensure(plan.benchset, plan.benchsets_dir)
    assert benchsets.verify(bench) == []
    assert bench.load_sample(0)["gain"].shape == ()
    capture.capture_baseline(plan)
    baseline = baselines.active(plan.baselines_dir, "sc")
    assert baseline is not None and baseline.sample_outputs(0)["total"].shape == ()
    result = run_check(plan)
    assert result.verdict is Verdict.PASS, result.all_reasons()
    assert {o.name: o.shape for o in result.outputs}["total"] in ((), [])


def test_an_imported_npz_baseline_keeps_a_scalar_output_scalar(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("sc", scalar_model(), count=2)
    plan = plan_for(ws.settings(), "sc")
    bench = benchsets.ensure(plan.benchset, plan.benchsets_dir)
    files = []
    for index in range(len(bench)):
        feeds = bench.load_sample(index)
        y = feeds["x"] * feeds["gain"]
        files.append(tmp_path / f"out{index}.npz")
        np.savez(files[-1], y=y, total=np.float32(y.sum()))
    capture.import_baseline(plan, files)
    baseline = baselines.active(plan.baselines_dir, "sc")
    assert baseline is not None and baseline.sample_outputs(1)["total"].shape == ()
    assert run_check(plan).verdict is Verdict.PASS
