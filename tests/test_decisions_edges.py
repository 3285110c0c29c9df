"""Decisions at their edges (issue 42: #9, #10 and the int64 threshold), end to end through ONNX Runtime.

- ``argmax`` over an empty axis (a valid ``[1, 0]`` output) was ``internal_error`` on every check while
  ``config validate`` said ok: such an output has no rows, so it decides nothing.
- a row whose scores overflow to a tie of infinities "decided" numpy's first index, class 0: where the
  baseline's class was 0 no decision flipped and, under ``numeric: warn``, the run passed. Such a row
  (its max not finite) is undecidable, a flipped decision where the baseline decided.
- ``threshold`` on int64 compared in float64: ``2**53 + 1 > 2**53`` was "no". Integers compare exactly.

Ground truth is plain ONNX Runtime plus numpy and Python's integers on the same inputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from monitor import capture
from monitor.check import run_check
from monitor.config import crosscheck
from monitor.config.plan import plan_for
from monitor.files import benchsets, signature
from monitor.results import CheckResult, Verdict
from tests.workspace import Workspace


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any]) -> onnx.ModelProto:
    model = helper.make_model(
        helper.make_graph(nodes, "edge", inputs, outputs, inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def empty_classes() -> onnx.ModelProto:
    """``scores = x[:, 0:0]``: a valid ``[batch, 0]`` output (no classes), beside ``y = x``."""
    ints = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("s", 0), ("e", 0), ("a", 1))]
    return _model(
        [helper.make_node("Slice", ["x", "s", "e", "a"], ["scores"]), helper.make_node("Identity", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 0]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
        ],
        ints,
    )


def scores(weights: list[float]) -> onnx.ModelProto:
    """``logits = (|x| + 2) * weights``, one row per sample: weights of 3e38 overflow float32 to +inf."""
    return _model(
        [
            helper.make_node("Abs", ["x"], ["magnitude"]),
            helper.make_node("Add", ["magnitude", "two"], ["shifted"]),
            helper.make_node("Mul", ["shifted", "w"], ["logits"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        [
            numpy_helper.from_array(np.array([2.0], np.float32), "two"),
            numpy_helper.from_array(np.array(weights, np.float32), "w"),
        ],
    )


def counts(step: int) -> onnx.ModelProto:
    """``y = 2**53 + step * (x > 0)`` in int64: ``2**53`` or ``2**53 + step``, which float64 cannot tell apart."""
    return _model(
        [
            helper.make_node("Greater", ["x", "zero"], ["positive"]),
            helper.make_node("Cast", ["positive"], ["gate"], to=TensorProto.INT64),
            helper.make_node("Mul", ["gate", "step"], ["lift"]),
            helper.make_node("Add", ["lift", "base"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, ["batch", 4])],
        [
            numpy_helper.from_array(np.array([0.0], np.float32), "zero"),
            numpy_helper.from_array(np.array([step], np.int64), "step"),
            numpy_helper.from_array(np.array([2**53], np.int64), "base"),
        ],
    )


def captured(tmp_path: Path, model: onnx.ModelProto, decisions: dict[str, Any], **fields: Any) -> Workspace:
    ws = Workspace(tmp_path)
    ws.add_model("m", model, count=3, dims={"batch": 8}, decisions=decisions, **fields)
    capture.capture_baseline(plan_for(ws.settings(), "m"))
    return ws


def rechecked(ws: Workspace, model: onnx.ModelProto) -> CheckResult:
    ws.replace_model("m", model)
    return run_check(plan_for(ws.settings(), "m"))


def plain_outputs(ws: Workspace, model: onnx.ModelProto, name: str) -> list[np.ndarray]:
    bench = benchsets.open_benchset(ws.settings().store.benchsets_dir, "m-bench")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [session.run([name], bench.load_sample(i))[0] for i in range(len(bench))]


def codes(result: CheckResult) -> set[str]:
    return {r.code for r in result.all_reasons()}


def test_argmax_over_an_empty_axis_decides_nothing_and_the_check_passes(tmp_path: Path) -> None:
    model = empty_classes()
    ws = captured(tmp_path, model, {"scores": {"kind": "argmax", "axis": -1}})
    assert all(o.shape == (8, 0) for o in plain_outputs(ws, model, "scores"))  # what ORT gives: no classes
    settings = ws.settings()
    assert crosscheck.problems(settings, signature.output_names, signature.output_types) == []  # validate: ok
    result = run_check(plan_for(settings, "m"))
    assert result.verdict is Verdict.PASS, result.all_reasons()
    decided = {o.name: o.decisions for o in result.outputs}["scores"]
    assert decided is not None and (decided.total, decided.flipped) == (0, 0)


def test_a_row_that_overflows_to_a_tie_of_infinities_is_a_flipped_decision_under_numeric_warn(tmp_path: Path) -> None:
    pristine, overflowing = scores([2.0, 1.0, 0.5]), scores([3e38, 3e38, 0.0])
    ws = captured(tmp_path, pristine, {"logits": {"kind": "argmax"}}, tolerance={"default": {"numeric": "warn"}})
    before, after = plain_outputs(ws, pristine, "logits"), plain_outputs(ws, overflowing, "logits")
    # numpy's ground truth: every row is a tie of +inf, and its argmax is class 0, the baseline's class
    assert all(np.isposinf(a[:, :2]).all() and (np.argmax(a, -1) == 0).all() for a in after)
    assert all((np.argmax(b, -1) == 0).all() and np.isfinite(b).all() for b in before)
    result = rechecked(ws, overflowing)
    (logits,) = result.outputs
    rows = sum(a.shape[0] for a in after)
    assert logits.decisions is not None and (logits.decisions.total, logits.decisions.flipped) == (rows, rows)
    assert result.verdict is Verdict.FAIL and "decision_changed" in codes(result), result.all_reasons()


def test_one_infinite_or_nan_row_among_finite_ones_flips_only_that_row(tmp_path: Path) -> None:
    from monitor.compare.accumulate import Comparison
    from monitor.config.decisions import Decision
    from monitor.results import AppliedTolerance

    expected = np.array([[3.0, 1.0, 0.0], [0.0, 2.0, 1.0], [1.0, 0.0, 5.0], [4.0, 0.0, 0.0]], np.float32)
    actual = expected.copy()
    actual[0] = [np.inf, np.inf, 0.0]  # numpy: class 0, the baseline's
    actual[2] = [-np.inf, -np.inf, -np.inf]  # numpy: class 0
    actual[3] = [np.inf, 0.0, 0.0]  # numpy: class 0; an overflow all the same
    comparison = Comparison(
        ["y"], ["y"], {"y": AppliedTolerance(atol=1e-6, rtol=0.0, numeric="warn")}, samples=1,
        elements={"y": actual.size}, decisions={"y": Decision(kind="argmax")},
    )  # fmt: skip
    comparison.feed({"y": actual}, {"y": expected})
    (y,) = comparison.finish()
    assert y.decisions is not None and y.decisions.flips == ((0, 0), (0, 2), (0, 3))
    assert y.verdict is Verdict.FAIL


def test_an_int64_threshold_compares_exactly_where_float64_cannot(tmp_path: Path) -> None:
    threshold = {"y": {"kind": "threshold", "value": 2**53}}
    pristine, lifted = counts(0), counts(1)
    ws = captured(tmp_path, pristine, threshold, tolerance={"default": {"numeric": "warn"}})
    before, after = plain_outputs(ws, pristine, "y"), plain_outputs(ws, lifted, "y")
    # Python's integers are the ground truth; float64 rounds 2**53 + 1 down and sees no decision change
    exact = [np.array([int(v) > 2**53 for v in a.ravel()]) for a in after]
    assert sum(int(e.sum()) for e in exact) > 0
    assert all(((a.astype(np.float64) > 2.0**53) == (b > 2**53)).all() for a, b in zip(after, before, strict=True))
    result = rechecked(ws, lifted)
    (y,) = result.outputs
    assert y.decisions is not None and y.decisions.flipped == sum(int(e.sum()) for e in exact)
    assert result.verdict is Verdict.FAIL and "decision_changed" in codes(result), result.all_reasons()


def test_an_integer_threshold_beyond_float64_is_kept_exactly(tmp_path: Path) -> None:
    """``value: 9007199254740993`` read as a float would be ``2**53``, and ``2**53 + 1 > 2**53`` a false yes."""
    ws = captured(tmp_path, counts(0), {"y": {"kind": "threshold", "value": 2**53 + 1}})
    decision = ws.settings().models[0].decisions["y"]
    assert decision.value == 2**53 + 1 and isinstance(decision.value, int)
    result = rechecked(ws, counts(1))  # 2**53 + 1 > 2**53 + 1 is no, as 2**53 > 2**53 + 1 was
    (y,) = result.outputs
    assert y.decisions is not None and y.decisions.total > 0 and y.decisions.flipped == 0
    assert "exact_mismatch" in codes(result) and "decision_changed" not in codes(result)
