"""Non-tensor outputs: a ZipMap's sequence of maps is captured and compared; other kinds are a clear error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from monitor import capture
from monitor.check import run_check
from monitor.config.plan import plan_for
from monitor.errors import ModelError
from monitor.files import baselines
from monitor.results import Verdict
from monitor.runtime.nontensor import flatten_maps, keys_name
from tests.workspace import Workspace

ZIPMAP = Path(__file__).resolve().parent / "corpus" / "sklearn" / "logreg_zipmap.onnx"  # tests/corpus/make_sklearn.py


def zipmap_workspace(tmp_path: Path) -> Workspace:
    ws = Workspace(tmp_path)
    ws.add_model("clf", onnx.load(str(ZIPMAP)), dims={"input:0": 5})
    return ws


def test_a_zipmap_classifier_baselines_and_passes_its_reruns(tmp_path: Path) -> None:
    ws = zipmap_workspace(tmp_path)
    capture.capture_baseline(plan_for(ws.settings(), "clf"))
    baseline = baselines.active(ws.settings().store.baselines_dir, "clf")
    assert baseline is not None
    outputs = baseline.sample_outputs(0)
    assert outputs["output_probability"].shape == (5, 3) and outputs["output_probability"].dtype == np.float32
    np.testing.assert_array_equal(outputs[keys_name("output_probability")], [0, 1, 2])
    np.testing.assert_allclose(outputs["output_probability"].sum(axis=1), 1.0, rtol=1e-5)
    result = run_check(plan_for(ws.settings(), "clf"))
    assert result.verdict is Verdict.PASS, result.all_reasons()
    assert {o.name for o in result.outputs} == {"output_label", "output_probability", "output_probability:keys"}


def test_changed_zipmap_probabilities_fail_that_output(tmp_path: Path) -> None:
    ws = zipmap_workspace(tmp_path)
    capture.capture_baseline(plan_for(ws.settings(), "clf"))
    model = onnx.load(str(ZIPMAP))
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.name == "coefficients":
                attr.floats[:] = [v * 1.01 for v in attr.floats]
    ws.replace_model("clf", model)
    result = run_check(plan_for(ws.settings(), "clf"))
    verdicts = {o.name: o.verdict for o in result.outputs}
    assert verdicts["output_probability"] is Verdict.FAIL
    assert verdicts["output_probability:keys"] is Verdict.PASS


def test_maps_flatten_in_sorted_label_order_with_string_labels_as_bytes() -> None:
    values, keys = flatten_maps("p", "seq(map(string,tensor(float)))", [{"b": 0.25, "a": 0.75}, {"a": 0.5, "b": 0.5}])
    np.testing.assert_array_equal(values, np.array([[0.75, 0.25], [0.5, 0.5]], np.float32))
    assert keys.dtype == np.uint8 and bytes(keys) == b"a\x00b"
    with pytest.raises(ModelError, match=r"map 1 has labels \[0, 2\]"):
        flatten_maps("p", "seq(map(int64,tensor(float)))", [{0: 0.5, 1: 0.5}, {0: 0.5, 2: 0.5}])


def test_an_unsupported_output_type_is_an_error_verdict_naming_the_type(tmp_path: Path) -> None:
    def model(sequence: bool) -> onnx.ModelProto:
        node = helper.make_node(
            "SequenceConstruct" if sequence else "Concat", ["x", "x"], ["out"], **({} if sequence else {"axis": 0})
        )
        out = (
            helper.make_tensor_sequence_value_info("out", TensorProto.FLOAT, None)
            if sequence
            else helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
        )
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])]
        graph = helper.make_graph([node], "g", inputs, [out])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)

    ws = Workspace(tmp_path)
    ws.add_model("m", model(sequence=True))
    with pytest.raises(ModelError, match=r"'out' has type seq\(tensor\(float\)\)"):
        capture.capture_baseline(plan_for(ws.settings(), "m"))
    ws.replace_model("m", model(sequence=False))
    capture.capture_baseline(plan_for(ws.settings(), "m"))
    ws.replace_model("m", model(sequence=True))
    result = run_check(plan_for(ws.settings(), "m"))
    assert result.verdict is Verdict.ERROR
    (reason,) = result.reasons
    assert reason.code == "model_error" and "seq(tensor(float))" in reason.detail
