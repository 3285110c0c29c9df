"""fp16 weights that no longer hold the float32 values: inf from overflow, subnormals.

Why: float16 ends at 65504; a float32 weight beyond it becomes ``inf`` when a model is converted
(``onnxconverter_common.float16`` without clamping, ``.half()`` before export) and every output
it touches becomes inf or NaN. Below 6.1e-5 fp16 is subnormal: GPUs that flush subnormals to
zero (FTZ, common in fp16 kernels) read those weights as 0, so CPU and GPU disagree.
Initializers and ``Constant`` values are both read, one tensor at a time.

Before a conversion, the thresholds NVIDIA TensorRT Model Optimizer's AutoCast uses to keep nodes
in fp32 (https://nvidia.github.io/TensorRT-Model-Optimizer/guides/8_autocast.html: ``--init_max``,
default 65504, for initializers; ``--data_max``, default 512, for activations seen on calibration
data) mark a float32 model's tensors that an fp16 build would overflow (``fp16_unsafe_*``, info):
weights from the file, activations from the benchmark set's intermediates when the caller ran them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import onnx

from monitor.lint.graph import LintGraph
from monitor.lint.hazards import Hazard, hazard

FP16_SMALLEST_NORMAL = float(np.finfo(np.float16).smallest_normal)  # 6.1035e-05
AUTOCAST_INIT_MAX = 65504.0  # AutoCast's --init_max default: fp16's largest finite value
AUTOCAST_DATA_MAX = 512.0  # AutoCast's --data_max default: activations above it stay in fp32


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


def check_fp32_initializers(graph: LintGraph) -> Iterator[Hazard]:
    """float32 weights past AutoCast's ``init_max``: an fp16 conversion would make them inf."""
    for name, tensor in (*graph.initializers.items(), *graph.constant_nodes.items()):
        if tensor.data_type != onnx.TensorProto.FLOAT:
            continue
        values = graph.constant(name)
        if values is None or values.size == 0:
            continue
        finite = np.abs(values[np.isfinite(values)])
        largest = float(finite.max()) if finite.size else 0.0
        if largest > AUTOCAST_INIT_MAX:
            node, op_type = _reader(graph, name)
            over = int(np.count_nonzero(finite > AUTOCAST_INIT_MAX))
            yield hazard(
                "fp16_unsafe_initializer",
                node,
                op_type,
                f"fp32 weight {name!r} holds {over} of {values.size} value(s) past 65504 (max |x| {largest:.4g}):"
                " an fp16 conversion overflows them to inf; keep this tensor in fp32 (AutoCast init_max)",
            )


def check_activations(graph: LintGraph, maxima: Mapping[str, float]) -> Iterator[Hazard]:
    """float32 activations whose largest magnitude on the benchmark set passes AutoCast's ``data_max``."""
    for name, largest in sorted(maxima.items()):
        if largest > AUTOCAST_DATA_MAX and name in graph.producers:
            producer = graph.producers[name]
            yield hazard(
                "fp16_unsafe_activation",
                producer.name,
                producer.op_type,
                f"activation {name!r} reaches |x| {largest:.4g} on the benchmark set, past 512: AutoCast keeps"
                " its node in fp32 (data_max); an fp16 build risks overflow downstream (a sum, a softmax, a norm)",
            )


def _reader(graph: LintGraph, tensor: str) -> tuple[str, str]:
    """The first node reading ``tensor`` (the one a user looks for), else the tensor itself."""
    readers = graph.consumers.get(tensor, [])
    if readers:
        return readers[0][0].name, readers[0][0].op_type
    producer = graph.producers.get(tensor)
    return (producer.name, producer.op_type) if producer else (tensor, "initializer")
