"""The float values a QDQ model quantizes: the inputs of its ``QuantizeLinear`` nodes, sample by sample.

The tensors are read the way localization reads intermediates: a copy of the model with them
added as graph outputs (typed by shape inference where it knows them), run by ONNX Runtime on the
CPU with graph optimizations disabled, so the Q/DQ pairs run as written (simulated quantization,
the numbers a quantizer's calibration saw) and no fusion removes the float tensor. A graph input
is taken from the sample itself; an initializer is read from the model.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from monitor.config.settings import ProviderSpec, SessionConfig
from monitor.localize.graph import value_types
from monitor.runtime.session import Deadline, Session

_CPU = (ProviderSpec(name="CPUExecutionProvider"),)
_UNOPTIMIZED = SessionConfig(graph_optimization_level="disable")


def quantized_values(
    model: onnx.ModelProto,
    tensors: Sequence[str],
    samples: Iterable[Mapping[str, np.ndarray[Any, Any]]],
    *,
    timeout_s: float | None = None,
) -> Iterator[dict[str, np.ndarray[Any, Any]]]:
    """For each sample, the values of ``tensors`` (graph inputs, initializers or node outputs).

    ``timeout_s`` bounds all the runs together (``RunTimeout`` when it is spent).
    """
    inputs = {i.name for i in model.graph.input}
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.name in tensors}
    exposed = [t for t in dict.fromkeys(tensors) if t not in inputs and t not in constants]
    with tempfile.TemporaryDirectory(prefix="onnxmon-coverage-") as scratch, Deadline(timeout_s) as guard:
        session = _session(model, exposed, Path(scratch)) if exposed else None
        for sample in samples:
            values: dict[str, np.ndarray[Any, Any]] = dict(constants)
            values |= {name: np.asarray(sample[name]) for name in tensors if name in inputs and name in sample}
            if session is not None:
                ran = session.run(sample, guard=guard, where="calibration coverage inputs")
                values |= {name: ran[name] for name in exposed if name in ran}
            yield values


def _session(model: onnx.ModelProto, exposed: Sequence[str], folder: Path) -> Session:
    working = onnx.ModelProto()
    working.CopyFrom(model)
    types = value_types(working)
    present = {o.name for o in working.graph.output}
    for name in exposed:
        if name in present:
            continue
        if name in types:
            working.graph.output.append(types[name])
        else:
            working.graph.output.add().name = name
    path = folder / "exposed.onnx"
    onnx.save(working, str(path), save_as_external_data=True, location="weights.bin", size_threshold=1024)
    return Session(path, _CPU, _UNOPTIMIZED)
