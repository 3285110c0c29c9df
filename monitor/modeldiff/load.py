"""Reading a model file for the diff: the protobuf, its external data, and where that data lived.

``onnx.load`` forgets which tensors came from an external-data file once it has read them in, so
the file is parsed without external data first, the locations are noted per tensor, and then the
data is loaded. Every failure is a ``ModelError`` that names the file (the CLI prints it on one
line and exits 2), a tensor whose data is short of its dims included (``files.tensor_storage``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import external_data_helper

from monitor.errors import ModelError
from monitor.files import tensor_storage
from monitor.modeldiff.walk import TensorKey, tensors


@dataclass(frozen=True)
class LoadedModel:
    """A model with its external data read in, and each externally stored tensor's data file."""

    proto: onnx.ModelProto
    path: str = ""
    external: dict[TensorKey, str] = field(default_factory=dict)


def external_locations(model: onnx.ModelProto) -> dict[TensorKey, str]:
    """Tensor -> the external-data file it is stored in (before the data is loaded)."""
    found: dict[TensorKey, str] = {}
    for key, _kind, tensor in tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            found[key] = next((e.value for e in tensor.external_data if e.key == "location"), "")
    return found


def load_model(path: Path | str) -> LoadedModel:
    """The model at ``path`` with its external data; ``ModelError`` naming the file if it cannot be read."""
    path = Path(path)
    if not path.exists():
        raise ModelError(f"model file {path} not found")
    if not path.is_file():
        raise ModelError(f"model file {path} is not a regular file")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises several types of decode errors
        raise ModelError(f"model file {path} is not a valid ONNX model: {_one_line(exc)}") from None
    if not proto.graph.node and not proto.graph.output and not proto.graph.initializer:
        raise ModelError(f"model file {path} is not a valid ONNX model: it has no graph")
    external = external_locations(proto)
    if external:
        try:
            external_data_helper.load_external_data_for_model(proto, str(path.parent))
        except Exception as exc:  # a missing, short or escaping data file
            raise ModelError(f"external data of model file {path} cannot be read: {_one_line(exc)}") from None
    short = tensor_storage.problems(proto, most=1)
    if short:  # the values cannot be read as their shape: ONNX Runtime refuses the file, the diff cannot compare it
        raise ModelError(f"model file {path} is not a valid ONNX model: {short[0]}")
    return LoadedModel(proto, str(path), external)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]
