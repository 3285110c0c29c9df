"""Tensors on the Open Inference Protocol's wire: numpy dtypes and the protocol's datatypes, and what a
served answer must be before it is compared.

The protocol names its datatypes (``FP32``, ``INT64``, ``BYTES``, ...); a server that answers an output in
another datatype than the model produces, or with a shape its data does not fill, is lying about the
tensor: ``endpoint_dtype`` / ``endpoint_shape``, never a comparison of numbers that mean something else.
Pure numpy: no client here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from monitor.errors import EndpointError
from monitor.files import traffic

_DATATYPES = traffic.OIP_DATATYPES
_BY_DTYPE = {np.dtype(t): name for name, t in _DATATYPES.items()}


def datatype_of(array: np.ndarray) -> str:
    """The protocol's datatype of ``array``; strings are ``BYTES``; anything else an ``EndpointError``."""
    if array.dtype.kind in "OUS":
        return "BYTES"
    name = _BY_DTYPE.get(array.dtype)
    if name is None:
        raise EndpointError("endpoint_dtype", f"dtype {array.dtype} has no Open Inference Protocol datatype")
    return name


def as_sent(array: np.ndarray) -> np.ndarray:
    """``array`` as the client sends it: C-contiguous, strings as UTF-8 bytes objects."""
    if array.dtype.kind in "US":
        encoded = np.array([str(v).encode() for v in array.reshape(-1)], dtype=np.object_)
        return encoded.reshape(array.shape)
    return np.ascontiguousarray(array)


def received(
    name: str,
    datatype: str,
    shape: list[int],
    decode: Any,
    expected: np.dtype[Any] | None,
) -> np.ndarray:
    """The output ``name`` the server answered as ``datatype`` of ``shape``, decoded by ``decode()``.

    Raises ``EndpointError`` (``endpoint_dtype``) when ``datatype`` is not ``expected``'s (the model's own
    output dtype, from the local session) and (``endpoint_shape``) when the data does not fill ``shape``.
    """
    if expected is not None and datatype != ("BYTES" if expected.kind in "OUS" else _BY_DTYPE.get(expected)):
        raise EndpointError(
            "endpoint_dtype", f"output {name!r}: the server answered {datatype}, the model produces {expected}"
        )
    try:
        value = decode()
    except ValueError as exc:  # numpy's reshape of too few or too many bytes
        raise EndpointError("endpoint_shape", f"output {name!r}: data does not fill shape {shape}: {exc}") from None
    if value is None:
        raise EndpointError("endpoint_answer", f"output {name!r} is missing from the server's answer")
    array = np.asarray(value)
    if list(array.shape) != [int(d) for d in shape]:
        raise EndpointError("endpoint_shape", f"output {name!r}: shape {list(array.shape)} != declared {shape}")
    if array.dtype.kind == "O":  # BYTES: text, as the local session gives it
        array = np.array([v.decode() if isinstance(v, bytes) else str(v) for v in array.reshape(-1)]).reshape(
            array.shape
        )
    return array


def check_shape(name: str, served: np.ndarray, expected: np.ndarray, where: str) -> None:
    """``endpoint_shape`` when the served output's shape is not the model's for the same input."""
    if served.shape != expected.shape:
        raise EndpointError(
            "endpoint_shape",
            f"output {name!r} ({where}): the server answered shape {list(served.shape)},"
            f" the model gives {list(expected.shape)}",
        )
