"""A model file replaced under a baseline: float inputs fitted, and model_changed said even on error.

An fp16 build converted without ``keep_io_types`` takes float16 inputs; the benchmark set holds
the float32 inputs the model was validated with, so the replay casts float to float (never
integers) and records the cast. A model swapped for one with other inputs cannot be measured at
all, and the check still names the changed file instead of a bare ``model_error``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from monitor import capture
from monitor.check import run_check
from monitor.config.plan import plan_for
from monitor.results import Verdict
from monitor.runtime.session import Session
from tests.workspace import Workspace


def scale_model(dtype: int = TensorProto.FLOAT, factor: float = 2.0, input_name: str = "x") -> onnx.ModelProto:
    """y = x * factor, in ``dtype`` end to end."""
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    graph = helper.make_graph(
        [helper.make_node("Mul", [input_name, "k"], ["y"])],
        "scale",
        [helper.make_tensor_value_info(input_name, dtype, ["batch", 4])],
        [helper.make_tensor_value_info("y", dtype, ["batch", 4])],
        [onnx.numpy_helper.from_array(np.array([factor], dtype=np_dtype), "k")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def captured(tmp_path: Path) -> Workspace:
    ws = Workspace(tmp_path)
    ws.add_model("m", scale_model())
    capture.capture_baseline(plan_for(ws.settings(), "m"))
    return ws


def test_float32_inputs_are_cast_to_a_float16_model_and_the_cast_is_recorded(tmp_path: Path) -> None:
    path = tmp_path / "half.onnx"
    onnx.save(scale_model(TensorProto.FLOAT16), str(path))
    session = Session(path, [], None)
    out = session.run({"x": np.ones((2, 4), dtype=np.float32)})
    assert out["y"].dtype == np.float16 and np.all(out["y"] == 2)
    assert session.input_casts == {"x": "float32->float16"}


def test_integer_inputs_are_never_cast(tmp_path: Path) -> None:
    path = tmp_path / "int.onnx"
    onnx.save(scale_model(TensorProto.INT32), str(path))
    session = Session(path, [], None)
    try:
        session.run({"x": np.ones((2, 4), dtype=np.int64)})
    except Exception as exc:
        assert "dtype int64, model wants int32" in str(exc)
    else:
        raise AssertionError("an int64 sample must not be cast to an int32 input")
    assert session.input_casts == {}


def test_a_float16_build_is_measured_and_its_cast_is_in_the_details(tmp_path: Path) -> None:
    ws = captured(tmp_path)
    ws.replace_model("m", scale_model(TensorProto.FLOAT16))
    result = run_check(plan_for(ws.settings(), "m"))
    assert result.details["input_casts"] == {"x": "float32->float16"}
    assert result.attribution == "model_changed"
    assert {r.code for r in result.reasons} == {"model_changed"}


def test_a_swapped_model_that_cannot_be_measured_still_says_model_changed(tmp_path: Path) -> None:
    ws = captured(tmp_path)
    ws.replace_model("m", scale_model(input_name="other"))
    result = run_check(plan_for(ws.settings(), "m"))
    assert result.verdict is Verdict.ERROR
    codes = [r.code for r in result.reasons]
    assert codes[0] == "model_error" and "model_changed" in codes, codes
    changed = next(r for r in result.reasons if r.code == "model_changed")
    assert "m.onnx" in changed.detail and result.model_sha256 is not None


def test_an_error_on_the_baselines_own_model_adds_nothing(tmp_path: Path) -> None:
    ws = captured(tmp_path)
    for sample in (tmp_path / "benchsets").rglob("*.npy"):
        sample.write_bytes(b"not an npy file")
    result = run_check(plan_for(ws.settings(), "m"))
    assert result.verdict is Verdict.ERROR
    assert "model_changed" not in {r.code for r in result.reasons}, result.reasons


# --- the static model diff in a check (issue 13) ---------------------------------------------------


def test_a_changed_weight_is_named_with_its_reader_in_the_model_changed_reason(tmp_path: Path) -> None:
    ws = captured(tmp_path)
    ws.replace_model("m", scale_model(factor=2.5))
    result = run_check(plan_for(ws.settings(), "m"))
    changed = next(r for r in result.reasons if r.code == "model_changed")
    assert "k changed, read by " in changed.detail and "(Mul)" in changed.detail, changed.detail
    (tensor,) = result.details["model_diff"]["changed_tensors"]
    assert tensor["name"] == "k" and [c["op_type"] for c in tensor["consumers"]] == ["Mul"], tensor


def test_a_float16_build_is_summarized_as_a_conversion(tmp_path: Path) -> None:
    ws = captured(tmp_path)
    ws.replace_model("m", scale_model(TensorProto.FLOAT16))
    result = run_check(plan_for(ws.settings(), "m"))
    summary = result.details["model_diff"]["summary"]
    assert any("float32→float16" in line for line in summary), summary


def test_a_baseline_without_a_manifest_or_with_a_damaged_one_still_gives_a_verdict(tmp_path: Path) -> None:
    ws = captured(tmp_path)
    (manifest,) = (tmp_path / "baselines").rglob("model_manifest.json")
    manifest.write_text('{"format": 1, "tensors": "not a list"}')
    ws.replace_model("m", scale_model(factor=3.0))
    result = run_check(plan_for(ws.settings(), "m"))
    assert result.verdict is Verdict.FAIL and result.attribution == "model_changed"
    assert "sha256" in result.details["model_diff"]["note"], result.details["model_diff"]
    manifest.unlink()
    import json

    (meta_file,) = (tmp_path / "baselines").rglob("baseline.json")
    meta = json.loads(meta_file.read_text())
    del meta["files"]["model_manifest.json"]
    meta_file.write_text(json.dumps(meta))
    result = run_check(plan_for(ws.settings(), "m"))
    assert result.verdict is Verdict.FAIL
    assert "keeps no model manifest" in result.details["model_diff"]["note"]


def test_diff_model_against_the_active_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from monitor import cli

    ws = captured(tmp_path)
    config = str(ws.write())
    assert cli.main(["diff-model", "--baseline", "m", "-c", config]) == 0
    assert capsys.readouterr().out.startswith("identical: ")
    candidate = tmp_path / "candidate.onnx"
    onnx.save(scale_model(factor=4.0), str(candidate))
    assert cli.main(["diff-model", "--baseline", "m", str(candidate), "-c", config, "--json"]) == 1
    import json

    (tensor,) = json.loads(capsys.readouterr().out)["changed_tensors"]
    assert tensor["name"] == "k" and tensor["old_stats"]["max"] == 2.0 and tensor["new_stats"]["max"] == 4.0
    assert cli.main(["diff-model", "--baseline", "nope", "-c", config]) == 2
    assert "nope" in capsys.readouterr().err
    assert cli.main(["diff-model", str(candidate)]) == 2  # one file and no --baseline: a usage error
    assert cli.main(["diff-model", "--baseline", "m", str(candidate), str(candidate), "-c", config]) == 2
