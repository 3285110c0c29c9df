"""``onnxmon lint`` over the whole real-model corpus: it never crashes and finds nothing spurious.

What each model is known to hold is written down here, per model, and checked exactly: a new
finding (a false positive, or a rule that got louder) fails, and so does a finding that vanished.
``slovorez`` is an fp16 model whose Conv weights really hold subnormal values (checked here with
numpy on the file itself, not with lint).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from monitor.lint import lint_model
from monitor.runtime import support
from tests.realmodels import MODELS, source_file

pytestmark = pytest.mark.realmodels

# Attention-mask and padding constants (-1e9, float32's max) that an fp16 conversion turns into inf,
# which AutoCast keeps in fp32 (init_max): a true, info-level property of these float32 models,
# checked with numpy on the files themselves below.
FP32_PAST_FP16 = ("romanizer-decoder", "sudachi-b", "traceforge-decoder", "traceforge-encoder", "unidic-lite")
KNOWN = {"slovorez": {"fp16_subnormal"}, **{name: {"fp16_unsafe_initializer"} for name in FP32_PAST_FP16}}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_corpus_model_lints_to_exactly_what_it_is_known_to_hold(name: str) -> None:
    path = source_file(MODELS[name])
    report = lint_model(path, support=support.probe())
    assert report.codes() == KNOWN.get(name, set()), [str(h) for h in report.hazards]
    assert report  # no hazard of severity error
    for hazard in report.hazards:
        assert hazard.node and hazard.op_type and hazard.detail


def test_the_subnormals_lint_reports_in_slovorez_are_really_there() -> None:
    model = onnx.load(str(source_file(MODELS["slovorez"])))
    smallest_normal = float(np.finfo(np.float16).smallest_normal)
    counts = {}
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT16:
            magnitude = np.abs(numpy_helper.to_array(init).astype(np.float32))
            found = int(np.count_nonzero((magnitude > 0) & (magnitude < smallest_normal)))
            if found:
                counts[init.name] = found
    reported = {
        h.detail.split("'")[1]: int(h.detail.split(" holds ")[1].split(" ")[0])
        for h in lint_model(source_file(MODELS["slovorez"])).hazards
    }
    assert reported == counts


@pytest.mark.parametrize("name", FP32_PAST_FP16)
def test_the_fp32_constants_past_65504_lint_reports_are_really_there(name: str) -> None:
    model = onnx.load(str(source_file(MODELS[name])))
    tensors = [(t.name, t) for t in model.graph.initializer]
    tensors += [
        (n.output[0], a.t)
        for n in model.graph.node
        if n.op_type == "Constant"
        for a in n.attribute
        if a.name == "value"
    ]
    over = set()
    for name_, tensor in tensors:
        if tensor.data_type == onnx.TensorProto.FLOAT:
            values = numpy_helper.to_array(tensor)
            finite = np.abs(values[np.isfinite(values)])
            with np.errstate(over="ignore"):
                if finite.size and finite.max() > 65504 and np.isinf(values.astype(np.float16)).any():
                    over.add(name_)
    reported = {h.detail.split("'")[1] for h in lint_model(source_file(MODELS[name])).hazards}
    assert over and reported == over
