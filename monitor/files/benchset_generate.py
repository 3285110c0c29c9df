"""``generate``: benchmark-set samples drawn from a model's input signature, and the one check of a spec.

Floats are uniform in ``[low, high)`` (default ``[0, 1)``); integers uniform in ``[low, high]``
inclusive (default ``[0, 9]``); bools fair coin flips. Dynamic dims are fixed by ``dims``, keyed by
the dim's name (``batch``) or by ``input:axis`` (``x:0``). ``edge_cases`` appends five samples:
``zeros``, ``low``, ``high``, ``large`` (±7e4, beyond fp16's 65504) and ``denormal``
(±smallest_normal/100); in the last two, non-float inputs take their range's low value.

``generate_problems`` is the one check of a spec against a signature: ``generate`` refuses with its
first line, ``config validate`` (through ``spec_problems``) and ``onnxmon add`` report every line,
so a spec they accept is one capture accepts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from monitor.config.settings import GenerateSpec
from monitor.errors import BenchsetError, MonitorError
from monitor.files.signature import InputSpec, model_signature
from monitor.files.tensors import is_plain_dtype

Sample = dict[str, np.ndarray[Any, Any]]
EDGE_CASES = ("zeros", "low", "high", "large", "denormal")
LARGE_MAGNITUDE = 7e4  # above float16's max (65504): shows fp16 overflow
DEFAULT_FLOAT_RANGE = (0.0, 1.0)
DEFAULT_INT_RANGE = (0.0, 9.0)
# Generated sets are held in memory while they are written: bound them before drawing a number.
MAX_TENSOR_BYTES = 2**32  # 4 GiB for one input of one sample
MAX_SET_BYTES = 2**34  # 16 GiB for the whole set


def generate(spec: GenerateSpec, signature: Sequence[InputSpec], *, where: str) -> tuple[list[Sample], list[str]]:
    """``spec.count`` seeded random samples drawn to fit ``signature`` (``spec.model``'s), plus the edge cases.

    Refused (``BenchsetError``) when ``generate_problems`` finds anything: the one check that
    ``config validate`` and ``onnxmon add`` run too.
    """
    problems = generate_problems(spec, signature)
    if problems:
        raise BenchsetError(f"{where}: {problems[0]}")
    shapes = {s.name: _fixed_shape(s, spec.dims) for s in signature}
    dtypes = {s.name: _drawable(s) for s in signature}
    ranges = {s.name: _range(dtypes[s.name], spec.ranges.get(s.name)) for s in signature}
    rng = np.random.default_rng(spec.seed)
    samples = [
        {s.name: _draw(rng, dtypes[s.name], shapes[s.name], ranges[s.name]) for s in signature}
        for _ in range(spec.count)
    ]
    labels = ["random"] * spec.count
    if spec.edge_cases:
        for case in EDGE_CASES:
            samples.append({s.name: _edge(case, dtypes[s.name], shapes[s.name], ranges[s.name]) for s in signature})
            labels.append(case)
    return samples, labels


@dataclass(frozen=True)
class UnsizedDim:
    """A dynamic axis of a model input that ``generate.dims`` gives no size."""

    input: str
    axis: int
    name: str | None  # the dim's name (``batch``); None when the model leaves it unnamed

    @property
    def key(self) -> str:
        """The ``generate.dims`` key that sizes it: the dim's name, or ``input:axis`` for an unnamed one."""
        return self.name if self.name is not None else f"{self.input}:{self.axis}"

    def problem(self, given: Mapping[str, int]) -> str:
        if self.name is None:
            return f"input {self.input!r} axis {self.axis} is dynamic and unnamed; set generate.dims['{self.key}']"
        return (
            f"input {self.input!r} has dynamic dim {self.name!r} (axis {self.axis}) with no value;"
            f" set generate.dims.{self.name} (given dims: {sorted(given)})"
        )


def unsized_dims(signature: Sequence[InputSpec], dims: Mapping[str, int]) -> list[UnsizedDim]:
    """Every dynamic axis of ``signature`` that ``dims`` (by dim name or ``input:axis``) leaves without a size."""
    found = []
    for spec in signature:
        for axis, dim in enumerate(spec.shape):
            if isinstance(dim, int) or f"{spec.name}:{axis}" in dims or (dim != "?" and dim in dims):
                continue
            found.append(UnsizedDim(spec.name, axis, None if dim == "?" else dim))
    return found


def generate_problems(spec: GenerateSpec, signature: Sequence[InputSpec]) -> list[str]:
    """Every reason ``generate`` refuses ``spec`` for a model of ``signature``, found before drawing a number.

    One line each, in this order: ranges naming no input, dynamic axes without a size (one line per
    ``generate.dims`` key), input types generate cannot draw, integer ranges beyond their dtype, and
    (when all else fits) a set too large to hold. ``generate`` refuses with the first;
    ``config validate`` and ``onnxmon add`` report them all, so what they accept capture accepts.
    """
    problems = []
    unknown = sorted(set(spec.ranges) - {s.name for s in signature})
    if unknown:
        problems.append(f"generate.ranges names input(s) {unknown}; model inputs are {[s.name for s in signature]}")
    keys: set[str] = set()
    for dim in unsized_dims(signature, spec.dims):
        if dim.key not in keys:
            keys.add(dim.key)
            problems.append(dim.problem(spec.dims))
    for s in signature:
        if s.dtype is None or not is_plain_dtype(s.dtype):
            problems.append(f"input {s.name!r} has type {s.dtype}, which generate cannot draw")
        elif problem := _range_problem(s.name, s.dtype, spec.ranges.get(s.name)):
            problems.append(problem)
    if not problems:
        shapes = {s.name: _fixed_shape(s, spec.dims) for s in signature}
        problem = _size_problem(shapes, {s.name: _drawable(s) for s in signature}, spec.count + _edges(spec))
        problems += [problem] if problem else []
    return problems


def spec_problems(spec: GenerateSpec) -> list[str]:
    """``generate_problems`` of ``spec`` against its model's signature (read here); an unreadable model is one."""
    try:
        signature = model_signature(spec.model)
    except MonitorError as exc:
        return [str(exc)]
    return generate_problems(spec, signature)


def _edges(spec: GenerateSpec) -> int:
    return len(EDGE_CASES) if spec.edge_cases else 0


def _size_problem(shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, np.dtype[Any]], samples: int) -> str:
    """Why a set of these shapes would not fit in memory (or on disk), before allocating; empty when it fits."""
    per_sample = 0
    for name, shape in shapes.items():
        size = math.prod(shape) * dtypes[name].itemsize
        if size > MAX_TENSOR_BYTES:
            return (
                f"input {name!r} of shape {shape} ({dtypes[name].name}) would take"
                f" {_gib(size)}; one generated tensor may take at most {_gib(MAX_TENSOR_BYTES)} (check generate.dims)"
            )
        per_sample += size
    if per_sample * samples > MAX_SET_BYTES:
        return (
            f"{samples} sample(s) of {_gib(per_sample)} would take {_gib(per_sample * samples)};"
            f" a generated set may take at most {_gib(MAX_SET_BYTES)} (lower generate.count or generate.dims)"
        )
    return ""


def _gib(size: int) -> str:
    return f"{size / 2**30:.3g} GiB"


def _fixed_shape(spec: InputSpec, dims: Mapping[str, int]) -> tuple[int, ...]:
    """The input's shape with every dynamic axis sized from ``dims`` (``unsized_dims`` found none missing)."""
    shape = []
    for axis, dim in enumerate(spec.shape):
        by_axis = dims.get(f"{spec.name}:{axis}")
        shape.append(by_axis if by_axis is not None else dim if isinstance(dim, int) else dims[dim])
    return tuple(shape)


def _drawable(spec: InputSpec) -> np.dtype[Any]:
    if spec.dtype is None:
        raise AssertionError(f"input {spec.name!r}: generate_problems lets no undrawable type through")
    return spec.dtype


def _range_problem(name: str, dtype: np.dtype[Any], declared: tuple[float, float] | None) -> str:
    if dtype.kind not in "iu" or declared is None:
        return ""
    low, high = declared
    info = np.iinfo(dtype)
    if low < info.min or high > info.max or low != int(low) or high != int(high):
        return (
            f"range [{low}, {high}] for input {name!r} must be whole numbers within"
            f" {dtype.name} [{info.min}, {info.max}]"
        )
    return ""


def _range(dtype: np.dtype[Any], declared: tuple[float, float] | None) -> tuple[float, float]:
    if dtype.kind == "b":
        return (0.0, 1.0)
    if dtype.kind in "iu":
        return declared if declared is not None else DEFAULT_INT_RANGE
    return declared if declared is not None else DEFAULT_FLOAT_RANGE


def _draw(rng: np.random.Generator, dtype: np.dtype[Any], shape: tuple[int, ...], span: tuple[float, float]) -> Any:
    low, high = span
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(int(low), int(high), size=shape, endpoint=True).astype(dtype)
    if dtype.kind == "c":
        return (rng.uniform(low, high, shape) + 1j * rng.uniform(low, high, shape)).astype(dtype)
    return rng.uniform(low, high, shape).astype(dtype)


def _edge(case: str, dtype: np.dtype[Any], shape: tuple[int, ...], span: tuple[float, float]) -> Any:
    low, high = span
    if case == "zeros":
        return np.zeros(shape, dtype)
    if case == "high":
        return np.full(shape, high).astype(dtype)
    if case == "low" or dtype.kind not in "fc":
        return np.full(shape, low).astype(dtype)
    info = np.finfo(dtype)
    magnitude = min(LARGE_MAGNITUDE, float(info.max)) if case == "large" else float(info.smallest_normal) / 100
    signs = np.where(np.arange(int(np.prod(shape))) % 2 == 0, 1.0, -1.0).reshape(shape)
    return (signs * magnitude).astype(dtype)
