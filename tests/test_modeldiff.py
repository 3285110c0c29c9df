"""The static model diff on small hand-made graphs: subgraphs, attributes, nodes, hostile names, bad files.

The corpus tests (``tests/test_modeldiff_corpus.py``) show the diff on real models; these pin the
cases a corpus does not hold on purpose: a weight inside an ``If`` branch beside a same-named one in
the other branch, a changed attribute, a node added, names with quotes, newlines, ``/`` and ``:``,
and files that are not models at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from monitor import cli, jsonsafe, modeldiff
from monitor.errors import BaselineError, ModelError
from monitor.modeldiff import values

HOSTILE = 'w "quoted"\nnew-line/ünï:cödé\'s'


def strict(text: str) -> object:
    def refuse(constant: str) -> None:
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def matmul_model(weight: np.ndarray, *, name: str = "W", alpha: float = 0.1, extra: bool = False) -> onnx.ModelProto:
    nodes = [
        helper.make_node("MatMul", ["x", name], ["h"], name="mm"),
        helper.make_node("LeakyRelu", ["h"], ["y"], name="act", alpha=alpha),
    ]
    if extra:
        nodes.append(helper.make_node("Identity", ["y"], ["z"], name="extra"))
    out = "z" if extra else "y"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, weight.shape[0]])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, weight.shape[1]])],
        [numpy_helper.from_array(weight, name)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def if_model(then_weight: float, else_weight: float) -> onnx.ModelProto:
    """An ``If`` whose two branches each hold an initializer named ``w`` and a Constant."""

    def branch(label: str, value: float) -> onnx.GraphProto:
        const = helper.make_node(
            "Constant",
            [],
            [f"{label}_c"],
            name=f"{label}_const",
            value=numpy_helper.from_array(np.full(3, value, np.float32)),
        )
        add = helper.make_node("Add", ["w", f"{label}_c"], [f"{label}_out"], name=f"{label}_add")
        return helper.make_graph(
            [const, add],
            label,
            [],
            [helper.make_tensor_value_info(f"{label}_out", TensorProto.FLOAT, [3])],
            [numpy_helper.from_array(np.full(3, value, np.float32), "w")],
        )

    node = helper.make_node(
        "If",
        ["cond"],
        ["out"],
        name="gate",
        then_branch=branch("then", then_weight),
        else_branch=branch("else", else_weight),
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_identical_models_give_an_empty_diff_that_is_false() -> None:
    weight = np.arange(6, dtype=np.float32).reshape(2, 3)
    diff = modeldiff.diff_models(matmul_model(weight), matmul_model(weight.copy()))
    assert not diff and diff.summary == ()
    assert diff.to_dict()["identical"] is True
    assert diff.render().startswith("identical")


def test_a_changed_weight_names_its_consumer_and_the_size_of_the_change() -> None:
    weight = np.ones((2, 3), np.float32)
    moved = weight.copy()
    moved[1, 2] = 1.5
    diff = modeldiff.diff_models(matmul_model(weight), matmul_model(moved))
    (change,) = diff.changed_tensors
    assert (change.key.name, change.kind, change.changed_elements) == ("W", "initializer", 1)
    assert change.max_abs_change == 0.5 and change.max_rel_change == 0.5
    assert [(c.node.key, c.op_type) for c in change.consumers] == [("mm", "MatMul")]
    assert diff.summary == ("1 initializer changed values (float32)",)
    entry = diff.to_dict()["changed_tensors"][0]
    assert entry["consumers"] == [{"node": "mm", "op_type": "MatMul"}]
    assert "read by mm (MatMul)" in diff.render()


def test_a_tensor_inside_an_if_branch_is_qualified_by_its_subgraph() -> None:
    diff = modeldiff.diff_models(if_model(1.0, 2.0), if_model(1.25, 2.0))
    changed = {(c.key.graph, c.key.name, c.kind) for c in diff.changed_tensors}
    then = (("gate", "then_branch"),)
    assert changed == {(then, "w", "initializer"), (then, "then_c", "constant")}
    for change in diff.changed_tensors:
        assert [c.node for c in change.consumers] == [modeldiff.walk.NodeKey(then, "then_add")]
        assert change.place.startswith("gate.then_branch › ")
    assert diff.to_dict()["changed_tensors"][0]["graph"] == [["gate", "then_branch"]]
    from_manifest = modeldiff.diff_against_manifest(
        modeldiff.manifest(if_model(1.0, 2.0)), modeldiff.loaded(if_model(1.25, 2.0))
    )
    assert {(c.key.graph, c.key.name) for c in from_manifest.changed_tensors} == {(g, n) for g, n, _ in changed}


def test_a_changed_attribute_and_an_added_node_are_reported_as_such() -> None:
    weight = np.ones((2, 3), np.float32)
    diff = modeldiff.diff_models(matmul_model(weight), matmul_model(weight, alpha=0.2, extra=True))
    assert [(n.node.key, n.op_type) for n in diff.nodes_added] == [("extra", "Identity")]
    (changed,) = diff.nodes_changed
    assert changed.node.key == "act" and set(changed.changes) == {"attribute alpha"}
    assert "1 node added (Identity×1)" in diff.summary
    assert "1 graph output added" in diff.summary and "1 graph output removed" in diff.summary
    removed = modeldiff.diff_models(matmul_model(weight, extra=True), matmul_model(weight))
    assert [n.node.key for n in removed.nodes_removed] == ["extra"]


def test_unnamed_nodes_are_matched_by_op_type_and_position() -> None:
    model = matmul_model(np.ones((2, 3), np.float32))
    for node in model.graph.node:
        node.name = ""
    other = onnx.ModelProto()
    other.CopyFrom(model)
    other.graph.node[1].attribute[0].f = 0.3
    (changed,) = modeldiff.diff_models(model, other).nodes_changed
    assert changed.node.key == "LeakyRelu#0"


def linear_regressor(coefficients: list[float]) -> onnx.ModelProto:
    node = helper.make_node(
        "LinearRegressor", ["x"], ["y"], name="lin", domain="ai.onnx.ml", coefficients=coefficients, intercepts=[0.5]
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, len(coefficients)])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])


def test_a_float_list_attribute_of_an_ml_model_is_diffed_element_wise() -> None:
    diff = modeldiff.diff_models(linear_regressor([1.0, 2.0, 3.0]), linear_regressor([1.0, 2.25, 3.0]))
    (change,) = diff.changed_attributes
    assert (change.node.key, change.attribute, change.changed_elements, change.max_abs_change) == (
        "lin",
        "coefficients",
        1,
        0.25,
    )
    assert not diff.nodes_changed and diff.summary == ("1 list attribute (coefficients changed×1)",)
    manifest = modeldiff.manifest(linear_regressor([1.0, 2.0, 3.0]))
    against = modeldiff.diff_against_manifest(manifest, modeldiff.loaded(linear_regressor([1.0, 2.25, 3.0])))
    assert [(c.attribute, c.changed_elements) for c in against.changed_attributes] == [("coefficients", None)]


def test_hostile_names_survive_the_diff_the_json_and_the_manifest() -> None:
    weight = np.ones((2, 3), np.float32)
    old, new = matmul_model(weight, name=HOSTILE), matmul_model(weight * 2, name=HOSTILE)
    for model in (old, new):
        model.graph.node[0].name = HOSTILE + "/node:0"
    diff = modeldiff.diff_models(old, new)
    (change,) = diff.changed_tensors
    assert change.key.name == HOSTILE and change.consumers[0].node.key == HOSTILE + "/node:0"
    data = strict(jsonsafe.dumps(diff.to_dict()))
    assert data["changed_tensors"][0]["name"] == HOSTILE  # type: ignore[index]
    text = diff.render()
    assert len(text.splitlines()) == 2 and json.dumps(HOSTILE, ensure_ascii=False) in text  # one line per change
    manifest = strict(jsonsafe.dumps(modeldiff.manifest(old)))
    against = modeldiff.diff_against_manifest(manifest, modeldiff.loaded(new))  # type: ignore[arg-type]
    assert [c.key.name for c in against.changed_tensors] == [HOSTILE]


def test_an_fp16_weight_conversion_is_counted_not_listed_one_by_one() -> None:
    weights = [np.random.default_rng(i).standard_normal((4, 4)).astype(np.float32) for i in range(250)]
    nodes = [
        helper.make_node("Add", [f"w{i}", "x" if i == 0 else f"s{i - 1}"], [f"s{i}"], name=f"add{i}")
        for i in range(250)
    ]

    def model(dtype: type) -> onnx.ModelProto:
        graph = helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
            [helper.make_tensor_value_info("s249", TensorProto.FLOAT, [4, 4])],
            [numpy_helper.from_array(w.astype(dtype), f"w{i}") for i, w in enumerate(weights)],
        )
        return helper.make_model(graph)

    diff = modeldiff.diff_models(model(np.float32), model(np.float16))
    assert diff.summary == ("250 initializers float32→float16",)
    data = diff.to_dict()
    assert len(data["changed_tensors"]) == 200 and data["changed_tensors_omitted"] == 50
    assert all(0 < e["max_abs_change"] < 1e-2 for e in data["changed_tensors"])
    assert len(diff.render(top=5).splitlines()) == 7


def test_chunks_do_not_change_the_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    old = rng.standard_normal(10_001).astype(np.float32)
    new = old.copy()
    new[::7] *= 1.01
    new[5] = np.nan
    whole = values.change(old, new), values.stats(old)
    monkeypatch.setattr(values, "CHUNK", 97)
    assert values.change(old, new) == whole[0]
    assert values.stats(old) == pytest.approx(whole[1], rel=1e-12)  # sums in another order
    assert whole[0].changed == len(range(0, 10_001, 7)) + 1 and whole[0].max_abs == float("inf")


def test_nan_at_the_same_place_is_no_change() -> None:
    old = np.array([1.0, np.nan, np.inf], np.float32)
    assert values.change(old, old.copy()).changed == 0
    assert values.change(old, np.array([1.0, 2.0, -np.inf], np.float32)).changed == 2


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "it has no graph"),
        (b"\x08\x07\x12\xff\xff\xff\xff", "is not a valid ONNX model"),
        (b"not an onnx model, just text\n" * 10, "is not a valid ONNX model"),
    ],
)
def test_a_file_that_is_not_a_model_is_refused_naming_the_file(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelError, match=expected) as error:
        modeldiff.load_model(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_a_truncated_model_and_missing_external_data_are_refused(tmp_path: Path) -> None:
    model = matmul_model(np.ones((64, 64), np.float32))
    whole = tmp_path / "whole.onnx"
    onnx.save_model(model, str(whole), save_as_external_data=True, location="whole.data", size_threshold=0)
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(whole.read_bytes()[:-7])
    with pytest.raises(ModelError, match=r"truncated\.onnx"):
        modeldiff.load_model(truncated)
    (tmp_path / "whole.data").unlink()
    with pytest.raises(ModelError, match=r"external data of model file .*whole\.onnx"):
        modeldiff.load_model(whole)


def test_a_malformed_manifest_is_a_baseline_error() -> None:
    with pytest.raises(BaselineError, match="model manifest manifest is malformed"):
        modeldiff.diff_against_manifest({"format": 1}, modeldiff.loaded(linear_regressor([1.0])))


def test_the_command_exits_0_same_1_different_2_not_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weight = np.ones((2, 3), np.float32)
    old, new, bad = tmp_path / "old.onnx", tmp_path / "new.onnx", tmp_path / "bad.onnx"
    onnx.save(matmul_model(weight), str(old))
    onnx.save(matmul_model(weight * 3), str(new))
    bad.write_bytes(b"garbage")
    assert cli.main(["diff-model", str(old), str(old)]) == 0
    assert capsys.readouterr().out.startswith("identical: ")
    assert cli.main(["diff-model", str(old), str(new), "--json"]) == 1
    out = capsys.readouterr().out
    assert strict(out)["changed_tensors"][0]["name"] == "W"  # type: ignore[index]
    assert cli.main(["diff-model", str(old), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err
    assert cli.main(["diff-model", str(old), str(tmp_path / "missing.onnx")]) == 2


def test_the_manifest_grows_with_the_graph_not_with_the_weights() -> None:
    small = jsonsafe.dumps(modeldiff.manifest(matmul_model(np.ones((4, 4), np.float32))))
    large = jsonsafe.dumps(modeldiff.manifest(matmul_model(np.ones((1024, 1024), np.float32))))
    assert abs(len(large) - len(small)) < 16 and len(large) < 2048


def test_a_weight_that_became_nan_is_an_infinite_change_written_as_the_string_infinity() -> None:
    weight = np.ones((2, 3), np.float32)
    broken = weight.copy()
    broken[0, 0] = np.nan
    data = strict(jsonsafe.dumps(modeldiff.diff_models(matmul_model(weight), matmul_model(broken)).to_dict()))
    assert data["changed_tensors"][0]["max_abs_change"] == "Infinity"  # type: ignore[index]
