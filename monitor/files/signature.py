"""A model's input signature, and whether a sample fits it — written once, used everywhere.

``model_signature`` reads it with the ``onnx`` package (no session needed: benchmark sets are
generated from it); ``runner.Session`` builds the same ``InputSpec``s from ONNX Runtime.
``check_inputs_fit`` then says exactly how a sample does not fit: missing or extra inputs,
dtype, rank, fixed dims, and a named dim (``batch``) that differs between inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from monitor.config.decisions import OutputType
from monitor.errors import ModelError
from monitor.files.tensors import format_shape


@dataclass(frozen=True)
class InputSpec:
    """One model input: name, numpy dtype (None: not a numpy type) and shape (int, dim name or ``"?"``)."""

    name: str
    dtype: np.dtype[Any] | None
    shape: tuple[int | str, ...]


def model_signature(model_path: Path, *, outputs: bool = False) -> list[InputSpec]:
    """The graph inputs (or outputs) of an ONNX model, initializers excluded, in graph order."""
    model = _load_model(model_path)
    initializers = {init.name for init in model.graph.initializer}
    values = model.graph.output if outputs else [v for v in model.graph.input if v.name not in initializers]
    specs = []
    for value in values:
        if not value.type.HasField("tensor_type"):
            raise ModelError(f"model {model_path}: {value.name!r} is not a tensor; only tensor inputs are supported")
        tensor = value.type.tensor_type
        if tensor.elem_type == onnx.TensorProto.STRING and not outputs:
            raise ModelError(
                f"model {model_path}: input {value.name!r} is a tensor(string); benchmark sets hold numeric and"
                " bool tensors only, so models with string inputs cannot be checked yet"
            )
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        except (KeyError, TypeError, ValueError):
            raise ModelError(
                f"model {model_path}: {value.name!r} has unsupported element type {tensor.elem_type}"
            ) from None
        shape: list[int | str] = []
        for dim in tensor.shape.dim:
            if dim.HasField("dim_value"):
                shape.append(int(dim.dim_value))
            else:
                shape.append(dim.dim_param or "?")
        specs.append(InputSpec(value.name, dtype, tuple(shape)))
    return specs


def check_inputs_fit(sample: Mapping[str, np.ndarray[Any, Any]], signature: Sequence[InputSpec], *, where: str) -> None:
    """Raise ``ModelError`` saying exactly how ``sample`` does not fit the model's inputs."""
    wanted = [spec.name for spec in signature]
    missing = [name for name in wanted if name not in sample]
    extra = sorted(name for name in sample if name not in wanted)
    if missing or extra:
        parts = ([f"lacks input(s) {missing}"] if missing else []) + (
            [f"has input(s) {extra} the model does not take"] if extra else []
        )
        raise ModelError(f"{where} {' and '.join(parts)}; model inputs are {wanted}")
    named_dims: dict[str, tuple[int, str]] = {}
    for spec in signature:
        array = sample[spec.name]
        if spec.dtype is not None and array.dtype != spec.dtype:
            raise ModelError(f"{where} input {spec.name!r} has dtype {array.dtype.name}, model wants {spec.dtype.name}")
        fits = array.ndim == len(spec.shape) and all(
            isinstance(want, str) or want == got for got, want in zip(array.shape, spec.shape, strict=False)
        )
        if not fits:
            raise ModelError(
                f"{where} input {spec.name!r} has shape {format_shape(array.shape)},"
                f" model wants {format_shape(spec.shape)}"
            )
        for got, want in zip(array.shape, spec.shape, strict=True):
            if isinstance(want, str) and want != "?":
                seen = named_dims.setdefault(want, (got, spec.name))
                if seen[0] != got:
                    raise ModelError(
                        f"{where} input {spec.name!r} has dim {want!r} = {got},"
                        f" but input {seen[1]!r} has {want!r} = {seen[0]}"
                    )


def output_names(model_path: Path) -> list[str]:
    """The model's graph output names, in graph order, read without its weights (any output type)."""
    return [value.name for value in _load_model(model_path).graph.output]


def _load_model(model_path: Path) -> onnx.ModelProto:
    if not model_path.is_file():
        raise ModelError(f"model file {model_path} not found")
    try:
        return onnx.load(str(model_path), load_external_data=False)
    except Exception as exc:  # protobuf decode errors have no common base worth naming
        raise ModelError(f"model file {model_path} cannot be parsed as ONNX: {exc}") from None


def output_types(model_path: Path) -> dict[str, OutputType]:
    """Every output tensor a check compares, by name (companions of non-tensor outputs included), with its type.

    Read without the weights, in the scheme of ``runtime/nontensor.py``: ``seq(map(K, V))`` is
    ``name`` (V, rank 2: maps × keys) and ``name:keys`` (K, rank 1); ``map(K, V)`` the same at rank 1;
    ``seq(tensor(T))`` is ``name`` (T, rank unknown) and ``name:shapes`` (int64, rank 2). Other types
    are left out (a check refuses them by name).
    """
    found: dict[str, OutputType] = {}
    for value in _load_model(model_path).graph.output:
        kind = value.type.WhichOneof("value")
        if kind == "tensor_type":
            tensor = value.type.tensor_type
            dims = [str(d.dim_value) if d.HasField("dim_value") else d.dim_param or "?" for d in tensor.shape.dim]
            rank = len(dims) if tensor.HasField("shape") else None
            text = f"tensor({_element(tensor.elem_type)})" + (f" [{', '.join(dims)}]" if rank is not None else "")
            found[value.name] = OutputType(_element(tensor.elem_type), rank, text)
        elif kind == "sequence_type" and value.type.sequence_type.elem_type.WhichOneof("value") == "tensor_type":
            element = _element(value.type.sequence_type.elem_type.tensor_type.elem_type)
            text = f"seq(tensor({element}))"
            found[value.name] = OutputType(element, None, f"{text}, its elements stacked")
            found[value.name + ":shapes"] = OutputType("int64", 2, f"the element shapes of {text}")
        else:
            inner = value.type.sequence_type.elem_type if kind == "sequence_type" else value.type
            if inner.WhichOneof("value") != "map_type":
                continue
            key, element = _element(inner.map_type.key_type), _map_value(inner.map_type.value_type)
            text = f"map({key},tensor({element}))"
            text, rank = (f"seq({text}) as a (maps, keys) table", 2) if kind == "sequence_type" else (text, 1)
            found[value.name] = OutputType(element, rank, text)
            found[value.name + ":keys"] = OutputType(key, 1, f"the sorted keys of {value.name}")
    return found


def _element(elem_type: int) -> str:
    """The ONNX element type's name as ONNX Runtime spells it: ``float``, ``float16``, ``int64``, ``string``."""
    return str(onnx.TensorProto.DataType.Name(elem_type)).lower()


def _map_value(value: onnx.TypeProto) -> str:
    return _element(value.tensor_type.elem_type) if value.WhichOneof("value") == "tensor_type" else "?"
