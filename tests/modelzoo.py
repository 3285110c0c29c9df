"""Small, seeded ONNX models built with ``onnx.helper`` for the test suite.

Every builder returns an ``onnx.ModelProto``; ``save`` writes it. Models are tiny so a
real ONNX Runtime session runs them in milliseconds, yet they exercise real kernels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="onnxmon-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def classifier(seed: int = 0, features: int = 16, hidden: int = 32, classes: int = 10) -> onnx.ModelProto:
    """x[batch, features] -> MatMul/Add/Relu -> MatMul/Add -> ``logits`` and Softmax -> ``prob``."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.5, (features, hidden)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.normal(0, 0.1, (hidden,)).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.normal(0, 0.5, (hidden, classes)).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.normal(0, 0.1, (classes,)).astype(np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu1"),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"], name="fc2"),
        helper.make_node("Add", ["h3", "b2"], ["logits"], name="fc2_bias"),
        helper.make_node("Softmax", ["logits"], ["prob"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes]),
            helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["batch", classes]),
        ],
        inits,
    )
    return _model(graph)


def deep_mlp(seed: int = 0, width: int = 16, layers: int = 40) -> onnx.ModelProto:
    """A chain of ``layers`` MatMul/Add/Tanh blocks (3 nodes each): a 100+ node model."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    prev = "x"
    for i in range(layers):
        inits.append(
            numpy_helper.from_array((rng.normal(0, 1, (width, width)) / np.sqrt(width)).astype(np.float32), f"w{i}")
        )
        inits.append(numpy_helper.from_array(rng.normal(0, 0.05, (width,)).astype(np.float32), f"b{i}"))
        nodes += [
            helper.make_node("MatMul", [prev, f"w{i}"], [f"mm{i}"], name=f"matmul_{i}"),
            helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"], name=f"add_{i}"),
            helper.make_node("Tanh", [f"add{i}"], [f"act{i}"], name=f"tanh_{i}"),
        ]
        prev = f"act{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="output"))
    graph = helper.make_graph(
        nodes,
        "deep_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
        inits,
    )
    return _model(graph)


def perturb_initializer(model: onnx.ModelProto, name: str, relative: float, index: int = 0) -> onnx.ModelProto:
    """A copy of ``model`` with one element of initializer ``name`` scaled by ``1 + relative``."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for i, init in enumerate(copy.graph.initializer):
        if init.name == name:
            array = numpy_helper.to_array(init).copy()
            flat = array.reshape(-1)
            flat[index] = flat[index] * (1 + relative) if flat[index] != 0 else relative
            copy.graph.initializer[i].CopyFrom(numpy_helper.from_array(array, name))
            return copy
    raise KeyError(f"no initializer {name!r}")


def mixed_inputs(batch: int | str = "batch") -> onnx.ModelProto:
    """Three inputs of three kinds: ``x`` float[batch,4], ``ids`` int64[batch,2], ``flag`` bool[batch,2].

    Outputs ``y = 2x``, ``ids_out = ids`` and ``flag_out = not flag``: enough to feed every dtype family.
    """
    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["y"], name="double"),
        helper.make_node("Identity", ["ids"], ["ids_out"], name="ids_identity"),
        helper.make_node("Not", ["flag"], ["flag_out"], name="negate"),
    ]
    graph = helper.make_graph(
        nodes,
        "mixed_inputs",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [batch, 2]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, [batch, 2]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4]),
            helper.make_tensor_value_info("ids_out", TensorProto.INT64, [batch, 2]),
            helper.make_tensor_value_info("flag_out", TensorProto.BOOL, [batch, 2]),
        ],
        [two],
    )
    return _model(graph)


def layernorm_gelu(seed: int = 0, width: int = 64) -> onnx.ModelProto:
    """LayerNorm and GELU written out as primitive ops, which ONNX Runtime fuses at level ``all``.

    The fused kernels accumulate differently, so the graph optimization level changes the
    low bits of the output: a realistic, quiet numeric change.
    """
    rng = np.random.default_rng(seed)

    def const(name: str, value: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)

    inits = [
        const("two", np.array([2.0])),
        const("eps", np.array([1e-5])),
        const("gamma", rng.normal(size=(width,))),
        const("beta", rng.normal(size=(width,))),
        const("sqrt2", np.array([np.sqrt(2.0)])),
        const("one", np.array([1.0])),
        const("half", np.array([0.5])),
    ]
    n = helper.make_node
    nodes = [
        n("ReduceMean", ["x"], ["mean"], name="ln_mean", axes=[-1]),
        n("Sub", ["x", "mean"], ["centered"], name="ln_sub"),
        n("Pow", ["centered", "two"], ["squared"], name="ln_pow"),
        n("ReduceMean", ["squared"], ["var"], name="ln_var", axes=[-1]),
        n("Add", ["var", "eps"], ["var_eps"], name="ln_add_eps"),
        n("Sqrt", ["var_eps"], ["std"], name="ln_sqrt"),
        n("Div", ["centered", "std"], ["normed"], name="ln_div"),
        n("Mul", ["normed", "gamma"], ["scaled"], name="ln_scale"),
        n("Add", ["scaled", "beta"], ["ln"], name="ln_shift"),
        n("Div", ["ln", "sqrt2"], ["ln_s"], name="gelu_div"),
        n("Erf", ["ln_s"], ["erf"], name="gelu_erf"),
        n("Add", ["erf", "one"], ["erf1"], name="gelu_add"),
        n("Mul", ["ln", "erf1"], ["gelu_mul"], name="gelu_mul"),
        n("Mul", ["gelu_mul", "half"], ["y"], name="gelu_half"),
    ]
    graph = helper.make_graph(
        nodes,
        "layernorm_gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
        inits,
    )
    return _model(graph)


def fused_mlp(seed: int = 0, width: int = 257, layers: int = 4, batch: int = 8) -> onnx.ModelProto:
    """``layers`` MatMul/Add/Relu blocks with an odd inner size that ORT's CPU fusions compute differently.

    With optimizations on, each block becomes one FusedGemm whose rounding differs from
    MatMul then Add; exposing a MatMul output blocks that fusion and changes the final
    outputs (the "observer effect"). The batch is fixed so MatMul+Add can become Gemm.
    """
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    prev = "x"
    for i in range(layers):
        inits.append(
            numpy_helper.from_array((rng.normal(0, 1, (width, width)) / np.sqrt(width)).astype(np.float32), f"w{i}")
        )
        inits.append(numpy_helper.from_array(rng.normal(0, 0.1, (width,)).astype(np.float32), f"b{i}"))
        nodes += [
            helper.make_node("MatMul", [prev, f"w{i}"], [f"mm{i}"], name=f"matmul_{i}"),
            helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"], name=f"add_{i}"),
            helper.make_node("Relu", [f"add{i}"], [f"relu{i}"], name=f"relu_{i}"),
        ]
        prev = f"relu{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="output"))
    graph = helper.make_graph(
        nodes,
        "fused_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, width])],
        inits,
    )
    return _model(graph)


def small_cnn(seed: int = 0, channels: int = 8, blocks: int = 4, size: int = 16) -> onnx.ModelProto:
    """``blocks`` Conv/Relu pairs, global average pooling and Flatten: image [1,3,size,size] -> ``y`` [1,channels]."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    prev, cin = "x", 3
    for i in range(blocks):
        scale = np.sqrt(cin * 9)
        inits.append(
            numpy_helper.from_array((rng.normal(0, 1, (channels, cin, 3, 3)) / scale).astype(np.float32), f"cw{i}")
        )
        inits.append(numpy_helper.from_array(rng.normal(0, 0.1, (channels,)).astype(np.float32), f"cb{i}"))
        nodes += [
            helper.make_node("Conv", [prev, f"cw{i}", f"cb{i}"], [f"conv{i}"], name=f"conv_{i}", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", [f"conv{i}"], [f"crelu{i}"], name=f"relu_{i}"),
        ]
        prev, cin = f"crelu{i}", channels
    nodes += [
        helper.make_node("GlobalAveragePool", [prev], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["y"], name="flatten"),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels])],
        inits,
    )
    return _model(graph)


def hang(iterations: int = 10**9, width: int = 64) -> onnx.ModelProto:
    """y = x after ``iterations`` MatMuls inside a Loop: a model that runs for minutes."""
    w = numpy_helper.from_array(np.eye(width, dtype=np.float32), "w")
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["state_in", "w"], ["state_mm"], name="body_matmul"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
            helper.make_node("Identity", ["state_mm"], ["state_out"], name="body_state"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("state_in", TensorProto.FLOAT, [1, width]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("state_out", TensorProto.FLOAT, [1, width]),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "keep_going", "x"], ["y"], name="spin", body=body)],
        "hang",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        [
            numpy_helper.from_array(np.array(iterations, dtype=np.int64), "trips"),
            numpy_helper.from_array(np.array(True), "keep_going"),
            w,
        ],
    )
    return _model(graph)


def scale(factor: float = 1.5, width: int = 8, *, output_dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """x[batch, width] -> Mul by ``factor`` -> ``y``, cast to ``output_dtype`` when it is not float32."""
    nodes = [helper.make_node("Mul", ["x", "k"], ["y" if output_dtype == TensorProto.FLOAT else "m"], name="mul")]
    if output_dtype != TensorProto.FLOAT:
        nodes.append(helper.make_node("Cast", ["m"], ["y"], name="cast", to=output_dtype))
    graph = helper.make_graph(
        nodes,
        "scale",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", output_dtype, ["batch", width])],
        [numpy_helper.from_array(np.array(factor, np.float32), "k")],
    )
    return _model(graph)


def labelled_classifier(
    seed: int = 0, features: int = 4, labels: tuple[str, ...] = ("cat", "dog", "émeu"), *, scale: float = 1.0
) -> onnx.ModelProto:
    """x[batch, features] -> MatMul -> ``class_id`` (int64 ArgMax), ``label`` (its string via LabelEncoder)
    and ``probabilities`` (Softmax through a ZipMap: ``seq(map(int64, tensor(float)))``), as skl2onnx does.

    ``scale`` multiplies the weights' second column: values away from 1 move scores and flip labels.
    """
    rng = np.random.default_rng(seed)
    weights = rng.normal(0, 1.0, (features, len(labels))).astype(np.float32)
    weights[:, 1] *= scale
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "w"], ["scores"], name="fc"),
        n("Softmax", ["scores"], ["soft"], name="softmax", axis=1),
        n("ArgMax", ["scores"], ["class_id"], name="argmax", axis=1, keepdims=0),
        n(
            "LabelEncoder",
            ["class_id"],
            ["label"],
            name="encode",
            domain="ai.onnx.ml",
            keys_int64s=list(range(len(labels))),
            values_strings=list(labels),
            default_string="?",
        ),
        n(
            "ZipMap",
            ["soft"],
            ["probabilities"],
            name="zipmap",
            domain="ai.onnx.ml",
            classlabels_int64s=list(range(len(labels))),
        ),
    ]
    value = helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes,
        "labelled_classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
        [
            helper.make_tensor_value_info("class_id", TensorProto.INT64, ["batch"]),
            helper.make_tensor_value_info("label", TensorProto.STRING, ["batch"]),
            helper.make_value_info("probabilities", helper.make_sequence_type_proto(value)),
        ],
        [numpy_helper.from_array(weights, "w")],
    )
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="onnxmon-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
