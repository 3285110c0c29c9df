"""Model Explorer node data keyed as model-explorer-onnx draws the nodes, unnamed ones included.

The adapter (model-explorer-onnx 0.4) runs ``onnx_ir``'s ``NameFixPass`` before drawing: that pass is
the ground truth here, run on the same model (it comes with onnxscript, the ``torch`` extra: skipped
without it, mandatory under ``ONNXMON_REQUIRE=torch``). onnxmon's own names (``<Op>_<index>``) must
never reach the file for a node the adapter calls otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from monitor.localize import explorer
from tests import modelzoo
from tests.conftest import onnxmon, unavailable
from tests.workspace import Workspace


def adapter_names(model: onnx.ModelProto) -> list[str]:
    """The top-level node names model-explorer-onnx draws: ``onnx_ir``'s ``NameFixPass`` on the model."""
    try:
        import onnx_ir as ir
        from onnx_ir.passes.common import NameFixPass
    except ImportError as exc:
        unavailable("torch", f"onnx_ir (model-explorer-onnx's IR, with onnxscript) is not installed: {exc}")
        raise AssertionError("unreachable") from exc
    loaded = ir.serde.deserialize_model(model)
    NameFixPass()(loaded)
    return [node.name for node in loaded.graph]


def awkward_model() -> onnx.ModelProto:
    """Unnamed nodes, a duplicate name, a node already called ``node_1`` and an If whose branches are unnamed."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])

    def branch(name: str, op: str) -> onnx.GraphProto:
        out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [2])
        nodes = [helper.make_node(op, ["a"], ["b"]), helper.make_node("Identity", ["b"], [f"{name}_out"])]
        return helper.make_graph(nodes, name, [], [out])

    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),  # unnamed
        helper.make_node("Neg", ["a"], ["c"], name="node_1"),  # the name a naive counter would give next
        helper.make_node("Abs", ["c"], ["d"]),  # unnamed
        helper.make_node("ReduceSum", ["d"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"], name="dup"),
        helper.make_node(
            "If", ["cond"], ["e"], name="dup", then_branch=branch("then", "Exp"), else_branch=branch("else", "Sin")
        ),
        helper.make_node("Add", ["e", "d"], ["y"]),  # unnamed, after the branches' unnamed nodes
    ]
    zero = numpy_helper.from_array(np.zeros((), np.float32), "zero")
    graph = helper.make_graph(nodes, "awkward", [x], [y], [zero])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_ids_follow_the_adapters_naming_pass() -> None:
    model = awkward_model()
    onnx.checker.check_model(model)
    drawn = adapter_names(model)
    assert explorer.adapter_names(model.graph) == drawn
    ids = explorer.adapter_ids(model.graph)
    assert ids["Relu_0"] == drawn[0] == "node" and ids["node_1"] == "node_1"
    assert ids["Abs_2"] == drawn[2] and ids["Add_6"] == drawn[6], "after the If's branches' unnamed nodes"


@pytest.mark.process
def test_node_data_of_a_model_with_unnamed_nodes_matches_its_nodes_and_marks_the_first_changed(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    pristine = modelzoo.deep_mlp(seed=3, width=16, layers=12)
    for node in pristine.graph.node:
        node.name = ""  # every node unnamed, as many exporters leave them
    ws.add_model("mlp", modelzoo.perturb_initializer(pristine, "w6", 0.01), dims={"batch": 4})
    ws.write()
    reference = modelzoo.save(pristine, tmp_path / "reference.onnx")
    target = tmp_path / "nodes.json"
    result = onnxmon("localize", "mlp", "--reference", str(reference), "--json", "--model-explorer", str(target),
                     "-c", str(ws.config_file))  # fmt: skip
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    model = onnx.load(str(ws.root / "models" / "mlp.onnx"))
    drawn = adapter_names(model)
    results = json.loads(target.read_text(encoding="utf-8"))[model.graph.name]["results"]
    assert results and set(results) <= set(drawn), "every key is a node the adapter draws"
    first = report["first_changed"]["name"]  # onnxmon's name: <Op>_<index>
    index = int(first.rsplit("_", 1)[1])
    assert results[drawn[index]]["bgColor"] == explorer.FIRST_CHANGED
    downstream = [drawn[i] for i in range(index + 1, len(drawn)) if drawn[i] in results]
    assert downstream and all(results[n].get("bgColor") != explorer.FIRST_CHANGED for n in downstream)
    assert any(results[n].get("bgColor") in (explorer.OUT_OF_TOLERANCE, explorer.CHANGED) for n in downstream)
