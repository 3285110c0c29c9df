"""Comparing one sample at a time gives the list API's stats to the bit, for any split and thread count."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.compare.accumulate import Comparison, OutputAccumulator
from monitor.compare.outputs import compare_output, compare_outputs
from monitor.results import AppliedTolerance, OutputStats

RNG = np.random.default_rng(7)
TOL = AppliedTolerance(atol=1e-3, rtol=1e-2, cosine_min=0.99, snr_min_db=30.0, max_mismatch_ratio=0.1, topk_k=3)


def _noisy(shape: tuple[int, ...], scale: float, dtype: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    b = RNG.standard_normal(shape).astype(dtype)
    return (b + RNG.standard_normal(shape).astype(dtype) * dtype(scale)).astype(dtype), b


def _nonfinite() -> tuple[np.ndarray, np.ndarray]:
    a, b = _noisy((3, 50), 1e-3)
    a[0, :5], b[0, :3] = np.nan, np.nan
    a[1, 7], b[1, 7], a[2, 9] = np.inf, np.inf, -np.inf
    return a, b


def _shrinking() -> list[tuple[np.ndarray, np.ndarray]]:
    """Errors that shrink along the stream: the case where a guessed p99 floor proved too high."""
    return [_noisy((5000,), 10.0**-k) for k in range(1, 7)]


CASES = {
    "NaN and Inf": [_nonfinite() for _ in range(3)],
    "fp16": [_noisy((4, 33), 1e-2, np.float16) for _ in range(4)],
    "int": [(RNG.integers(0, 5, (7, 9)), RNG.integers(0, 5, (7, 9))) for _ in range(3)],
    "0-d": [(np.array(1.5 + i), np.array(1.5)) for i in range(3)],
    "empty": [(np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32)) for _ in range(2)],
    "many small samples": [_noisy((2, 5), 1e-2) for _ in range(300)],
    "big samples crossing chunks": [_noisy((3, 1000), 1e-3) for _ in range(5)],
    "errors shrinking along the stream": _shrinking(),
    "fp16 output, fp32 baseline": [(a.astype(np.float16), b) for a, b in (_noisy((4, 40), 1e-3) for _ in range(3))],
    "strings": [(np.array(["a", "b", "c"]), np.array(["a", "x", "c"])) for _ in range(2)],
}


def _same(left: OutputStats, right: OutputStats) -> None:
    l_dict, r_dict = left.to_dict(), right.to_dict()
    for key in l_dict["metrics"]:  # NaN != NaN: compare floats by their bits
        lv, rv = l_dict["metrics"][key], r_dict["metrics"][key]
        if isinstance(lv, float) and math.isnan(lv):
            assert isinstance(rv, float) and math.isnan(rv), key
            l_dict["metrics"][key] = r_dict["metrics"][key] = "nan"
    assert l_dict == r_dict


@pytest.mark.parametrize("case", list(CASES))
def test_feeding_one_sample_at_a_time_is_bit_identical_to_the_list_api(case: str) -> None:
    pairs = CASES[case]
    chunk = 256  # small, so samples cross chunks and small ones are packed across feeds
    expected = compare_output("y", [a for a, _ in pairs], [b for _, b in pairs], TOL, chunk_elements=chunk)
    accumulator = OutputAccumulator(
        "y", TOL, samples=len(pairs), elements=sum(b.size for _, b in pairs), chunk_elements=chunk
    )
    for a, b in pairs:
        accumulator.feed(a.copy(), b.copy())  # copies: nothing may depend on the caller keeping them
    _same(accumulator.finish(), expected)


def test_the_p99_stays_exact_when_errors_shrink_along_the_stream() -> None:
    pairs = _shrinking()
    stats = compare_output("y", [a for a, _ in pairs], [b for _, b in pairs], TOL, chunk_elements=512)
    errors = np.sort(np.concatenate([np.abs(a.astype(np.float64) - b) for a, b in pairs]))
    assert stats.metrics.p99_abs_error == errors[math.ceil(0.99 * errors.size) - 1]


def test_a_layout_problem_in_a_later_sample_is_reported_by_its_index() -> None:
    accumulator = OutputAccumulator("y", TOL, samples=3, elements=12)
    accumulator.feed(np.zeros(4), np.zeros(4))
    accumulator.feed(np.zeros(5), np.zeros(4))
    accumulator.feed(np.zeros(4), np.zeros(4))
    stats = accumulator.finish()
    assert [r.code for r in stats.reasons] == ["shape_changed"]
    assert "sample 1" in stats.reasons[0].detail


def test_a_comparison_matches_compare_outputs_and_names_a_missing_output() -> None:
    samples = [{"a": _noisy((6,), 1e-2)[0], "b": np.arange(3)} for _ in range(4)]
    baseline = [{"a": s["a"] + np.float32(1e-4), "b": np.arange(3), "gone": np.ones(2)} for s in samples]
    tolerances = {"a": TOL, "b": TOL, "gone": TOL}
    comparison = Comparison(
        ["a", "b", "gone"], ["a", "b"], tolerances, samples=4, elements={"a": 24, "b": 12, "gone": 8}
    )
    for produced, expected in zip(samples, baseline, strict=True):
        comparison.feed(produced, expected)
    listed = compare_outputs(
        {name: [s[name] for s in samples] for name in ("a", "b")},
        {name: [s[name] for s in baseline] for name in ("a", "b", "gone")},
        tolerances,
    )
    streamed = comparison.finish()
    for left, right in zip(streamed, listed, strict=True):
        _same(left, right)
    assert streamed[2].reasons[0].code == "missing_output"


def test_a_sample_count_mismatch_is_a_shape_change() -> None:
    accumulator = OutputAccumulator("y", TOL, samples=2, elements=4)
    accumulator.feed(np.zeros(2), np.zeros(2))
    accumulator.feed(np.zeros(2), np.zeros(2))
    assert [r.code for r in accumulator.finish(actual_samples=3).reasons] == ["shape_changed"]
