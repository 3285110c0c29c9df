"""``models[].checks.batch_invariance``: a batched run against single-sample runs, through ``onnxmon check``.

Ground truth comes from plain ONNX Runtime on the same files; the check must agree with it and
name the cause (lint's ``baked_batch`` node) or say why it does not apply (a fixed batch dim).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from monitor import cli
from tests.workspace import Workspace

CNN = Path(__file__).resolve().parent / "corpus" / "torch" / "cnn_legacy.onnx"


def flatten_model(leading: int, fixed_batch: bool = False) -> onnx.ModelProto:
    """x[batch, 4] -> Relu -> Reshape(shape=[leading, -1]): ``leading`` 0 copies the batch, 1 bakes it."""
    shape = numpy_helper.from_array(np.array([leading, -1], np.int64), "shape")
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Reshape", ["r", "shape"], ["y"], name="flatten"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1 if fixed_batch else "batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def onnxmon(*args: str) -> tuple[int, Any]:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = cli.main(list(args))
    text = buffer.getvalue()
    try:
        return code, json.loads(text)
    except json.JSONDecodeError:
        return code, text


def checked(ws: Workspace, name: str, batch: int = 8) -> tuple[int, dict[str, Any]]:
    ws.set(name, checks={"batch_invariance": {"batch": batch}})
    config = str(ws.write())
    code, _ = onnxmon("baseline", "capture", name, "-c", config, "--quiet")
    assert code == 0
    code, results = onnxmon("check", name, "-c", config, "--json", "--no-store")
    return code, results[0]


@pytest.mark.process
def test_a_model_with_a_dynamic_batch_is_batch_invariant(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("cnn", onnx.load(str(CNN)), count=3, dims={"batch": 1})
    code, result = checked(ws, "cnn", batch=4)
    assert code == 0, result["reasons"]
    facts = result["details"]["batch_invariance"]
    assert facts["applicable"] and facts["samples"] == [0, 1, 2, 0]  # three samples, repeated in order
    assert (
        facts["outputs"]["probabilities" if "probabilities" in facts["outputs"] else next(iter(facts["outputs"]))][
            "verdict"
        ]
        == "pass"
    )


@pytest.mark.process
def test_a_baked_batch_fails_with_batch_variant_naming_the_reshape(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    path = ws.add_model("baked", flatten_model(1), count=8, dims={"batch": 1})
    # ground truth: ORT runs batch 1 fine and folds a batch of 8 into one row
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": np.ones((8, 4), np.float32)})[0].shape == (1, 32)
    code, result = checked(ws, "baked")
    assert code == 1 and result["verdict"] == "fail"
    [reason] = [r for r in result["reasons"] if r["code"] == "batch_variant"]
    assert reason["output"] == "y"
    assert "(1, 32)" in reason["detail"] and "baked_batch at flatten" in reason["detail"]
    assert [h["code"] for h in result["details"]["lint"]["hazards"]] == ["baked_batch"]


@pytest.mark.process
def test_a_model_whose_batch_is_fixed_to_1_is_told_the_check_does_not_apply(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("fixed", flatten_model(0, fixed_batch=True), count=2, dims={})
    code, result = checked(ws, "fixed")
    assert code == 3 and result["verdict"] == "error"
    [reason] = [r for r in result["reasons"] if r["code"] == "config_error"]
    assert "not applicable" in reason["detail"] and "'x' axis 0 = 1" in reason["detail"]
    assert result["outputs"][0]["verdict"] == "pass"  # the comparison with the baseline still ran


@pytest.mark.process
def test_samples_that_interact_across_the_batch_are_caught(tmp_path: Path) -> None:
    """A mean over axis 0 (what training-mode BatchNorm does) makes each answer depend on the batch."""
    graph = helper.make_graph(
        [
            helper.make_node("ReduceMean", ["x"], ["m"], name="batch_mean", axes=[0], keepdims=1),
            helper.make_node("Sub", ["x", "m"], ["y"], name="center"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    ws = Workspace(tmp_path)
    ws.add_model("mixing", model, count=8, dims={"batch": 1})
    code, result = checked(ws, "mixing")
    assert code == 1
    [reason] = [r for r in result["reasons"] if r["code"] == "batch_variant"]
    assert "differs from 8 single-sample runs" in reason["detail"]
    assert result["details"]["batch_invariance"]["outputs"]["y"]["max_abs_error"] > 0.01


@pytest.mark.process
def test_check_prints_lint_warnings_under_the_model(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("baked", flatten_model(1), count=2, dims={"batch": 1})
    config = str(ws.write())
    assert onnxmon("baseline", "capture", "baked", "-c", config, "--quiet")[0] == 0
    code, text = onnxmon("check", "baked", "-c", config, "--no-store")
    assert code == 0  # a lint finding never changes the verdict
    assert "lint: error baked_batch at flatten" in text
    ws.set("baked", checks={"lint": False})
    code, results = onnxmon("check", "baked", "-c", str(ws.write()), "--json", "--no-store")
    assert "lint" not in results[0]["details"]


@pytest.mark.process
def test_the_lint_of_a_check_is_cached_by_model_digest(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    model = flatten_model(1)
    model.doc_string = str(tmp_path)  # bytes no other test has linted (the cache outlives a test)
    ws.add_model("baked", model, count=2, dims={"batch": 1})
    config = str(ws.write())
    assert onnxmon("baseline", "capture", "baked", "-c", config, "--quiet")[0] == 0
    first = onnxmon("check", "baked", "-c", config, "--json", "--no-store")[1][0]["details"]["lint"]
    second = onnxmon("check", "baked", "-c", config, "--json", "--no-store")[1][0]["details"]["lint"]
    assert (first["cached"], second["cached"]) == (False, True)
    assert first["hazards"] == second["hazards"]
    fixed = flatten_model(0)
    fixed.doc_string = str(tmp_path)
    ws.replace_model("baked", fixed)  # another file: linted afresh, and now clean
    third = onnxmon("check", "baked", "-c", config, "--json", "--no-store")[1][0]["details"]["lint"]
    assert third["cached"] is False and third["hazards"] == []


@pytest.mark.parametrize("batch", [1, 0, 5000])
def test_a_batch_out_of_range_is_a_config_error_with_its_path(
    tmp_path: Path, batch: int, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("m", flatten_model(0), count=2, dims={"batch": 1})
    ws.set("m", checks={"batch_invariance": {"batch": batch}})
    assert cli.main(["config", "validate", "-c", str(ws.write())]) == 2
    assert "checks.batch_invariance.batch" in capsys.readouterr().err


def test_baseline_import_refuses_batch_8_outputs_for_a_batch_1_model(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("fixed", flatten_model(0, fixed_batch=True), count=1, dims={})
    config = str(ws.write())
    sess = ort.InferenceSession(str(tmp_path / "models" / "fixed.onnx"), providers=["CPUExecutionProvider"])
    assert sess.get_outputs()[0].shape == [1, 4]  # ground truth: the model's output is batch 1
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, y=np.zeros((8, 4), np.float32))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli.main(["baseline", "import", "fixed", str(wrong), "-c", config]) == 2
    assert "wrong.npz: output 'y' has shape (8, 4), the model's output has shape (1, 4)" in err.getvalue()
    right = tmp_path / "right.npz"
    np.savez(right, y=np.zeros((1, 4), np.float32))
    assert onnxmon("baseline", "import", "fixed", str(right), "-c", config)[0] == 0


@pytest.mark.process
def test_a_batch_whose_inputs_would_not_fit_in_memory_is_refused_before_loading(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    big = flatten_model(0)
    big.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 2**20  # 4 MiB a sample
    ws.add_model("big", big, count=1, dims={"batch": 1})
    code, result = checked(ws, "big", batch=4096)  # 16 GiB stacked
    assert code == 3
    [reason] = [r for r in result["reasons"] if r["code"] == "config_error"]
    assert "lower checks.batch_invariance.batch" in reason["detail"]


@pytest.mark.process
def test_a_check_near_its_timeout_reads_the_lint_cache_but_never_lints_cold(tmp_path: Path) -> None:
    from monitor.check import run_check
    from monitor.config.plan import plan_for
    from monitor.exportcheck import with_export_checks

    ws = Workspace(tmp_path)
    model = flatten_model(1)
    model.doc_string = f"near the timeout {tmp_path}"
    ws.add_model("baked", model, count=2, dims={"batch": 1})
    ws.set("baked", checks={"lint": True, "batch_invariance": {"batch": 2}})
    config = str(ws.write())
    assert onnxmon("baseline", "capture", "baked", "-c", config, "--quiet")[0] == 0
    plan = plan_for(ws.settings(), "baked")
    result = run_check(plan)
    late = dataclasses.replace(result, details={}, reasons=())
    almost = lambda: late.started_at + plan.timeout_s * 0.9  # noqa: E731
    other = flatten_model(1)
    other.doc_string = f"never linted {tmp_path}"
    ws.replace_model("baked", other)
    again = with_export_checks(plan, dataclasses.replace(late, model_sha256=None), clock=almost)
    assert "too little of the timeout left" in again.details["lint"]["note"]
    past = with_export_checks(plan, late, clock=lambda: late.started_at + plan.timeout_s + 1)
    assert past.details["batch_invariance"] == {"note": "not run: the check used its whole timeout"}
