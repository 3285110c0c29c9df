"""Model files ONNX Runtime refuses, through every command that reads a model (issue 30, B5 and a partial).

An initializer holding fewer bytes than its dims declare made ``diff-model`` and ``check`` print a
traceback (``modeldiff/values.py as_array: cannot reshape``), ``check`` record nothing and exit 1, and
the daemon record ``internal_error``; ``lint`` said "no export hazards" on it, and on cyclic graphs and
impossible shapes. Each is now a model error (``error/model_error`` with ``model_changed`` for a
check), one line, never a traceback, and ``lint`` reports ``model_invalid``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from monitor import capture, jsonsafe
from monitor.cli import main
from monitor.config.plan import plan_for
from monitor.daemon.root import Daemon
from monitor.results import Verdict
from monitor.store import Store
from tests import modelzoo
from tests.workspace import Workspace


def truncated(model: onnx.ModelProto, name: str = "w1", missing: int = 8) -> onnx.ModelProto:
    """``model`` with initializer ``name`` stored ``missing`` bytes short of what its dims declare."""
    broken = onnx.ModelProto()
    broken.CopyFrom(model)
    for tensor in broken.graph.initializer:
        if tensor.name == name:
            data = numpy_helper.to_array(tensor).tobytes()
            tensor.ClearField("float_data")
            tensor.raw_data = data[:-missing]
    return broken


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    monkeypatch.chdir(tmp_path)
    workspace = Workspace(tmp_path)
    workspace.add_model("clf", modelzoo.classifier())
    workspace.extra["daemon"] = {"startup_spread": 0}
    capture.capture_baseline(plan_for(workspace.settings(), "clf"))
    onnx.save(modelzoo.classifier(), str(tmp_path / "good.onnx"))
    onnx.save(truncated(modelzoo.classifier()), str(tmp_path / "short.onnx"))
    workspace.replace_model("clf", truncated(modelzoo.classifier()))
    workspace.write()
    return workspace


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.process
def test_check_of_a_truncated_initializer_is_a_recorded_model_error_with_model_changed(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = cli(capsys, "check", "clf", "-c", str(ws.config_file), "--json")
    assert "Traceback" not in out and code == 3, out[-2000:]
    record = jsonsafe.loads(out[: out.rindex("]") + 1])[0]
    codes = [r["code"] for r in record["reasons"]]
    assert record["verdict"] == "error" and codes[0] == "model_error" and "model_changed" in codes, codes
    assert "w1" in " ".join(r["detail"] for r in record["reasons"])
    assert record["run_id"] is not None


@pytest.mark.process
def test_the_daemon_records_a_truncated_initializer_as_a_model_error_not_an_internal_error(ws: Workspace) -> None:
    settings = ws.settings()
    with Store(settings.store.url) as store:
        store.upgrade()
        daemon = Daemon(settings, store=store)
        try:
            result = daemon.run_now("clf")
        finally:
            daemon.stop()
        assert [r.verdict for r in store.runs("clf", limit=5)] == [Verdict.ERROR]
    codes = [r.code for r in result.reasons]
    assert result.verdict is Verdict.ERROR and "model_error" in codes and "model_changed" in codes, codes
    assert "internal_error" not in codes


def test_diff_model_of_a_truncated_initializer_says_so_in_one_line(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = cli(capsys, "diff-model", str(ws.root / "good.onnx"), str(ws.root / "short.onnx"))
    assert code == 2 and "Traceback" not in out, out[-2000:]
    assert "short.onnx" in out and "'w1'" in out and "2040" in out and "2048" in out


@pytest.mark.process
def test_localize_of_a_truncated_initializer_says_so_in_one_line(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = cli(capsys, "localize", "clf", "-c", str(ws.config_file))
    assert code in (2, 3) and "Traceback" not in out and "w1" in out, out[-2000:]


def _cyclic() -> onnx.ModelProto:
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "t2"], ["t1"], name="add"),
            helper.make_node("Relu", ["t1"], ["t2"], name="relu"),
        ],
        "cyclic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("t1", TensorProto.FLOAT, [1, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", modelzoo.OPSET)])


def _incompatible() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["y"], name="add")],
        "incompatible",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones(4, dtype=np.float32), "c")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", modelzoo.OPSET)])


def _out_of_bounds() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Concat", ["x", "x"], ["y"], name="concat", axis=5)],
        "out_of_bounds",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", modelzoo.OPSET)])


@pytest.mark.parametrize(
    ("build", "said"),
    [
        (lambda: truncated(modelzoo.classifier()), "w1"),
        (_cyclic, "has a cycle: nodes add, relu"),
        (_incompatible, "Incompatible dimensions"),
        (_out_of_bounds, "axis"),
    ],
    ids=["truncated_initializer", "cyclic_graph", "incompatible_dims", "out_of_bounds_axis"],
)
def test_lint_reports_a_model_onnx_runtime_refuses_as_an_error(
    build: object, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "refused.onnx"
    onnx.save(build(), str(path))  # type: ignore[operator]
    code, out = cli(capsys, "lint", str(path))
    assert code == 1 and "Traceback" not in out, out
    assert "model_invalid" in out and said in out and "no export hazards" not in out, out


# --- B6: a reference that shares nothing with the model is no all-clear ---------------------------


def _renamed(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every node output renamed: the same numbers under names the model never uses."""
    other = onnx.ModelProto()
    other.CopyFrom(model)
    names = {out: f"other_{out}" for node in other.graph.node for out in node.output}
    for node in other.graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names[n] for n in node.output]
    for output in other.graph.output:
        output.name = names.get(output.name, output.name)
    return other


@pytest.mark.process
@pytest.mark.parametrize("reference", ["empty", "renamed"])
def test_localize_against_a_reference_that_shares_nothing_exits_with_the_reason(
    reference: str, ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    ws.replace_model("clf", modelzoo.classifier())
    path = ws.root / f"{reference}.onnx"
    if reference == "empty":
        path.write_bytes(b"")
    else:
        onnx.save(_renamed(modelzoo.classifier()), str(path))
    code, out = cli(
        capsys, "localize", "clf", "-c", str(ws.config_file), "--against", "model", "--reference", str(path)
    )
    assert code in (2, 3) and "Traceback" not in out, out[-2000:]
    assert "first changed none" not in out and path.name in out, out[-2000:]
    assert ("no graph" if reference == "empty" else "shares no tensor") in out, out[-2000:]


def test_sqnr_against_an_empty_float_model_exits_with_the_reason(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    ws.replace_model("clf", modelzoo.classifier())
    empty = ws.root / "empty.onnx"
    empty.write_bytes(b"")
    code, out = cli(capsys, "sqnr", "clf", "-c", str(ws.config_file), "--float", str(empty))
    assert code in (2, 3) and "Traceback" not in out and "no graph" in out, out[-2000:]
    onnx.save(_renamed(modelzoo.classifier()), str(ws.root / "renamed.onnx"))
    code, out = cli(capsys, "sqnr", "clf", "-c", str(ws.config_file), "--float", str(ws.root / "renamed.onnx"))
    assert code in (2, 3) and "shares no tensor" in out, out[-2000:]
