"""The input check: what PyTorch consumed against what the benchmark set feeds ONNX Runtime.

A preprocessing mistake outside the graph (BGR vs RGB, a wrong mean/std, ``/255`` without the
mean, NHWC vs NCHW, float64 vs float32) makes every layer differ from the first one on, and a
layer-by-layer comparison then blames the first Conv. Comparing the two *inputs* first names the
real cause. ``describe`` explains a difference as the simplest transform that reproduces it:

1. a **layout change**: an axis permutation of the benchmark array whose shape is PyTorch's
   (``NHWC`` vs ``NCHW`` for 4-d tensors);
2. a **channel permutation** along the channel axis (axis 1 of a 4-d tensor, else the last):
   ``[2, 1, 0]`` is BGR vs RGB;
3. a **per-channel affine transform** ``torch = scale * benchset + shift``, fitted per channel by
   least squares and accepted when it reproduces PyTorch's values to float32 rounding; named when it
   is a plain ``/255`` (or ``x255``), otherwise reported as the mean/std it amounts to;
4. a **dtype change** (values compared after casting).

Whatever no such transform explains is reported with its largest difference. Pure numpy.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

# Two floats agree when |a-b| <= ATOL + RTOL*|b|: float32 rounding of a preprocessing pipeline.
ATOL = 1e-5
RTOL = 1e-4
MAX_PERMUTED_CHANNELS = 4  # every permutation up to 4 channels (24); beyond, only the reversal


@dataclass(frozen=True)
class InputDifference:
    """One input whose PyTorch value differs from the benchmark set's, described."""

    name: str
    sample: int
    kinds: tuple[str, ...]  # layout | channel_permutation | affine | dtype | values
    description: str

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "sample": self.sample, "kinds": list(self.kinds), "description": self.description}


def describe(name: str, sample: int, benchset: np.ndarray, consumed: np.ndarray) -> InputDifference | None:
    """None when PyTorch consumed the benchmark set's input; else what the difference looks like."""
    ours, theirs = np.asarray(benchset), np.asarray(consumed)
    kinds: list[str] = []
    parts: list[str] = []
    if ours.dtype != theirs.dtype:
        kinds.append("dtype")
        parts.append(f"dtype: PyTorch consumed {theirs.dtype}, the benchmark set feeds {ours.dtype}")
    if not _numeric(ours) or not _numeric(theirs):
        if ours.shape == theirs.shape and np.array_equal(ours, theirs):
            return _result(name, sample, kinds, parts)
        return InputDifference(name, sample, ("values",), f"input {name!r}: PyTorch consumed other values")
    a, b = ours.astype(np.float64), theirs.astype(np.float64)
    axis = _channel_axis(a)  # in the benchmark set's (the ONNX model's) layout
    if a.shape != b.shape:
        axes = _layout(a, b, axis)
        if axes is None:
            parts.append(f"shape: PyTorch consumed {list(theirs.shape)}, the benchmark set feeds {list(ours.shape)}")
            return _result(name, sample, [*kinds, "shape"], parts)
        kinds.append("layout")
        parts.append(_layout_text(axes, ours.shape, theirs.shape))
        a = np.transpose(a, axes)
        axis = axes.index(axis) if a.ndim else axis
    if _close(a, b):
        return _result(name, sample, kinds, parts)
    permutation = _permutation(a, b, axis)
    if permutation is not None:
        kinds.append("channel_permutation")
        parts.append(_permutation_text(permutation, axis))
        a = np.take(a, permutation, axis=axis)
        if _close(a, b):
            return _result(name, sample, kinds, parts)
    fit = _affine(a, b, axis)
    if fit is None and permutation is None:
        # An affine transform after a channel swap: try the swaps again, now up to scale and shift.
        for candidate in _permutations(b.shape[axis] if b.ndim else 0):
            fit = _affine(np.take(a, candidate, axis=axis), b, axis)
            if fit is not None:
                kinds.append("channel_permutation")
                parts.append(_permutation_text(candidate, axis))
                break
    if fit is not None:
        kinds.append("affine")
        parts.append(_affine_text(*fit, axis))
        return _result(name, sample, kinds, parts)
    worst = float(np.max(np.abs(a - b))) if a.size else 0.0
    parts.append(f"values differ (max |diff| {worst:.3g}) in a way no layout, channel order or scale/shift explains")
    return _result(name, sample, [*kinds, "values"], parts)


def _result(name: str, sample: int, kinds: list[str], parts: list[str]) -> InputDifference | None:
    if not kinds:
        return None
    return InputDifference(name, sample, tuple(kinds), f"input {name!r} (sample {sample}): " + "; ".join(parts))


def _numeric(array: np.ndarray) -> bool:
    return array.dtype.kind in "fiub"


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, atol=ATOL, rtol=RTOL, equal_nan=True))


def _layout(a: np.ndarray, b: np.ndarray, channel_axis: int) -> tuple[int, ...] | None:
    """The axis permutation of ``a`` that gives ``b``'s shape and values (up to scale and channel order)."""
    if a.ndim != b.ndim or a.ndim > 5 or sorted(a.shape) != sorted(b.shape):
        return None
    fitting = [p for p in itertools.permutations(range(a.ndim)) if tuple(a.shape[i] for i in p) == b.shape]
    # Prefer the permutation under which the values agree; else the first that fits the shape.
    for axes in fitting:
        moved = np.transpose(a, axes)
        axis = axes.index(channel_axis)
        if _close(moved, b) or _permutation(moved, b, axis) is not None or _affine(moved, b, axis) is not None:
            return axes
    return fitting[0] if fitting else None


def _layout_text(axes: tuple[int, ...], ours: tuple[int, ...], theirs: tuple[int, ...]) -> str:
    if len(axes) == 4 and axes == (0, 2, 3, 1):
        return f"layout: PyTorch consumed NHWC {list(theirs)}, the benchmark set feeds NCHW {list(ours)}"
    if len(axes) == 4 and axes == (0, 3, 1, 2):
        return f"layout: PyTorch consumed NCHW {list(theirs)}, the benchmark set feeds NHWC {list(ours)}"
    return (
        f"layout: PyTorch consumed the benchmark set's axes in the order {list(axes)} ({list(ours)} -> {list(theirs)})"
    )


def _channel_axis(array: np.ndarray) -> int:
    """Axis 1 of an image-like tensor (N, C, ...); the last axis otherwise (features); 0 for a scalar."""
    return 1 if array.ndim >= 4 else max(array.ndim - 1, 0)


def _permutations(channels: int) -> list[list[int]]:
    if channels < 2:
        return []
    identity = list(range(channels))
    if channels <= MAX_PERMUTED_CHANNELS:
        return [list(p) for p in itertools.permutations(identity) if list(p) != identity]
    return [identity[::-1]]


def _permutation(a: np.ndarray, b: np.ndarray, axis: int) -> list[int] | None:
    for candidate in _permutations(b.shape[axis] if b.ndim else 0):
        if _close(np.take(a, candidate, axis=axis), b):
            return candidate
    return None


def _permutation_text(permutation: list[int], axis: int) -> str:
    bgr = " (BGR vs RGB)" if permutation == [2, 1, 0] else ""
    return f"channel order: PyTorch consumed the benchmark set's channels {permutation} (axis {axis}){bgr}"


def _affine(a: np.ndarray, b: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-channel (scale, shift) with ``b = scale * a + shift`` to float32 rounding, or None."""
    if a.shape != b.shape or a.ndim == 0 or a.size == 0:
        return None
    x = np.moveaxis(a, axis, 0).reshape(a.shape[axis], -1)
    y = np.moveaxis(b, axis, 0).reshape(b.shape[axis], -1)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        return None
    scales, shifts = [], []
    for xc, yc in zip(x, y, strict=True):
        spread = float(np.std(xc))
        if spread == 0.0:  # a constant channel fits any scale: take 1 and the shift
            scale, shift = 1.0, float(np.mean(yc - xc))
        else:
            scale, shift = (float(v) for v in np.polyfit(xc, yc, 1))
        if not np.allclose(scale * xc + shift, yc, atol=ATOL * max(1.0, float(np.max(np.abs(yc)))), rtol=RTOL):
            return None
        scales.append(scale)
        shifts.append(shift)
    return np.array(scales), np.array(shifts)


def _affine_text(scale: np.ndarray, shift: np.ndarray, axis: int) -> str:
    def near(values: np.ndarray, target: float) -> bool:
        return bool(np.allclose(values, target, rtol=1e-3, atol=1e-6))

    if near(shift, 0.0) and near(scale, 1 / 255):
        return "scale: PyTorch consumed the benchmark set's values /255 (0-1 against 0-255), and no mean/std"
    if near(shift, 0.0) and near(scale, 255.0):
        return "scale: PyTorch consumed the benchmark set's values x255 (0-255 against 0-1)"
    if near(scale, 1.0):
        return f"shift: PyTorch = benchset + {_values(shift)} along axis {axis} (a different mean, the same std)"
    # torch = (x - mean) / std  <=>  scale = 1/std, shift = -mean/std, if the benchmark set is raw.
    return (
        f"scale and shift: PyTorch = benchset * {_values(scale)} + {_values(shift)} along axis {axis}"
        " (a different mean/std normalization on one side)"
    )


def _values(values: np.ndarray, most: int = 8) -> str:
    """One number when every channel has it, else the list (the first ``most``, then the count)."""
    if np.allclose(values, values[0], rtol=1e-4, atol=1e-7):
        return f"{values[0]:.4g}"
    shown = ", ".join(f"{v:.4g}" for v in values[:most])
    return f"[{shown}]" if values.size <= most else f"[{shown}, ... ({values.size} channels)]"
