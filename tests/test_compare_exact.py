"""The chunked pass agrees, to the bit, with the metrics written plainly over the whole output.

Each maximum, count and ULP distance of ``OutputMetrics`` is held against plain numpy over the
whole concatenated output (so no skipping rule of ``compare/chunk.py`` can change a maximum), and
the sums of ``|d|``, ``d²`` and ``b²`` against a plain-Python loop written from the docstring of
``formulas.py``; floats are compared by their bit pattern (``-0.0`` is not ``0.0``; NaN is NaN). A
table of the hard cases and hypothesis' arrays feed it.
"""

from __future__ import annotations

import itertools
import math
import os
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from monitor.compare.accumulate import OutputAccumulator
from monitor.results import AppliedTolerance, OutputStats

TOL = AppliedTolerance(atol=1e-5, rtol=1e-3)
EXAMPLES = int(os.environ.get("ONNXMON_FUZZ_EXAMPLES", "0"))
TINY = float(np.finfo(np.float64).tiny)


def _bits(value: Any) -> Any:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else struct.pack("<d", value)
    return value


def _measure(actual: list[np.ndarray], expected: list[np.ndarray], tol: AppliedTolerance, **kw: Any) -> OutputStats:
    elements = sum(np.asarray(b).size for b in expected)
    accumulator = OutputAccumulator("y", tol, samples=len(expected), elements=elements, **kw)
    for a, b in zip(actual, expected, strict=True):
        accumulator.feed(a, b)
    return accumulator.finish()


def _plain(actual: list[np.ndarray], expected: list[np.ndarray], tol: AppliedTolerance, chunk: int) -> dict[str, Any]:
    """The metrics of ``outputs.py``'s docstring, written over the whole output at once."""
    raw_a = np.concatenate([np.ravel(x) for x in actual])
    raw_b = np.concatenate([np.ravel(x) for x in expected])
    a, b = raw_a.astype(np.float64), raw_b.astype(np.float64)
    nan_a, nan_b, inf_a, inf_b = np.isnan(a), np.isnan(b), np.isinf(a), np.isinf(b)
    finite = ~(nan_a | nan_b | inf_a | inf_b)
    same = a == b
    nonfinite_mismatch = int(np.count_nonzero(~finite & ~same & ~(nan_a & nan_b)))
    a, b = np.where(finite, a, 0.0), np.where(finite, b, 0.0)
    view = np.dtype(f"i{raw_a.dtype.itemsize}")
    int_a = np.where(finite, raw_a.view(view), 0).astype(np.int64)
    int_b = np.where(finite, raw_b.view(view), 0).astype(np.int64)
    magnitude = (1 << (8 * raw_a.dtype.itemsize - 1)) - 1
    across = (int_a & magnitude).astype(np.uint64) + (int_b & magnitude).astype(np.uint64)  # |a| + |b| in ULPs
    ulp = np.where((int_a ^ int_b) >= 0, np.abs(int_a - int_b).astype(np.uint64), across)
    with np.errstate(all="ignore"):
        d = a - b
        err = np.abs(d)
        limit = np.abs(b) * tol.rtol + tol.atol
        ratio = np.fmax.reduce(err / limit) if err.size else 0.0
        rel = err / np.maximum(np.abs(b), max(tol.atol, TINY))
    finite_mismatch = int(np.count_nonzero(err > limit))
    mismatches = finite_mismatch + nonfinite_mismatch
    count = int(np.count_nonzero(finite))
    ss_err, sum_abs = _documented_sum(d * d, chunk), _documented_sum(err, chunk)
    return {
        "max_abs_error": float(err.max(initial=0.0)),
        "max_rel_error": float(rel.max(initial=0.0)),
        "error_ratio": math.inf if nonfinite_mismatch else max(0.0, float(ratio)),
        "mismatch_count": mismatches,
        "max_ulp": int(ulp.max(initial=0)),
        "nan_count": int(np.count_nonzero(nan_a)),
        "nan_mismatch_count": int(np.count_nonzero(nan_a != nan_b)),
        "inf_count": int(np.count_nonzero(inf_a)),
        "inf_mismatch_count": int(np.count_nonzero((inf_a | inf_b) & ~same)),
        "bitwise_equal": bool(np.array_equal(raw_a.view(view), raw_b.view(view))),
        "mean_abs_error": sum_abs / count if count else 0.0,
        "rms_error": math.sqrt(ss_err / count) if count else 0.0,
    }


def assert_same_to_the_bit(
    actual: list[np.ndarray], expected: list[np.ndarray], tol: AppliedTolerance = TOL, **kw: Any
) -> OutputStats:
    stats = _measure(actual, expected, tol, **kw)
    elements = sum(np.asarray(b).size for b in expected)
    chunk = min(kw.get("chunk_elements", 1 << 16), max(elements, 1))
    plain = _plain(actual, expected, tol, chunk)
    got = {key: getattr(stats.metrics, key) for key in plain}
    if len(expected) > 1:  # samples are packed into chunks as they come: the sums' chunks are not these
        for key in ("mean_abs_error", "rms_error"):
            assert got.pop(key) == pytest.approx(plain.pop(key), rel=1e-9, abs=1e-300, nan_ok=True), key
    differ = {k: (got[k], plain[k]) for k in plain if _bits(got[k]) != _bits(plain[k])}
    assert not differ, f"the chunked pass and the plain metrics differ in (chunked, plain): {differ}"
    return stats


def _pair(dtype: Any, n: int, scale: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(n).astype(dtype)
    a = (b.astype(np.float64) + rng.standard_normal(n) * scale).astype(dtype)
    return a, b


def _special(dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    a, b = _pair(dtype, 5000, 1e-3, seed=3)
    a[10], b[10] = np.nan, np.nan  # agreement
    a[11] = np.nan  # NaN only in the actual
    b[12] = np.nan  # NaN only in the baseline
    a[13], b[13] = np.inf, np.inf  # agreement
    a[14], b[14] = np.inf, -np.inf  # sign of Inf changed
    a[15] = -np.inf
    b[16] = np.inf
    a[17], b[17] = np.nan, np.inf
    a[4000:4010] = np.nan  # a whole run of them in another block
    return a, b


def _denormals(dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    tiny = np.finfo(dtype).smallest_subnormal
    steps = np.arange(1, 3001, dtype=np.float64)
    b = (steps * float(tiny)).astype(dtype)
    a = b.copy()
    a[::3] = (steps[::3] * float(tiny) * 2).astype(dtype)
    a[1::7] = -a[1::7]  # sign flips across zero: ULPs counted through +-0
    return a, b


def _huge(dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    top = float(np.finfo(dtype).max)
    b = np.array([top, -top, top / 2, 1.0, -top, 0.0] * 50, dtype=dtype)
    a = np.array([top, top, -top / 2, 1.0, -top / 3, -0.0] * 50, dtype=dtype)  # differences overflow
    return a, b


def _cases() -> list[Any]:
    cases: list[Any] = []
    for dtype in (np.float16, np.float32, np.float64):
        name = np.dtype(dtype).name
        a, b = _pair(dtype, 70_001, 1e-3)
        cases.append(pytest.param([a], [b], TOL, {}, id=f"{name}-differ"))
        cases.append(pytest.param([b.copy()], [b], TOL, {}, id=f"{name}-all-equal"))
        cases.append(pytest.param([-b], [b], TOL, {}, id=f"{name}-sign-flips"))
        cases.append(pytest.param([b], [b * 0], TOL, {}, id=f"{name}-baseline-zero"))
        cases.append(pytest.param(*([x] for x in _special(dtype)), TOL, {}, id=f"{name}-nan-inf"))
        cases.append(pytest.param(*([x] for x in _denormals(dtype)), TOL, {}, id=f"{name}-denormals"))
        cases.append(
            pytest.param(
                *([x] for x in _denormals(dtype)), AppliedTolerance(0.0, 0.0), {}, id=f"{name}-denormals-zero-tol"
            )
        )
        cases.append(pytest.param(*([x] for x in _huge(dtype)), TOL, {}, id=f"{name}-huge"))
        cases.append(pytest.param([np.zeros(0, dtype)], [np.zeros(0, dtype)], TOL, {}, id=f"{name}-empty"))
        zero_d = (np.array(1.5, dtype), np.array(1.25, dtype))
        cases.append(pytest.param([zero_d[0]], [zero_d[1]], TOL, {}, id=f"{name}-0d"))
        cases.append(pytest.param([np.array(-0.0, dtype)], [np.array(0.0, dtype)], TOL, {}, id=f"{name}-signed-zero"))
    a, b = _pair(np.float32, 50_000, 1e-2, seed=5)
    splits = [a[:1], a[1:30_000], a[30_000:]], [b[:1], b[1:30_000], b[30_000:]]
    cases.append(pytest.param(*splits, TOL, {"chunk_elements": 4096}, id="samples-chunks"))
    cases.append(pytest.param([a[::-3]], [b[::-3]], TOL, {}, id="reversed-strided-views"))
    grid = a.reshape(250, 200)
    cases.append(pytest.param([grid.T], [b.reshape(250, 200).T], TOL, {"chunk_elements": 999}, id="transposed"))
    inside, base = _pair(np.float32, 200_000, 1e-6, seed=7)
    inside[150_001] = base[150_001] + np.float32(9e-6)  # the worst ratio, inside atol, in a late chunk
    cases.append(pytest.param([inside], [base], TOL, {}, id="inside-atol-worst-late"))
    cases.append(pytest.param([a], [b], AppliedTolerance(0.0, 0.0), {}, id="zero-tolerance"))
    cases.append(pytest.param([a], [b], AppliedTolerance(1e-310, 0.0), {}, id="subnormal-atol"))
    cases.append(pytest.param([a], [b], AppliedTolerance(0.0, 1e-3), {}, id="rtol-only"))
    return cases


@pytest.mark.parametrize(("actual", "expected", "tol", "options"), _cases())
def test_the_chunked_pass_equals_the_plain_metrics_to_the_bit(
    actual: list[np.ndarray], expected: list[np.ndarray], tol: AppliedTolerance, options: dict[str, Any]
) -> None:
    assert_same_to_the_bit(actual, expected, tol, **options)


def test_the_special_values_case_counts_what_plain_numpy_counts() -> None:
    """The table's NaN/Inf case measures something: its counts, from plain numpy, are in the result."""
    a, b = _special(np.float32)
    stats = assert_same_to_the_bit([a], [b])
    nan_a, nan_b, inf_a = np.isnan(a), np.isnan(b), np.isinf(a)
    assert stats.metrics.nan_count == int(nan_a.sum())
    assert stats.metrics.inf_count == int(inf_a.sum())
    assert stats.metrics.nan_mismatch_count == int((nan_a != nan_b).sum())
    finite = np.isfinite(a) & np.isfinite(b)
    diff = np.abs(a[finite].astype(np.float64) - b[finite])
    assert stats.metrics.max_abs_error == float(diff.max())


def _documented_sum(values: np.ndarray, chunk: int, lanes: int = 256) -> float:
    """The order of ``formulas.py`` written as plain Python loops: lanes, halving, chunks in order."""
    total = 0.0
    for start in range(0, values.size, chunk):
        lane = [0.0] * lanes
        for i, value in enumerate(values[start : start + chunk].tolist()):
            lane[i % lanes] = lane[i % lanes] + value
        width = lanes // 2
        while width >= 1:
            lane = [lane[j] + lane[j + width] for j in range(width)]
            width //= 2
        total = total + lane[0]
    return total


def test_sums_follow_the_documented_order() -> None:
    a, b = _pair(np.float32, 20_000, 1e-2, seed=11)
    stats = _measure([a], [b], TOL, chunk_elements=3000)
    d = a.astype(np.float64) - b.astype(np.float64)
    assert stats.metrics.rms_error == math.sqrt(_documented_sum(d * d, 3000) / d.size)
    assert stats.metrics.mean_abs_error == _documented_sum(np.abs(d), 3000) / d.size
    ss_b, ss_err = _documented_sum(b.astype(np.float64) ** 2, 3000), _documented_sum(d * d, 3000)
    assert stats.metrics.snr_db == 10.0 * math.log10(ss_b / ss_err)


def _floats(dtype: Any) -> st.SearchStrategy[np.ndarray]:
    elements = st.floats(width=np.dtype(dtype).itemsize * 8, allow_nan=True, allow_infinity=True)
    return hnp.arrays(dtype, st.integers(0, 600), elements=elements)


@st.composite
def _comparisons(draw: st.DrawFn) -> tuple[list[np.ndarray], list[np.ndarray], AppliedTolerance, dict[str, Any]]:
    dtype = draw(st.sampled_from([np.float16, np.float32, np.float64]))
    b = draw(_floats(dtype))
    noise = draw(hnp.arrays(dtype, b.shape, elements=st.floats(width=np.dtype(dtype).itemsize * 8)))
    mode = draw(st.sampled_from(["noise", "equal", "independent"]))
    with np.errstate(all="ignore"):
        a = b + noise * dtype(draw(st.sampled_from([1e-6, 1e-3, 1.0]))) if mode == "noise" else b.copy()
    if mode == "independent":
        a = draw(hnp.arrays(dtype, b.shape, elements=st.floats(width=np.dtype(dtype).itemsize * 8)))
    cut = sorted(draw(st.lists(st.integers(0, b.size), max_size=3)))
    edges = [0, *cut, b.size]
    actual = [a[lo:hi] for lo, hi in itertools.pairwise(edges)]
    expected = [b[lo:hi] for lo, hi in itertools.pairwise(edges)]
    tol = AppliedTolerance(
        atol=draw(st.sampled_from([0.0, 1e-310, 1e-5, 1.0])), rtol=draw(st.sampled_from([0.0, 1e-3, 0.5]))
    )
    options = {"chunk_elements": draw(st.sampled_from([1, 7, 256, 300, 65536]))}
    return actual, expected, tol, options


@settings(
    max_examples=EXAMPLES or max(200, settings.default.max_examples if settings.default.max_examples > 1000 else 0),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(_comparisons())
def test_any_float_comparison_equals_the_plain_metrics_to_the_bit(
    case: tuple[list[np.ndarray], list[np.ndarray], AppliedTolerance, dict[str, Any]],
) -> None:
    actual, expected, tol, options = case
    assert_same_to_the_bit(actual, expected, tol, **options)


def test_sums_past_the_float64_range_fail_the_output_instead_of_raising_or_passing() -> None:
    """An error sum that overflows used to raise from ``log10(0)``; a NaN cosine was clamped to 1.0 (a pass)."""
    tol = AppliedTolerance(atol=1e-5, rtol=1e-3, cosine_min=0.99, snr_min_db=20.0)
    error_overflows = _measure([np.array([1e200, -1e200, 0.25])], [np.array([1.0, 0.5, 0.25])], tol)
    assert error_overflows.metrics.snr_db == -math.inf
    assert "snr" in {reason.code for reason in error_overflows.reasons}
    dot_is_nan = _measure([np.array([1e200, 1e200])], [np.array([1e200, -1e200])], tol)
    assert math.isnan(dot_is_nan.metrics.cosine_similarity)
    assert "cosine" in {reason.code for reason in dot_is_nan.reasons}
