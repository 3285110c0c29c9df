"""``onnxmon localize MODEL --against …`` through the CLI: every spelling of a reference model.

The issue's spelling is ``--against baseline|unoptimized|model PATH``; the CLI takes it as
``--against model --reference PATH`` or ``--against model:PATH``, and keeps ``--against PATH``
(and ``--reference PATH`` alone). Each must localize against that file (the report says
``against: model`` and names it); a mistake in the spelling is a usage error (exit 2) that names
the option and the file, never a crash (3) or a verdict (1).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import onnx
import pytest

from tests import modelzoo
from tests.conftest import onnxmon
from tests.workspace import Workspace


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, Path]:
    """A deployed MLP whose ``w20`` moved by 1% and, beside it, the pristine file as the reference."""
    root = tmp_path_factory.mktemp("localize-cli")
    ws = Workspace(root)
    pristine = modelzoo.deep_mlp(seed=3, width=16, layers=30)
    ws.add_model("mlp", modelzoo.perturb_initializer(pristine, "w20", 0.01), dims={"batch": 4})
    ws.write()
    reference = modelzoo.save(pristine, root / "reference.onnx")
    return ws, reference


@pytest.mark.process
@pytest.mark.parametrize(
    "spelling",
    [
        ("--against", "model", "--reference", "{ref}"),
        ("--against", "model:{ref}"),
        ("--against", "{ref}"),
        ("--reference", "{ref}"),
    ],
    ids=["model --reference", "model:PATH", "PATH", "--reference alone"],
)
def test_every_spelling_of_a_reference_model_localizes_against_that_file(
    workspace: tuple[Workspace, Path], spelling: tuple[str, ...]
) -> None:
    ws, reference = workspace
    args = [a.format(ref=reference) for a in spelling]
    result = onnxmon("localize", "mlp", *args, "--json", "-c", str(ws.config_file))
    assert result.exit_code == 1, result.output  # a node is out of tolerance
    report = json.loads(result.stdout)
    assert report["against"] == "model" and report["reference_model"] == str(reference)
    for answer in (report["first_changed"], report["first_out_of_tolerance"]):
        assert "matmul_20" in {answer["name"], *answer["fused_from"]}, answer


@pytest.mark.parametrize(
    ("spelling", "words"),
    [
        (("--against", "model"), "--reference PATH"),
        (("--against", "baseline", "--reference", "{ref}"), "--reference goes with --against model"),
        (("--against", "{ref}", "--reference", "{ref}"), "drop --reference"),
        (("--against", "model:"), "model:PATH"),
        (("--against", "model", "--reference", "{missing}"), "no such model file"),
        (("--against", "model:{missing}"), "no such model file"),
        (("--against", "nonsense"), "'nonsense'"),
        (("--graph-view", "fused"), "--graph-view"),
    ],
    ids=["model alone", "baseline+reference", "path+reference", "empty model:", "missing --reference",
         "missing model:PATH", "unknown word", "bad view"],
)  # fmt: skip
def test_a_wrong_spelling_is_a_usage_error_naming_what_was_expected(
    workspace: tuple[Workspace, Path], spelling: tuple[str, ...], words: str
) -> None:
    ws, reference = workspace
    missing = ws.root / "no such dir" / "fp32 'model'.onnx"
    args = [a.format(ref=reference, missing=missing) for a in spelling]
    result = onnxmon("localize", "mlp", *args, "-c", str(ws.config_file))
    assert result.exit_code == 2, result.output
    assert words in " ".join(result.output.split()), result.output


@pytest.mark.process
def test_against_unoptimized_and_the_optimized_view_name_model_nodes(workspace: tuple[Workspace, Path]) -> None:
    ws, _ = workspace
    result = onnxmon("localize", "mlp", "--against", "unoptimized", "--graph-view", "optimized", "--json",
                    "-c", str(ws.config_file))  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    assert report["against"] == "unoptimized" and report["graph_view"] == "optimized"
    model_nodes = {n.name for n in onnx.load(str(ws.root / "models" / "mlp.onnx")).graph.node}
    for node in report["profile"]:
        assert {node["name"], *node["fused_from"]} <= model_nodes, node
    fused = [n for n in report["profile"] if n["fused_from"]]
    assert fused, "ORT fuses MatMul+Add into Gemm: the fused node says which model nodes it replaced"
    assert all(n["optimized_node"] and n["optimized_node"] not in model_nodes for n in fused)


def noisy_model() -> onnx.ModelProto:
    """x -> MatMul -> Relu -> [mask: RandomUniformLike -> Less -> Cast] Mul -> MatMul -> Tanh: random at one node."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.5, (8, 8)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.normal(0, 0.5, (8, 4)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array(0.7, np.float32), "keep"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("RandomUniformLike", ["r"], ["u"], name="noise"),
        helper.make_node("Less", ["u", "keep"], ["m"], name="keep_mask"),
        helper.make_node("Cast", ["m"], ["mf"], name="mask_float", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["r", "mf"], ["d"], name="drop"),
        helper.make_node("MatMul", ["d", "w2"], ["z"], name="fc2"),
        helper.make_node("Tanh", ["z"], ["y"], name="out"),
    ]
    graph = helper.make_graph(
        nodes,
        "noisy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.process
def test_against_self_names_the_first_node_that_differs_between_identical_runs(tmp_path: Path) -> None:
    import numpy as np
    import onnxruntime as ort

    ws = Workspace(tmp_path)
    path = ws.add_model("noisy", noisy_model(), dims={"batch": 16})
    ws.write()
    plain = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = {"x": np.ones((16, 8), np.float32)}
    assert not np.array_equal(plain.run(None, x)[0], plain.run(None, x)[0])  # ground truth: random each run
    result = onnxmon("localize", "noisy", "--against", "self", "--runs", "4", "--json", "-c", str(ws.config_file))
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    assert report["against"] == "self"
    assert report["first_changed"]["name"] == "noise" and not report["first_changed"]["inputs_changed"]
    spread = {n["name"]: n["max_abs_error"] for n in report["profile"]}
    assert spread["fc1"] == 0 and spread["relu"] == 0  # upstream of the random op: identical runs agree
    assert spread["noise"] > 0 and spread["out"] > 0
    assert "noise" in report["nondeterministic_reference"] or "u" in report["nondeterministic_reference"]


@pytest.mark.process
def test_against_self_on_a_deterministic_model_finds_nothing(workspace: tuple[Workspace, Path]) -> None:
    ws, _ = workspace
    result = onnxmon("localize", "mlp", "--against", "self", "--runs", "2", "--json", "-c", str(ws.config_file))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["first_changed"] is None and report["first_out_of_tolerance"] is None
    assert any("deterministic" in n for n in report["notes"])


# Model Explorer's node-data format (ModelNodeData -> GraphNodeData -> NodeDataResult / GradientItem /
# ThresholdItem) as its node_data_builder.py defines it, written out as a JSON Schema.
_CSS = {"type": "string", "minLength": 1}
GRAPH_NODE_DATA = {
    "type": "object",
    "required": ["results"],
    "additionalProperties": False,
    "properties": {
        "results": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["value"],
                "additionalProperties": False,
                "properties": {"value": {"type": "number"}, "bgColor": _CSS, "textColor": _CSS},
            },
        },
        "thresholds": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["value", "bgColor"],
                "additionalProperties": False,
                "properties": {"value": {"type": "number"}, "bgColor": _CSS, "textColor": _CSS},
            },
        },
        "gradient": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["stop"],
                "additionalProperties": False,
                "properties": {
                    "stop": {"type": "number", "minimum": 0, "maximum": 1},
                    "bgColor": _CSS,
                    "textColor": _CSS,
                },
            },
        },
        "hideInAggregatedStatsTable": {"type": "boolean"},
        "hideInChildrenStatsTable": {"type": "boolean"},
        "hideAggregatedStats": {"type": "array", "items": {"enum": ["min", "max", "sum", "avg"]}},
        "showExpandedSummaryOnGroupNode": {"type": "boolean"},
        "showLabelCountColumnsInChildrenStatsTable": {"type": "boolean"},
    },
}
MODEL_NODE_DATA = {"type": "object", "minProperties": 1, "additionalProperties": GRAPH_NODE_DATA}


@pytest.mark.process
def test_model_explorer_node_data_follows_its_format_and_marks_the_localized_node(
    workspace: tuple[Workspace, Path], tmp_path: Path
) -> None:
    import jsonschema

    ws, reference = workspace
    target = tmp_path / "mlp.nodes.json"
    result = onnxmon("localize", "mlp", "--reference", str(reference), "--json", "--model-explorer", str(target),
                    "-c", str(ws.config_file))  # fmt: skip
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    model = onnx.load(str(ws.root / "models" / "mlp.onnx"))
    for path in (target, tmp_path / "mlp.nodes.max_abs.json"):
        data = json.loads(path.read_text(encoding="utf-8"))  # strict: no Infinity / NaN
        jsonschema.validate(data, MODEL_NODE_DATA)
        assert list(data) == [model.graph.name]  # model-explorer-onnx's graph id
        results = data[model.graph.name]["results"]
        assert set(results) <= {n.name for n in model.graph.node}  # its node ids are the node names
        first = report["first_out_of_tolerance"]["name"]
        changed = report["first_changed"]["name"]
        assert results[changed]["bgColor"] == "#9467bd", "where the drift starts, apart from downstream"
        assert results[first]["bgColor"] == ("#9467bd" if first == changed else "#d62728")
    rel = json.loads(target.read_text(encoding="utf-8"))[model.graph.name]["results"]
    by_name = {n["name"]: n for n in report["profile"]}
    assert all(math.isclose(rel[k]["value"], by_name[k]["rel_error"]) for k in rel if k in by_name
               and isinstance(by_name[k]["rel_error"], float))  # fmt: skip
