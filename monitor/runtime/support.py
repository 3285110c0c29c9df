"""What the installed ONNX Runtime loads: the newest IR version and ai.onnx opset, probed for real.

Why: ONNX Runtime has no API that says which opset it supports, and the documented table lags
behind releases. The runtime itself answers: a one-node ``Identity`` model stamped with a given
opset (or IR version) either loads in a CPU session or is refused at load
(``ValidateOpsetForDomain``, "Unsupported model IR version"). A binary search over each finds the
newest that loads in about fifteen tiny sessions (a few milliseconds each), once per process.
The answer is a ``lint.RuntimeSupport`` for the static linter, which never imports onnxruntime.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import onnxruntime as ort
from onnx import TensorProto, helper

from monitor.lint import RuntimeSupport

OPSET_RANGE = (7, 512)  # every runtime we support loads opset 7; nothing will reach 512
IR_RANGE = (3, 128)


@functools.cache
def probe() -> RuntimeSupport:
    """The installed runtime's newest loadable IR version and ai.onnx opset (cached per process)."""
    max_opset = _newest(lambda v: _loads(opset=v, ir_version=_ir_for_probe()), *OPSET_RANGE)
    max_ir = _newest(lambda v: _loads(opset=OPSET_RANGE[0], ir_version=v), *IR_RANGE)
    return RuntimeSupport(
        runtime="onnxruntime", version=ort.__version__, max_ir_version=max_ir, max_opsets={"": max_opset}
    )


def _ir_for_probe() -> int:
    """An IR version every runtime new enough for onnxmon loads (8: ONNX 1.10, ORT 1.10)."""
    return 8


def _newest(loads: Callable[[int], bool], low: int, high: int) -> int:
    """The largest ``v`` in ``[low, high)`` with ``loads(v)``, assuming ``loads(low)`` and monotony."""
    while high - low > 1:
        middle = (low + high) // 2
        if loads(middle):
            low = middle
        else:
            high = middle
    return low


def _loads(*, opset: int, ir_version: int) -> bool:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    options = ort.SessionOptions()
    options.log_severity_level = 4  # the refusals are the answer, not news
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception:  # ORT's Fail/InvalidGraph: the version is not supported
        return False
    return True
