"""fp16 weights that no longer hold the float32 values: inf from overflow, subnormals.

Why: float16 ends at 65504; a float32 weight beyond it becomes ``inf`` when a model is converted
(``onnxconverter_common.float16`` without clamping, ``.half()`` before export) and every output
it touches becomes inf or NaN. Below 6.1e-5 fp16 is subnormal: GPUs that flush subnormals to
zero (FTZ, common in fp16 kernels) read those weights as 0, so CPU and GPU disagree.
Initializers and ``Constant`` values are both read, one tensor at a time.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx

from monitor.lint.graph import LintGraph
from monitor.lint.hazards import Hazard, hazard

FP16_SMALLEST_NORMAL = float(np.finfo(np.float16).smallest_normal)  # 6.1035e-05


def check(graph: LintGraph) -> Iterator[Hazard]:
    for name, tensor in (*graph.initializers.items(), *graph.constant_nodes.items()):
        if tensor.data_type != onnx.TensorProto.FLOAT16:
            continue
        values = graph.constant(name)
        if values is None or values.size == 0:
            continue
        values = values.astype(np.float32)
        node, op_type = _reader(graph, name)
        nonfinite = int(np.count_nonzero(~np.isfinite(values)))
        if nonfinite:
            yield hazard(
                "fp16_overflow",
                node,
                op_type,
                f"fp16 weight {name!r} holds {nonfinite} of {values.size} non-finite value(s) (inf/nan): values past"
                " 65504 overflowed at conversion; clamp them or keep this tensor in float32",
            )
        magnitude = np.abs(values)
        subnormal = int(np.count_nonzero((magnitude > 0) & (magnitude < FP16_SMALLEST_NORMAL)))
        if subnormal:
            yield hazard(
                "fp16_subnormal",
                node,
                op_type,
                f"fp16 weight {name!r} holds {subnormal} of {values.size} subnormal value(s) (|x| < 6.1e-05):"
                " hardware that flushes subnormals (FTZ) reads them as 0",
            )


def _reader(graph: LintGraph, tensor: str) -> tuple[str, str]:
    """The first node reading ``tensor`` (the one a user looks for), else the tensor itself."""
    readers = graph.consumers.get(tensor, [])
    if readers:
        return readers[0][0].name, readers[0][0].op_type
    producer = graph.producers.get(tensor)
    return (producer.name, producer.op_type) if producer else (tensor, "initializer")
