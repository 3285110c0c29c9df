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


def test_scalars_from_onnx_test_data_and_polygraphy_json_stay_scalar(tmp_path: Path) -> None:
    """The .pb (ONNX test data) and Polygraphy JSON sources keep shape () for a scalar input and output."""
    import base64
    import io
    import json

    from onnx import numpy_helper

    ws = Workspace(tmp_path)
    ws.add_model("sc", scalar_model(), count=1)
    data = tmp_path / "td" / "test_data_set_0"
    data.mkdir(parents=True)
    x, gain = np.arange(6, dtype=np.float32).reshape(2, 3), np.float32(1.5)
    for index, (name, value) in enumerate((("x", x), ("gain", np.array(gain)))):
        (data / f"input_{index}.pb").write_bytes(numpy_helper.from_array(value, name).SerializeToString())
    for index, (name, value) in enumerate((("y", x * gain), ("total", np.array((x * gain).sum())))):
        (data / f"output_{index}.pb").write_bytes(numpy_helper.from_array(value, name).SerializeToString())

    def encoded(array: np.ndarray) -> dict[str, str]:
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        return {"array": base64.b64encode(buffer.getvalue()).decode(), "polygraphy_class": "ndarray"}

    (tmp_path / "inputs.json").write_text(json.dumps([{"x": encoded(x), "gain": encoded(np.array(gain))}]))
    ws.benchsets["td"] = {"name": "td", "onnx_test_data": str(tmp_path / "td")}
    ws.benchsets["poly"] = {"name": "poly", "polygraphy_json": str(tmp_path / "inputs.json")}
    settings = ws.settings()
    for name in ("td", "poly"):
        cfg = next(b for b in settings.benchsets if b.name == name)
        bench = benchsets.ensure(cfg, plan_for(settings, "sc").benchsets_dir)
        assert bench.load_sample(0)["gain"].shape == (), name
        assert benchsets.verify(bench) == [], name
    ws.models["sc"]["benchset"] = "td"
    plan = plan_for(ws.settings(), "sc")
    capture.import_baseline(plan, [tmp_path / "td"], kind="onnx-test-data")
    baseline = baselines.active(plan.baselines_dir, "sc")
    assert baseline is not None and baseline.sample_outputs(0)["total"].shape == ()
    assert run_check(plan).verdict is Verdict.PASS


def test_a_scalar_intermediate_is_captured_as_a_scalar(tmp_path: Path) -> None:
    model = scalar_model()
    # total = 2 * raw, with raw = ReduceSum(y): a 0-d tensor inside the graph
    model.graph.node[1].output[0] = "raw"
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.float32(2.0), "two"))
    model.graph.node.append(helper.make_node("Mul", ["raw", "two"], ["total"]))
    ws = Workspace(tmp_path)
    ws.add_model("sc", model)
    plan = plan_for(ws.settings(), "sc")
    capture.capture_baseline(plan, intermediate_samples=1)
    baseline = baselines.active(plan.baselines_dir, "sc")
    assert baseline is not None
    inner = baseline.intermediates(0)
    assert inner["raw"].shape == (), {k: v.shape for k, v in inner.items()}
    assert float(inner["raw"]) * 2 == float(baseline.sample_outputs(0)["total"])
