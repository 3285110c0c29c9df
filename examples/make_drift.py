"""Turn the example model into a drifted variant, for the README walkthrough.

    python examples/make_drift.py fp16     # weights rounded to float16 (an fp16 build's weights)
    python examples/make_drift.py weight   # one filter of the second convolution scaled by 1.05
    python examples/build_example.py       # restore the validated model

Only ``onnx`` and ``numpy`` are needed, so this runs on a plain ``onnxmon[cpu]`` install.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

from build_example import tinynet


def fp16_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init)
        init.CopyFrom(numpy_helper.from_array(array.astype(np.float16).astype(np.float32), init.name))
    return model


def one_weight(model: onnx.ModelProto) -> onnx.ModelProto:
    """A quietly re-exported checkpoint: one conv filter 5% off, everything else identical."""
    for init in model.graph.initializer:
        if init.name == "conv2.w":
            array = numpy_helper.to_array(init).copy()
            array[5] *= 1.05
            init.CopyFrom(numpy_helper.from_array(array, init.name))
    return model


VARIANTS = {"fp16": fp16_weights, "weight": one_weight}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in VARIANTS:
        print(f"usage: {argv[0]} {{{','.join(VARIANTS)}}}", file=sys.stderr)
        return 2
    out = Path(__file__).resolve().parent / "tinynet.onnx"
    onnx.save(VARIANTS[argv[1]](tinynet()), str(out))
    print(f"wrote {out} ({argv[1]} variant)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
