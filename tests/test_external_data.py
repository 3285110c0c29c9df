"""A model whose weights live in an external-data file: that file is part of the model's identity.

The ``.onnx`` of such a model holds only the graph; editing a weight changes the data file and
leaves the ``.onnx`` hash as it was. Each data file is hashed into the baseline and compared on
every check, and a change is ``model_changed`` naming the file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from monitor import capture
from monitor.check import external_data_changes, run_check
from monitor.config.plan import plan_for
from monitor.results import Verdict
from tests.workspace import Workspace


def external_model(path: Path) -> None:
    """y = x @ W with W (16x8 float) saved in ``weights.bin`` beside ``path``."""
    weight = numpy_helper.from_array(np.linspace(-1, 1, 128, dtype=np.float32).reshape(16, 8), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)


def test_an_edited_external_data_file_fails_as_model_changed_naming_the_file(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("ext", helper.make_model(helper.make_graph([], "placeholder", [], [])))
    model_path = tmp_path / "models" / "ext.onnx"
    external_model(model_path)
    capture.capture_baseline(plan_for(ws.settings(), "ext"))
    assert run_check(plan_for(ws.settings(), "ext")).verdict is Verdict.PASS
    onnx_bytes = model_path.read_bytes()
    data = bytearray((model_path.parent / "weights.bin").read_bytes())
    data[40] ^= 0x01
    (model_path.parent / "weights.bin").write_bytes(bytes(data))
    assert model_path.read_bytes() == onnx_bytes  # the .onnx itself did not change
    result = run_check(plan_for(ws.settings(), "ext"))
    assert result.verdict is Verdict.FAIL and result.attribution == "model_changed"
    (reason,) = [r for r in result.reasons if r.code == "model_changed"]
    assert "weights.bin" in reason.detail


def test_external_data_files_added_removed_or_changed_are_each_named() -> None:
    reasons = external_data_changes(
        "m.onnx", {"a.bin": "1" * 64, "new.bin": "2" * 64}, {"a.bin": "3" * 64, "gone.bin": "4" * 64}
    )
    details = sorted(r.detail for r in reasons)
    assert [r.code for r in reasons] == ["model_changed"] * 3
    assert any("a.bin" in d and "sha256" in d for d in details)
    assert any("now references external data new.bin" in d for d in details)
    assert any("no longer references external data gone.bin" in d for d in details)
    assert external_data_changes("m.onnx", {"a.bin": "1" * 64}, {"a.bin": "1" * 64}) == []
