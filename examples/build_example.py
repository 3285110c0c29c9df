"""Build the bundled example model ``examples/tinynet.onnx`` (seeded, so reproducible).

A small image classifier — Conv/BatchNorm-free Relu stack, global pooling, a dense layer
and a softmax — written with ``onnx.helper`` so it needs no training framework. Run:

    python examples/build_example.py            # writes examples/tinynet.onnx
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent


def tinynet(seed: int = 20261130) -> onnx.ModelProto:
    """x[batch,3,32,32] -> 2×(Conv+Relu) -> GlobalAveragePool -> Gemm -> logits, Softmax -> prob."""
    rng = np.random.default_rng(seed)

    def tensor(name: str, shape: tuple[int, ...], scale: float) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        tensor("conv1.w", (8, 3, 3, 3), 0.3),
        tensor("conv1.b", (8,), 0.05),
        tensor("conv2.w", (16, 8, 3, 3), 0.15),
        tensor("conv2.b", (16,), 0.05),
        tensor("fc.w", (10, 16), 0.4),
        tensor("fc.b", (10,), 0.05),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv1.w", "conv1.b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "conv2.w", "conv2.b"], ["c2"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "tinynet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10]),
            helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["batch", 10]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnxmon-example")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else HERE / "tinynet.onnx"
    onnx.save(tinynet(), str(out))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
