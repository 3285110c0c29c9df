"""Model-file variants of a corpus model, made with the tools people really use.

Each function writes a changed copy of a pristine model: its largest float weight scaled, one
element of it moved by one ULP, an fp16 conversion (onnxconverter-common, with and without
``keep_io_types``), an int8 dynamic or static QDQ quantization (``onnxruntime.quantization``).
Where the tool cannot make a model ONNX Runtime loads, it raises ``NotApplicable`` with the
tool's own words, so the scenario table says why instead of silently dropping the case.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

DRIFT = 1e-3
_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE}


class NotApplicable(Exception):
    """The converter cannot make a runnable variant of this model."""


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every subgraph below it (If branches, Loop and Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from all_graphs(attr.g)
            for sub in attr.graphs:
                yield from all_graphs(sub)


def float_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every float initializer and Constant value of ``graph`` and of its subgraphs (If, Loop, Scan)."""
    yield from (t for t in graph.initializer if t.data_type in _FLOATS)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in _FLOATS:
                yield attr.t
            elif attr.type == onnx.AttributeProto.GRAPH:
                yield from float_tensors(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from float_tensors(sub)


def float_attributes(graph: onnx.GraphProto) -> Iterator[onnx.AttributeProto]:
    """Every list-of-floats attribute: where ai.onnx.ml models keep their weights (trees, linear models)."""
    for node in graph.node:
        for attr in node.attribute:
            # nodes_hitrates is a hint to the runtime, not a weight: scaling it changes nothing
            if attr.type == onnx.AttributeProto.FLOATS and len(attr.floats) > 1 and attr.name != "nodes_hitrates":
                yield attr
            elif attr.type == onnx.AttributeProto.GRAPH:
                yield from float_attributes(attr.g)


Edit = Callable[[np.ndarray], np.ndarray]


def scaled(array: np.ndarray) -> np.ndarray:
    """Every element times (1 + DRIFT), in the array's own dtype."""
    return (array * (1 + DRIFT)).astype(array.dtype)


def one_ulp(array: np.ndarray) -> np.ndarray:
    """The element of largest magnitude moved one ULP away from zero; the rest bit-identical."""
    out = array.copy()
    flat = out.reshape(-1)
    index = int(np.argmax(np.abs(flat)))
    flat[index] = np.nextafter(flat[index], np.copysign(np.inf, flat[index]), dtype=flat.dtype)
    return out


def edit_largest_weight(pristine: Path, target: Path, external_data: str | None, edit: Edit) -> str:
    """Write ``pristine`` to ``target`` with ``edit`` applied to its largest float weight; which one.

    The weight is the largest float initializer or Constant (subgraphs included); a model with
    none (skl2onnx trees and linear models) has its largest float-list attribute edited instead.
    """
    model = onnx.load(str(pristine))
    tensors = list(float_tensors(model.graph))
    if tensors:
        largest = max(tensors, key=lambda t: int(np.prod(t.dims, dtype=np.int64)))
        array = numpy_helper.to_array(largest)
        largest.CopyFrom(numpy_helper.from_array(edit(array), largest.name))
        what = f"tensor {largest.name or '(a Constant)'} {list(array.shape)}"
    else:
        attribute = max(float_attributes(model.graph), key=lambda a: len(a.floats))
        values = edit(np.array(attribute.floats, dtype=np.float32))
        attribute.floats[:] = values.tolist()
        what = f"attribute {attribute.name} [{len(values)}]"
    save(model, target, external_data)
    return what


def save(model: onnx.ModelProto, target: Path, external_data: str | None) -> None:
    if external_data:
        (target.parent / external_data).unlink(missing_ok=True)  # onnx appends to an existing data file
        onnx.save_model(model, str(target), save_as_external_data=True, location=external_data, size_threshold=1024)
    else:
        onnx.save_model(model, str(target))


def fp16(pristine: Path, target: Path, *, keep_io_types: bool) -> list[str]:
    """onnxconverter-common's fp16 conversion; the nodes and op types it had to leave in fp32.

    The converter leaves some graphs mistyped (a Cast whose ``to`` it did not update, a
    DequantizeLinear whose scale became fp16); ONNX Runtime names the node or op it refuses,
    which then goes on the block list, as a user would do by hand, until the model loads.
    """
    from onnxconverter_common import float16

    model = onnx.load(str(pristine))
    if any(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer):
        raise NotApplicable("the model is already fp16")
    nodes: list[str] = []
    ops: list[str] = []
    for _ in range(40):
        try:
            converted = float16.convert_float_to_float16(
                onnx.load(str(pristine)),
                keep_io_types=keep_io_types,
                op_block_list=list(float16.DEFAULT_OP_BLOCK_LIST) + ops,
                node_block_list=nodes,
            )
        except Exception as exc:  # the converter's own failure on this graph
            raise NotApplicable(f"onnxconverter-common: {type(exc).__name__}: {str(exc)[:160]}") from exc
        onnx.save_model(converted, str(target))
        problem = _load_problem(target)
        if problem is None:
            return sorted(ops) + sorted(nodes)
        op = re.search(r"of operator \((\w+)\)", problem) or re.search(r"implementation for (\w+)\(", problem)
        node = re.search(r"(?:of|in) node \(([^)]*)\)", problem)
        if op and op.group(1) not in ops:
            ops.append(op.group(1))
        elif node and node.group(1) not in nodes:
            nodes.append(node.group(1))
        else:
            raise NotApplicable(f"onnxconverter-common's fp16 model does not load: {problem[:200]}")
    raise NotApplicable("onnxconverter-common's fp16 model still does not load after 40 blocked nodes")


def quantize(pristine: Path, target: Path, *, static: bool, samples: Sequence[Mapping[str, np.ndarray]]) -> None:
    """int8 dynamic quantization, or static QDQ (MinMax) calibrated on the benchmark samples."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        quantize_dynamic,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = iter(samples)

        def get_next(self) -> dict[str, np.ndarray] | None:
            item = next(self.left, None)
            return None if item is None else dict(item)

    try:
        if static:
            quantize_static(
                str(pristine),
                str(target),
                Reader(),
                quant_format=QuantFormat.QDQ,
                calibrate_method=CalibrationMethod.MinMax,
            )
        else:
            quantize_dynamic(str(pristine), str(target))
    except Exception as exc:  # the quantizer's own refusal (ML ops, unsupported types)
        raise NotApplicable(f"onnxruntime.quantization: {type(exc).__name__}: {str(exc)[:160]}") from exc
    problem = _load_problem(target)
    if problem is not None:
        raise NotApplicable(f"the quantized model does not load: {problem[:200]}")


def _load_problem(path: Path) -> str | None:
    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:
        return str(exc)
    return None
