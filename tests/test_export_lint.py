"""``onnxmon lint``: each export hazard is found in a real graph and named by its node.

Models are built with ``onnx.helper`` (torch-made ones are in ``test_export_lint_torch.py``); where
a hazard changes what the model computes, plain ONNX Runtime shows it first (the ground truth),
then lint must name the node. The committed corpus models must lint clean.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from monitor import cli
from monitor.lint import HAZARD_CODES, lint_model
from monitor.runtime import support

CORPUS = Path(__file__).resolve().parent / "corpus"


def save(tmp_path: Path, model: onnx.ModelProto, name: str = "model.onnx") -> Path:
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def make(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: list[onnx.TensorProto] = (),
    opset: int = 17,
) -> onnx.ModelProto:  # type: ignore[assignment]
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def run_lint(model: Path | str, *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = cli.main(["lint", str(model), "--json", *args])
    return code, json.loads(buffer.getvalue())


def flatten_model(leading: int | str) -> onnx.ModelProto:
    """x[batch, 4] -> Relu -> Reshape(shape=[leading, -1])."""
    shape = numpy_helper.from_array(np.array([leading if isinstance(leading, int) else 0, -1], np.int64), "shape")
    return make(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Reshape", ["r", "shape"], ["y"], name="flatten"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [shape],
    )


def test_a_batch_baked_into_a_reshape_is_named_and_fails_the_lint(tmp_path: Path) -> None:
    path = save(tmp_path, flatten_model(1))
    # ground truth: the model only keeps batch 1 apart; batch 3 comes out as one row of 12
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": np.ones((3, 4), np.float32)})[0].shape == (1, 12)
    code, report = run_lint(path)
    assert code == 1
    [found] = report["hazards"]
    assert (found["code"], found["node"], found["op_type"], found["severity"]) == (
        "baked_batch",
        "flatten",
        "Reshape",
        "error",
    )
    assert "'batch'" in found["detail"]


def test_a_reshape_that_copies_the_batch_dim_is_clean(tmp_path: Path) -> None:
    path = save(tmp_path, flatten_model("copy"))  # shape [0, -1]: dim 0 copied from the input
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": np.ones((3, 4), np.float32)})[0].shape == (3, 4)
    code, report = run_lint(path)
    assert code == 0 and report["hazards"] == []


def test_a_model_with_a_fixed_batch_has_no_baked_batch(tmp_path: Path) -> None:
    model = flatten_model(1)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    assert run_lint(save(tmp_path, model))[1]["hazards"] == []


def seq_first_model(target: list[int]) -> onnx.ModelProto:
    """x[batch, seq, 64] -> Transpose -> [seq, batch, 64] -> Reshape(target): an RNN tagger's layout change."""
    shape = numpy_helper.from_array(np.array(target, np.int64), "shape")
    return make(
        [
            helper.make_node("Transpose", ["x"], ["t"], name="to_seq_first", perm=[1, 0, 2]),
            helper.make_node("Reshape", ["t", "shape"], ["y"], name="/rnn/Reshape"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [shape],
    )


def test_a_sequence_length_baked_into_a_reshape_is_named(tmp_path: Path) -> None:
    path = save(tmp_path, seq_first_model([20, -1, 64]))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = sess.run(None, {"x": np.zeros((2, 10, 64), np.float32)})[0]
    assert out.shape == (20, 1, 64)  # ground truth: seq 10 x batch 2 comes out as seq 20 x batch 1
    code, report = run_lint(path)
    assert code == 1
    [found] = report["hazards"]
    assert (found["code"], found["node"], found["severity"]) == ("baked_dim", "/rnn/Reshape", "error")
    assert "'seq'" in found["detail"] and "axis 0" in found["detail"]
    assert run_lint(save(tmp_path, seq_first_model([0, -1, 64]), "copied.onnx"))[1]["hazards"] == []


def lost_seq_model() -> onnx.ModelProto:
    """x[batch, seq, 8] + position embeddings sliced to seq, LayerNorm, Reshape [-1, 12, 8]: BERT's tail.

    Shape inference cannot tell the Slice's length is ``seq``, so the sum's axis 1 is an unnamed dim.
    """
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(size=(64, 8)).astype(np.float32), "positions"),
        numpy_helper.from_array(np.ones(8, np.float32), "gamma"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array([2], np.int64), "two"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([-1, 12, 8], np.int64), "baked"),
    ]
    return make(
        [
            helper.make_node("Shape", ["x"], ["shape"], name="shape"),
            helper.make_node("Slice", ["shape", "one", "two"], ["length"], name="length"),
            helper.make_node("Slice", ["positions", "zero", "length", "zero"], ["pos"], name="pos"),
            helper.make_node("Add", ["x", "pos"], ["summed"], name="embeddings"),
            helper.make_node("LayerNormalization", ["summed", "gamma"], ["normed"], name="norm", axis=-1),
            helper.make_node("Reshape", ["normed", "baked"], ["y"], name="/Reshape"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )


def test_a_baked_sequence_is_named_where_shape_inference_lost_the_dim_name(tmp_path: Path) -> None:
    model = lost_seq_model()
    inferred = onnx.shape_inference.infer_shapes(model)
    [summed] = [v for v in inferred.graph.value_info if v.name == "normed"]
    assert summed.type.tensor_type.shape.dim[1].dim_param != "seq"  # ground truth: the name is lost
    path = save(tmp_path, model)
    out = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.zeros((2, 6, 8), np.float32)}
    )[0]
    assert out.shape == (1, 12, 8)  # ground truth: two sequences of 6 come out as one of 12
    code, report = run_lint(path)
    assert code == 1
    [found] = report["hazards"]
    assert (found["code"], found["node"]) == ("baked_dim", "/Reshape") and "'seq'" in found["detail"]


def dropout_model(training: bool | None) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "ratio")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])]
    names = ["x", "ratio"]
    if training is None:
        inputs.append(helper.make_tensor_value_info("train", TensorProto.BOOL, []))
        names.append("train")
    else:
        inits.append(numpy_helper.from_array(np.array(training), "train"))
        names.append("train")
    return make(
        [helper.make_node("Dropout", names, ["y"], name="drop")],
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        inits,
    )


def test_dropout_left_in_training_mode_is_an_error_naming_the_node(tmp_path: Path) -> None:
    path = save(tmp_path, dropout_model(True))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = {"x": np.ones((1, 64), np.float32)}
    assert not np.array_equal(sess.run(None, x)[0], x["x"])  # ground truth: ORT drops elements
    code, report = run_lint(path)
    assert code == 1
    assert [(h["code"], h["node"], h["severity"]) for h in report["hazards"]] == [("dropout_training", "drop", "error")]
    assert "ratio 0.5" in report["hazards"][0]["detail"]


@pytest.mark.parametrize(("training", "expected"), [(False, []), (None, [("dropout_training", "warning")])])
def test_dropout_off_is_clean_and_a_computed_training_mode_is_a_warning(
    tmp_path: Path, training: bool | None, expected: list
) -> None:  # type: ignore[type-arg]
    code, report = run_lint(save(tmp_path, dropout_model(training)))
    assert code == 0
    assert [(h["code"], h["severity"]) for h in report["hazards"]] == expected


def random_mask_dropout(metadata: bool) -> onnx.ModelProto:
    """A Dropout the dynamo exporter wrote as ops: ``RandomUniformLike → Less → Cast → Div → Mul``."""
    nodes = [
        helper.make_node("RandomUniformLike", ["x"], ["rands"], name="n1"),
        helper.make_node("Less", ["rands", "keep"], ["sampled"], name="n4"),
        helper.make_node("Cast", ["sampled"], ["mask"], name="node_Cast_8", to=TensorProto.FLOAT),
        helper.make_node("Div", ["mask", "keep"], ["scaled"], name="node_div"),
        helper.make_node("Mul", ["x", "scaled"], ["y"], name="node_mul"),
    ]
    if metadata:
        for node in nodes[:2]:
            for key, value in (
                ("pkg.torch.onnx.class_hierarchy", "['M', 'torch.nn.modules.dropout.Dropout', 'aten.bernoulli.p']"),
                ("pkg.torch.onnx.name_scopes", "['', 'classifier.2', 'bernoulli']"),
            ):
                node.metadata_props.add(key=key, value=value)
    return make(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
        [numpy_helper.from_array(np.array(0.8, np.float32), "keep")],
    )


@pytest.mark.parametrize("metadata", [True, False], ids=["with-metadata", "pattern-only"])
def test_a_dropout_written_as_a_random_mask_is_an_error_naming_its_module(tmp_path: Path, metadata: bool) -> None:
    path = save(tmp_path, random_mask_dropout(metadata))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = {"x": np.ones((2, 64), np.float32)}
    assert not np.array_equal(sess.run(None, x)[0], sess.run(None, x)[0])  # ground truth: random each run
    code, report = run_lint(path)
    assert code == 1
    assert [(h["code"], h["node"], h["severity"]) for h in report["hazards"]] == [("dropout_training", "n1", "error")]
    assert ("module 'classifier.2'" in report["hazards"][0]["detail"]) is metadata
    assert "keep 0.8" in report["hazards"][0]["detail"]


def batchnorm_model(opset: int, training: bool) -> onnx.ModelProto:
    c = 3
    inits = [
        numpy_helper.from_array(np.full(c, v, np.float32), n)
        for n, v in (("s", 1.0), ("b", 0.0), ("m", 0.0), ("v", 1.0))
    ]
    outputs = ["y"] + (["rm", "rv"] if training else [])
    attrs = {"training_mode": 1} if training and opset >= 14 else {}
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], outputs, name="bn", **attrs)
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    return make([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", c, 4, 4])], outs, inits, opset)


@pytest.mark.parametrize("opset", [9, 13, 15])
def test_batchnorm_in_training_mode_is_found_at_every_opset(tmp_path: Path, opset: int) -> None:
    code, report = run_lint(save(tmp_path, batchnorm_model(opset, training=True)))
    assert code == 1
    assert [(h["code"], h["node"]) for h in report["hazards"]] == [("batchnorm_training", "bn")]
    assert run_lint(save(tmp_path, batchnorm_model(opset, training=False), "eval.onnx"))[1]["hazards"] == []


def resize_model(opset: int, **attrs: object) -> onnx.ModelProto:
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    roi = numpy_helper.from_array(np.array([], np.float32), "roi")
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], name="up", **attrs)
    return make(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [roi, scales],
        opset,
    )


@pytest.mark.parametrize(
    ("attrs", "hazard"),
    [
        ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, False),
        ({"mode": "nearest"}, True),  # ONNX's defaults: half_pixel + round_prefer_floor
        ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, False),
        # PyTorch writes it only for align_corners=True, not the default: without the exporter's metadata
        # to say which the model used, a warning (test_a_resize_coordinate_mode_is_held_to_the_exporters_metadata)
        ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, True),
        ({"mode": "linear", "coordinate_transformation_mode": "asymmetric"}, True),
        ({"mode": "cubic", "coordinate_transformation_mode": "half_pixel", "cubic_coeff_a": -0.5}, True),
    ],
)
def test_resize_modes_unlike_pytorch_are_a_warning(tmp_path: Path, attrs: dict, hazard: bool) -> None:  # type: ignore[type-arg]
    code, report = run_lint(save(tmp_path, resize_model(13, **attrs)))
    assert code == 0  # a warning, not an error
    assert [(h["code"], h["node"]) for h in report["hazards"]] == ([("resize_mode", "up")] if hazard else [])


def _fx_upsample(align_corners: bool) -> str:
    """The dynamo exporter's ``pkg.torch.onnx.fx_node`` for ``F.interpolate(..., mode="bilinear")``."""
    return (
        "%upsample_bilinear2d : [num_users=1] = call_function[target=torch.ops.aten.upsample_bilinear2d.vec]"
        f"(args = (%x, None, {align_corners}, [2.0, 2.0]), kwargs = {{}})"
    )


@pytest.mark.parametrize(
    ("coordinates", "align_corners", "hazard"),
    [
        ("half_pixel", False, False),
        ("align_corners", True, False),
        ("align_corners", False, True),  # the case: edited (or converted) away from the source op
        ("half_pixel", True, True),
        ("pytorch_half_pixel", True, True),
    ],
)
def test_a_resize_coordinate_mode_is_held_to_the_exporters_metadata(
    tmp_path: Path, coordinates: str, align_corners: bool, hazard: bool
) -> None:
    model = resize_model(17, mode="linear", coordinate_transformation_mode=coordinates)
    model.graph.node[0].metadata_props.add(key="pkg.torch.onnx.fx_node", value=_fx_upsample(align_corners))
    code, report = run_lint(save(tmp_path, model))
    assert code == 0
    found = [(h["code"], h["node"]) for h in report["hazards"]]
    assert found == ([("resize_mode", "up")] if hazard else [])
    if hazard:
        assert f"align_corners={align_corners}" in report["hazards"][0]["detail"]


def test_the_resize_modes_that_differ_do_change_the_numbers(tmp_path: Path) -> None:
    """Ground truth for the rule: ONNX's default nearest and PyTorch's nearest disagree on a 4x4 image."""
    x = {"x": np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)}
    torchlike = save(tmp_path, resize_model(13, mode="linear", coordinate_transformation_mode="half_pixel"), "a.onnx")
    other = save(tmp_path, resize_model(13, mode="linear", coordinate_transformation_mode="asymmetric"), "b.onnx")
    a, b = (
        ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, x)[0] for p in (torchlike, other)
    )
    assert np.abs(a - b).max() > 0.4


def test_an_opset_newer_than_the_runtime_loads_is_an_error(tmp_path: Path) -> None:
    newest = support.probe().max_opsets[""]
    model = make(
        [helper.make_node("Identity", ["x"], ["y"], name="id")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        opset=newest + 1,
    )
    path = save(tmp_path, model)
    with pytest.raises(Exception, match=r"(?i)opset"):  # ground truth: ORT refuses it
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    code, report = run_lint(path)
    assert code == 1
    assert [h["code"] for h in report["hazards"]] == ["opset_unsupported"]
    assert f"at most {newest}" in report["hazards"][0]["detail"]
    model.opset_import[0].version = newest
    model.ir_version = support.probe().max_ir_version + 1
    assert [h["code"] for h in run_lint(save(tmp_path, model, "ir.onnx"))[1]["hazards"]] == ["ir_version_unsupported"]


def test_fp16_weights_with_inf_and_subnormals_are_found(tmp_path: Path) -> None:
    with np.errstate(over="ignore"):
        weight = np.array([1.0, 7e4, 1e-6, 0.5], np.float32).astype(np.float16)  # 7e4 -> inf, 1e-6 subnormal
    assert np.isinf(weight[1]) and 0 < weight[2] < np.finfo(np.float16).smallest_normal
    model = make(
        [helper.make_node("Mul", ["x", "w"], ["y"], name="scale")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4])],
        [numpy_helper.from_array(weight, "w")],
    )
    code, report = run_lint(save(tmp_path, model))
    assert code == 1
    assert [(h["code"], h["node"], h["severity"]) for h in report["hazards"]] == [
        ("fp16_overflow", "scale", "error"),
        ("fp16_subnormal", "scale", "warning"),
    ]


def test_fp32_weights_past_autocasts_init_max_are_flagged_before_an_fp16_build(tmp_path: Path) -> None:
    # NVIDIA ModelOpt AutoCast keeps initializers past --init_max (65504) in fp32; fp16 would make them inf
    weight = np.array([1.0, 7e4, -9e4, 0.5], np.float32)
    model = make(
        [helper.make_node("Mul", ["x", "w"], ["y"], name="scale")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(weight, "w")],
    )
    code, report = run_lint(save(tmp_path, model))
    assert code == 0, "info: the model is fine as it is; an fp16 conversion is what breaks it"
    ((found),) = [h for h in report["hazards"] if h["code"] == "fp16_unsafe_initializer"]
    assert (found["node"], found["severity"]) == ("scale", "info") and "2 of 4" in found["detail"]
    assert np.isinf(weight.astype(np.float16)[1:3]).all(), "the numbers the hazard is about"
    within = make(
        [helper.make_node("Mul", ["x", "w"], ["y"], name="scale")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.full(4, 65504.0, np.float32), "w")],
    )
    assert not run_lint(save(tmp_path, within, "within.onnx"))[1]["hazards"]


def test_activations_past_autocasts_data_max_on_the_benchmark_set_are_flagged(tmp_path: Path) -> None:
    from tests.workspace import Workspace

    # y = x @ W with W = 300: random inputs in [0, 1) give activations up to ~1200 > 512 (data_max);
    # z = y / 1e4 stays small. Ground truth from plain ORT below, not from lint.
    w = np.full((4, 3), 300.0, np.float32)
    model = make(
        [
            helper.make_node("MatMul", ["x", "w"], ["y"], name="big"),
            helper.make_node("Div", ["y", "k"], ["z"], name="small"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(1e4, np.float32), "k")],
    )
    ws = Workspace(tmp_path)
    ws.add_model("m", model, count=2)
    config = str(ws.write())
    code, report = run_lint("m", "--activations", "-c", config)
    assert code == 0
    found = [(h["code"], h["node"]) for h in report["hazards"] if h["code"] == "fp16_unsafe_activation"]
    from monitor.files import benchsets

    bench = benchsets.open_benchset(ws.root / "benchsets", "m-bench")
    feeds = [bench.load_sample(i) for i, label in enumerate(bench.labels) if label == "random"][:2]
    session = ort.InferenceSession(str(ws.root / "models" / "m.onnx"), providers=["CPUExecutionProvider"])
    largest = max(float(np.abs(f["x"] @ w).max()) for f in feeds)
    assert (found == [("fp16_unsafe_activation", "big")]) == (largest > 512), (found, largest)
    assert largest > 512 and session.run(None, feeds[0])[0].max() < 512
    assert "fp16_unsafe_activation" not in {h["code"] for h in run_lint("m", "-c", config)[1]["hazards"]}, (
        "lint alone never runs the model"
    )


def qdq_conv(per_channel: bool, weight_is_float: bool) -> onnx.ModelProto:
    w = np.random.default_rng(0).normal(size=(4, 2, 3, 3)).astype(np.float32)
    scale = np.full(4, 0.02, np.float32) if per_channel else np.array(0.02, np.float32)
    zero = np.zeros(4 if per_channel else (), np.int8)
    inits = [
        numpy_helper.from_array(scale, "ws"),
        numpy_helper.from_array(zero, "wz"),
        numpy_helper.from_array(np.array(0.1, np.float32), "xs"),
        numpy_helper.from_array(np.array(0, np.int8), "xz"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="qx"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dqx"),
    ]
    axis = {"axis": 0} if per_channel else {}
    if weight_is_float:
        inits.append(numpy_helper.from_array(w, "w"))
        nodes.append(helper.make_node("QuantizeLinear", ["w", "ws", "wz"], ["wq"], name="qw", **axis))
    else:
        inits.append(numpy_helper.from_array(np.clip(np.round(w / 0.02), -127, 127).astype(np.int8), "wq"))
    nodes.append(helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], name="dqw", **axis))
    nodes.append(helper.make_node("Conv", ["xd", "wd"], ["c"], name="conv"))
    nodes.append(helper.make_node("QuantizeLinear", ["c", "xs", "xz"], ["cq"], name="qc"))
    nodes.append(helper.make_node("DequantizeLinear", ["cq", "xs", "xz"], ["cd"], name="dqc"))
    nodes.append(helper.make_node("LpNormalization", ["cd"], ["y"], name="norm"))
    return make(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
        17,
    )


def test_qdq_hazards_name_the_conv_and_the_unfused_pair(tmp_path: Path) -> None:
    path = save(tmp_path, qdq_conv(per_channel=False, weight_is_float=True))
    ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.ones((1, 2, 5, 5), np.float32)}
    )
    code, report = run_lint(path)
    assert code == 0  # QDQ findings are warnings and info
    found = {(h["code"], h["node"]) for h in report["hazards"]}
    assert found == {("qdq_unfused", "qw"), ("qdq_unfused", "norm"), ("qdq_per_tensor", "conv")}
    clean = run_lint(save(tmp_path, qdq_conv(per_channel=True, weight_is_float=False), "pc.onnx"))[1]
    assert {(h["code"], h["node"]) for h in clean["hazards"]} == {("qdq_unfused", "norm")}


def test_a_fixed_dim_the_benchmark_set_varies_is_an_error() -> None:
    model = CORPUS / "torch" / "cnn_legacy.onnx"
    assert lint_model(model, varied={"image": {0: {1, 4}, 2: {32}}}).hazards == ()
    report = lint_model(model, varied={"image": {2: {32, 64}}})
    assert [(h.code, h.node) for h in report.hazards] == [("fixed_dim", "input image")]
    assert "[32, 64]" in report.hazards[0].detail


def test_missing_and_garbage_files_exit_2_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["lint", str(tmp_path / "absent.onnx")]) == 2
    assert "absent.onnx not found" in capsys.readouterr().err
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\xff" * 100)
    assert cli.main(["lint", str(junk)]) == 2
    assert "junk.onnx" in capsys.readouterr().err


def test_every_hazard_code_is_documented() -> None:
    page = (CORPUS.parent.parent / "docs" / "lint.md").read_text(encoding="utf-8")
    for code in HAZARD_CODES:
        assert f"`{code}`" in page, code


@pytest.mark.parametrize(
    "model",
    sorted((CORPUS / "torch").glob("*.onnx")) + sorted((CORPUS / "sklearn").glob("*.onnx")),
    ids=lambda p: p.name,
)
def test_the_committed_corpus_models_lint_without_errors(model: Path) -> None:
    report = lint_model(model, support=support.probe())
    assert report, [str(h) for h in report.hazards]
    assert not [h for h in report.hazards if h.code in ("lint_error", "baked_batch", "resize_mode")]


def fp16_scale_model(weight: np.ndarray) -> onnx.ModelProto:
    return make(
        [helper.make_node("Mul", ["x", "w"], ["y"], name="scale")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [weight.size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [weight.size])],
        [numpy_helper.from_array(weight, "w")],
    )


def test_external_fp16_weights_are_read_one_at_a_time_and_a_missing_file_exits_2(tmp_path: Path) -> None:
    weight = np.full(4096, np.inf, np.float16)
    path = tmp_path / "ext.onnx"
    onnx.save(fp16_scale_model(weight), str(path), save_as_external_data=True, location="ext.data", size_threshold=0)
    assert (tmp_path / "ext.data").stat().st_size == weight.nbytes
    code, report = run_lint(path)
    assert code == 1 and [h["code"] for h in report["hazards"]] == ["fp16_overflow"]
    (tmp_path / "ext.data").unlink()
    assert cli.main(["lint", str(path)]) == 2


def test_external_data_outside_the_model_folder_is_refused(tmp_path: Path) -> None:
    model = fp16_scale_model(np.ones(4, np.float16))
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0)
    proto = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    for entry in proto.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "../../etc/passwd"
    (tmp_path / "sub").mkdir()
    onnx.save(proto, str(tmp_path / "sub" / "evil.onnx"))
    with pytest.raises(Exception, match="outside the model's folder"):
        lint_model(tmp_path / "sub" / "evil.onnx")


def test_lint_of_a_configured_model_knows_the_dims_its_benchmark_set_varies(tmp_path: Path) -> None:
    from tests.workspace import Workspace

    fixed = onnx.load(str(CORPUS / "torch" / "cnn_legacy.onnx"))
    fixed.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1  # batch fixed to 1 at export
    ws = Workspace(tmp_path)
    ws.add_model("cnn", fixed, count=2, dims={})
    ws.set("cnn", checks={"batch_invariance": {"batch": 8}})
    config = str(ws.write())
    assert cli.main(["benchset", "create", "cnn-bench", "-c", config]) == 0
    code, report = run_lint("cnn", "-c", config)  # a name, not a file
    assert code == 1
    assert [(h["code"], h["node"]) for h in report["hazards"]] == [("fixed_dim", "input image")]
    assert "[1, 8]" in report["hazards"][0]["detail"]


def test_lint_of_a_configured_model_materializes_the_set_its_config_names(tmp_path: Path) -> None:
    """Before the set exists on disk, the config still names it: lint makes it (as check would), not
    ``skipped: fixed_dims (no benchmark set given)``."""
    from tests.workspace import Workspace

    fixed = onnx.load(str(CORPUS / "torch" / "cnn_legacy.onnx"))
    fixed.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    ws = Workspace(tmp_path)
    ws.add_model("cnn", fixed, count=2, dims={})
    ws.set("cnn", checks={"batch_invariance": {"batch": 8}})
    code, report = run_lint("cnn", "-c", str(ws.write()))  # no `benchset create` first
    assert not any(s.startswith("fixed_dims") for s in report["facts"]["skipped"]), report["facts"]["skipped"]
    assert code == 1 and [h["code"] for h in report["hazards"]] == ["fixed_dim"]


def test_a_name_that_is_neither_a_file_nor_a_configured_model_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["lint", "nomodel", "-c", str(tmp_path / "absent.yaml")]) == 2
    assert "'nomodel' is not a model file" in capsys.readouterr().err


def test_a_hostile_node_name_stays_on_its_own_line(tmp_path: Path) -> None:
    model = flatten_model(1)
    model.graph.node[1].name = "flatten\nerror fp16_overflow at forged"
    path = save(tmp_path, model)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert cli.main(["lint", str(path)]) == 1
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 3  # summary, the one hazard, the skipped note
    assert "flatten\\nerror fp16_overflow at forged" in lines[1]
    assert run_lint(path)[1]["hazards"][0]["node"] == "flatten\nerror fp16_overflow at forged"  # JSON keeps it


def test_a_real_fp16_conversion_leaves_subnormal_weights_lint_finds(tmp_path: Path) -> None:
    from onnxconverter_common import float16

    weight = np.array([[1.0, 3e-6, -2e-5, 0.25]], np.float32)
    model = make(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="proj")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(weight, "w")],
    )
    converted = float16.convert_float_to_float16(model, keep_io_types=True)
    path = save(tmp_path, converted)
    stored = next(numpy_helper.to_array(i) for i in converted.graph.initializer if i.data_type == TensorProto.FLOAT16)
    subnormal = int(np.count_nonzero((np.abs(stored) > 0) & (np.abs(stored) < np.finfo(np.float16).smallest_normal)))
    assert subnormal == 2  # ground truth, from the converted file itself
    hazards = run_lint(path)[1]["hazards"]
    assert [(h["code"], h["node"]) for h in hazards] == [("fp16_subnormal", "proj")]
    assert "holds 2 of 4 subnormal" in hazards[0]["detail"]


def test_a_lint_cache_file_answering_another_question_is_linted_again(tmp_path: Path) -> None:
    from monitor.exportcheck import lint_warnings
    from monitor.files.tensors import sha256_file
    from tests import modelzoo

    model = tmp_path / "clf.onnx"
    modelzoo.save(modelzoo.classifier(), model)
    digest, cache = sha256_file(model), tmp_path / "lint"

    def lint() -> bool:
        report, cached = lint_warnings.cached_lint(
            model, digest, support=None, varied=dict, inputs_key="k", directory=cache
        )
        assert report is not None
        return cached

    assert [lint(), lint(), lint()] == [False, True, True]
    (entry,) = cache.glob("*.json")
    data = json.loads(entry.read_text())
    data["key"]["inputs"] = "another"  # now the file answers another question: lint again
    entry.write_text(json.dumps(data))
    assert lint() is False
