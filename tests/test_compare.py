"""The comparison engine: the tolerance rule, every metric, NaN/Inf positions, chunking."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.compare.outputs import compare_output, compare_outputs, repeat_spread
from monitor.results import AppliedTolerance, OutputStats, Verdict

NAN, INF = math.nan, math.inf


def tol(atol: float = 1e-3, rtol: float = 0.0, **kwargs: object) -> AppliedTolerance:
    return AppliedTolerance(atol=atol, rtol=rtol, **kwargs)  # type: ignore[arg-type]


def compare(actual: object, expected: object, tolerance: AppliedTolerance | None = None, **kw: int) -> OutputStats:
    return compare_output("y", [np.asarray(actual)], [np.asarray(expected)], tolerance or tol(), **kw)


def codes(stats: OutputStats) -> set[str]:
    return {r.code for r in stats.reasons}


# --- the tolerance rule, as a table --------------------------------------------------------

RULE_TABLE = [
    # id, actual, expected, tolerance, verdict, reason codes
    ("equal", [1.0, 2.0], [1.0, 2.0], tol(0.0), Verdict.PASS, set()),
    ("inside atol", [1.0009], [1.0], tol(1e-3), Verdict.PASS, set()),
    ("outside atol", [1.0011], [1.0], tol(1e-3), Verdict.FAIL, {"atol_rtol"}),
    ("rtol widens the band", [101.0], [100.0], tol(1e-3, 1e-2), Verdict.PASS, set()),
    ("rtol scales with |b|, not |a|", [-0.5], [-1.0], tol(0.0, 0.5), Verdict.PASS, set()),
    ("just past atol + rtol*|b|", [102.0], [100.0], tol(0.5, 0.01), Verdict.FAIL, {"atol_rtol"}),
    ("mismatch ratio at the limit", [0, 0, 0, 9.0], [0, 0, 0, 0.0], tol(max_mismatch_ratio=0.25), Verdict.PASS, set()),
    (
        "mismatch ratio over",
        [0, 0, 9.0, 9.0],
        [0, 0, 0, 0.0],
        tol(max_mismatch_ratio=0.25),
        Verdict.FAIL,
        {"atol_rtol"},
    ),
    ("cosine under minimum", [1.0, 0.0], [0.0, 1.0], tol(10.0, cosine_min=0.5), Verdict.FAIL, {"cosine"}),
    ("snr under minimum", [1.1, 2.0], [1.0, 2.0], tol(1.0, snr_min_db=40.0), Verdict.FAIL, {"snr"}),
    ("snr over minimum", [1.001, 2.0], [1.0, 2.0], tol(1.0, snr_min_db=40.0), Verdict.PASS, set()),
    ("same-position NaN agrees", [NAN, 1.0], [NAN, 1.0], tol(), Verdict.PASS, set()),
    ("new NaN fails", [NAN, 1.0], [0.5, 1.0], tol(10.0, max_mismatch_ratio=1.0), Verdict.FAIL, {"nan_mismatch"}),
    ("lost NaN fails", [0.5, 1.0], [NAN, 1.0], tol(10.0, max_mismatch_ratio=1.0), Verdict.FAIL, {"nan_mismatch"}),
    ("same-sign Inf agrees", [INF, -INF], [INF, -INF], tol(), Verdict.PASS, set()),
    ("Inf sign flip fails", [-INF], [INF], tol(max_mismatch_ratio=1.0), Verdict.FAIL, {"inf_mismatch"}),
    ("Inf vs finite fails", [INF, 1.0], [1e30, 1.0], tol(max_mismatch_ratio=1.0), Verdict.FAIL, {"inf_mismatch"}),
]


@pytest.mark.parametrize(
    ("actual", "expected", "tolerance", "verdict", "reason_codes"),
    [row[1:] for row in RULE_TABLE],
    ids=[row[0] for row in RULE_TABLE],
)
def test_tolerance_rule_table(
    actual: list[float], expected: list[float], tolerance: AppliedTolerance, verdict: Verdict, reason_codes: set[str]
) -> None:
    stats = compare(np.array(actual), np.array(expected), tolerance)
    assert stats.verdict is verdict
    assert codes(stats) == reason_codes


def test_softmax_drift_inside_atol_is_caught_by_snr_cosine_and_topk() -> None:
    # Over 1000 classes every probability is ~1e-3, the size of atol itself: a changed weight
    # moves each one by ~5%, well inside |a-b| <= atol, yet the distribution clearly moved.
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((8, 1000)) * 0.5
    expected, actual = _softmax(logits), _softmax(logits + 0.05 * rng.standard_normal(logits.shape))
    assert compare(actual, expected, tol(1e-3))  # element-wise, everything is inside atol
    strict = tol(1e-3, snr_min_db=40.0, cosine_min=0.999, topk_k=5, topk_min_agreement=0.9)
    stats = compare(actual, expected, strict)
    assert stats.verdict is Verdict.FAIL
    assert codes(stats) == {"snr", "cosine", "topk"}
    assert stats.metrics.mismatch_count == 0


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    probabilities: np.ndarray = (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)
    return probabilities


# --- each metric against a hand-computed value ---------------------------------------------


def test_error_metrics_match_hand_computed_values() -> None:
    expected = np.array([1.0, -2.0, 4.0, 0.0])
    actual = np.array([1.5, -2.0, 3.0, 0.0])  # errors 0.5, 0, -1, 0
    m = compare(actual, expected, tol(0.6)).metrics
    assert m.element_count == 4
    assert m.max_abs_error == 1.0
    assert m.mean_abs_error == pytest.approx(1.5 / 4)
    assert m.rms_error == pytest.approx(math.sqrt(1.25 / 4))
    assert m.max_rel_error == pytest.approx(0.5)  # 0.5/1 beats 1/4
    assert m.snr_db == pytest.approx(10 * math.log10(21.0 / 1.25))
    assert m.cosine_similarity == pytest.approx((1.5 + 4.0 + 12.0) / math.sqrt(1.5**2 + 4 + 9) / math.sqrt(21.0))
    assert (m.mismatch_count, m.mismatch_ratio) == (1, 0.25)
    assert not m.bitwise_equal
    assert m.max_ulp is not None and m.max_ulp > 0


def test_relative_error_uses_atol_as_floor_for_near_zero_references() -> None:
    m = compare([1e-6], [1e-30], tol(1e-3)).metrics
    assert m.max_rel_error == pytest.approx(1e-6 / 1e-3)


@pytest.mark.parametrize(
    ("errors", "p99"),
    [
        ([0.0] * 100, 0.0),
        ([0.0] * 99 + [1.0], 0.0),  # nearest rank 99 of 100 is still 0
        ([0.0] * 98 + [1.0, 2.0], 1.0),
        ([float(e) for e in range(1, 101)], 99.0),
    ],
)
def test_p99_is_the_nearest_rank_value_and_never_above_the_max(errors: list[float], p99: float) -> None:
    m = compare(np.array(errors), np.zeros(len(errors)), tol(1e9)).metrics
    assert p99 <= m.p99_abs_error <= p99 * (1 + 2**-7)
    assert m.p99_abs_error <= m.max_abs_error


def test_equal_outputs_have_perfect_metrics() -> None:
    m = compare(np.arange(6.0).reshape(2, 3), np.arange(6.0).reshape(2, 3)).metrics
    assert (m.max_abs_error, m.p99_abs_error, m.max_ulp, m.cosine_similarity, m.snr_db) == (0, 0, 0, 1.0, math.inf)
    assert m.bitwise_equal


def test_zero_vectors_are_fully_similar_and_a_changed_zero_baseline_has_minus_inf_snr() -> None:
    assert compare([0.0, 0.0], [0.0, 0.0]).metrics.cosine_similarity == 1.0
    m = compare([1.0, 0.0], [0.0, 0.0], tol(10.0)).metrics
    assert (m.cosine_similarity, m.snr_db) == (0.0, -math.inf)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_adjacent_floats_are_one_ulp_apart(dtype: type[np.floating]) -> None:
    b = np.array([1.0, -3.5, 0.0, 1e-3], dtype=dtype)
    a = np.nextafter(b, np.array(np.inf, dtype=dtype))
    assert compare(a, b, tol(1.0)).metrics.max_ulp == 1


@pytest.mark.parametrize(
    ("actual", "expected", "ulp"),
    [
        (np.float32(-0.0), np.float32(0.0), 0),
        (np.float32(1e-45), np.float32(-1e-45), 2),  # smallest subnormals either side of zero
        (np.float32(2.0), np.float32(1.0), 1 << 23),  # one binade of float32 mantissas
    ],
)
def test_ulp_distance_is_counted_in_the_outputs_own_dtype(actual: object, expected: object, ulp: int) -> None:
    assert compare([actual], [expected], tol(10.0)).metrics.max_ulp == ulp


def test_fp16_outputs_are_cast_up_before_subtracting() -> None:
    expected = np.array([0.1, 2048.0], dtype=np.float16)
    actual = np.array([0.2, 2050.0], dtype=np.float16)
    m = compare(actual, expected, tol(10.0)).metrics
    # float16(0.2) - float16(0.1) in float64, and 2 exactly (fp16 arithmetic would round)
    assert m.max_abs_error == 2.0
    assert m.mean_abs_error == pytest.approx((float(actual[0]) - float(expected[0]) + 2.0) / 2, rel=1e-15)
    stats = compare(actual, expected, tol(10.0))
    assert stats.dtype == "float16"


# --- NaN and Inf positions -----------------------------------------------------------------


def test_nan_and_inf_counts_follow_positions() -> None:
    expected = np.array([NAN, INF, 1.0, -INF, 2.0])
    actual = np.array([NAN, -INF, NAN, -INF, 2.0])
    m = compare(actual, expected, tol(max_mismatch_ratio=1.0)).metrics
    assert (m.nan_count, m.nan_mismatch_count) == (2, 1)
    assert (m.inf_count, m.inf_mismatch_count) == (2, 1)
    assert m.mismatch_count == 2
    assert m.max_abs_error == 0.0  # finite errors only: the one finite pair agrees


def test_agreeing_nans_leave_finite_metrics_untouched() -> None:
    m = compare([NAN, 1.0, 2.5], [NAN, 1.0, 2.0], tol(1.0)).metrics
    assert (m.max_abs_error, m.mean_abs_error, m.nan_mismatch_count) == (0.5, 0.25, 0)


# --- layout errors, exact dtypes, bool semantics --------------------------------------------


@pytest.mark.parametrize(
    ("actual", "expected", "code"),
    [
        (np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), "shape_changed"),
        (np.zeros((2, 3), np.float16), np.zeros((3, 2), np.float32), "shape_changed"),
        (np.zeros(3, np.int64), np.zeros(3, np.int32), "dtype_changed"),
        (np.zeros(3, np.float32), np.zeros(3, np.int32), "dtype_changed"),
        (np.zeros(3, np.int64), np.zeros(3, np.float32), "dtype_changed"),
        (np.zeros(3, np.bool_), np.zeros(3, np.float32), "dtype_changed"),
        (np.array(["a"]), np.zeros(1, np.float32), "dtype_changed"),
    ],
)
def test_layout_change_is_an_error_not_an_exception(actual: np.ndarray, expected: np.ndarray, code: str) -> None:
    stats = compare(actual, expected)
    assert stats.verdict is Verdict.ERROR
    assert codes(stats) == {code}
    assert not stats


# A float output that changed float dtype: measured in float64, and a failure whatever the values.
FLOAT_DTYPE_CHANGES = [
    # id, actual, expected, reason codes, max ULP (counted in the coarser dtype)
    (
        "fp16 vs fp32, within atol",
        np.array([1.0, 2.0, 0.1], np.float16),
        np.array([1.0, 2.0, 0.1], np.float32),
        {"dtype_changed"},
        0,  # the fp16 output is the baseline rounded to fp16: 0 fp16 ULPs apart
    ),
    (
        "fp16 vs fp32, far off",
        np.array([1.5, 2.0], np.float16),
        np.array([1.0, 2.0], np.float32),
        {"dtype_changed", "atol_rtol"},
        512,
    ),
    (
        "fp32 vs fp16, equal values",
        np.array([0.5, -3.0], np.float32),
        np.array([0.5, -3.0], np.float16),
        {"dtype_changed"},
        0,
    ),
    (
        "fp64 vs fp32, NaN moved",
        np.array([np.nan, 1.0]),
        np.array([0.0, 1.0], np.float32),
        {"dtype_changed", "nan_mismatch"},
        0,
    ),
]


@pytest.mark.parametrize(
    ("actual", "expected", "code_set", "ulp"),
    [c[1:] for c in FLOAT_DTYPE_CHANGES],
    ids=[c[0] for c in FLOAT_DTYPE_CHANGES],
)
def test_a_float_dtype_change_is_compared_in_float64_and_fails(
    actual: np.ndarray, expected: np.ndarray, code_set: set[str], ulp: int
) -> None:
    stats = compare(actual, expected, tol(1e-3))
    assert stats.verdict is Verdict.FAIL
    assert codes(stats) == code_set
    assert stats.reasons[0].code == "dtype_changed"
    assert str(actual.dtype) in stats.reasons[0].detail and str(expected.dtype) in stats.reasons[0].detail
    assert stats.dtype == str(actual.dtype)
    assert stats.metrics.max_ulp == ulp
    assert not stats.metrics.bitwise_equal
    assert stats.metrics.element_count == actual.size


def test_a_float_dtype_change_measures_the_float64_difference() -> None:
    expected = np.array([1.0, 2.0, 3.0], np.float32)
    actual = expected.astype(np.float16) + np.float16(0.5)
    m = compare(actual, expected, tol(1e-3)).metrics
    assert m.max_abs_error == pytest.approx(0.5)
    assert m.mismatch_count == 3
    assert math.isfinite(m.snr_db) and m.cosine_similarity > 0.9


def test_a_float_dtype_pair_that_changes_between_samples_is_an_error() -> None:
    actual = [np.zeros(2, np.float16), np.zeros(2, np.float32)]
    stats = compare_output("y", actual, [np.zeros(2, np.float32)] * 2, tol())
    assert (stats.verdict, codes(stats)) == (Verdict.ERROR, {"dtype_changed"})


def test_a_changed_sample_count_is_a_shape_change() -> None:
    stats = compare_output("y", [np.zeros(2)], [np.zeros(2), np.zeros(2)], tol())
    assert (stats.verdict, codes(stats)) == (Verdict.ERROR, {"shape_changed"})


@pytest.mark.parametrize(
    ("actual", "expected", "max_ratio", "verdict"),
    [
        (np.array([1, 2, 3]), np.array([1, 2, 3]), 0.0, Verdict.PASS),
        (np.array([1, 2, 4]), np.array([1, 2, 3]), 0.0, Verdict.FAIL),
        (np.array([1, 2, 4]), np.array([1, 2, 3]), 0.5, Verdict.PASS),
        (np.array([2**62 + 1]), np.array([2**62]), 0.0, Verdict.FAIL),  # equal once cast to float64
        (np.array([True, False]), np.array([True, True]), 0.0, Verdict.FAIL),
        (np.array(["cat", "dog"]), np.array(["cat", "dog"]), 0.0, Verdict.PASS),
    ],
)
def test_integer_bool_and_string_outputs_compare_exactly(
    actual: np.ndarray, expected: np.ndarray, max_ratio: float, verdict: Verdict
) -> None:
    stats = compare(actual, expected, tol(1e9, 1e9, max_mismatch_ratio=max_ratio))
    assert stats.verdict is verdict
    assert codes(stats) <= {"exact_mismatch"}
    assert stats.metrics.max_ulp is None


def test_stats_are_truthy_only_when_within_tolerance() -> None:
    assert bool(compare([1.0], [1.0])) is True
    assert bool(compare([2.0], [1.0])) is False


def test_missing_output_is_an_error_and_an_extra_output_is_ignored() -> None:
    expected = {"prob": [np.zeros(3)], "feat": [np.zeros(2)]}
    actual = {"prob": [np.zeros(3)], "debug": [np.ones(9)]}
    stats = compare_outputs(actual, expected, {"prob": tol(), "feat": tol()})
    assert [s.name for s in stats] == ["prob", "feat"]
    assert stats[0].verdict is Verdict.PASS
    assert (stats[1].verdict, codes(stats[1])) == (Verdict.ERROR, {"missing_output"})
    assert "debug" in stats[1].reasons[0].detail


# --- top-k ---------------------------------------------------------------------------------


def test_topk_agreement_compares_index_sets_per_row() -> None:
    expected = np.array([[0.9, 0.5, 0.1, 0.0], [0.1, 0.2, 0.3, 0.4], [1.0, 2.0, 3.0, 4.0]])
    actual = expected.copy()
    actual[0] = [0.5, 0.9, 0.1, 0.0]  # same top-2 set, different order: agrees
    actual[1] = [0.4, 0.2, 0.3, 0.1]  # top-2 {3,2} became {0,2}: disagrees
    stats = compare(actual, expected, tol(10.0, topk_k=2, topk_min_agreement=0.9))
    assert stats.metrics.topk_agreement == pytest.approx(2 / 3)
    assert codes(stats) == {"topk"}


def test_topk_is_not_measured_unless_asked() -> None:
    assert compare([[1.0, 2.0]], [[1.0, 2.0]]).metrics.topk_agreement is None
    assert compare([[1.0, 2.0]], [[1.0, 2.0]], tol(topk_k=5)).metrics.topk_agreement == 1.0


# --- chunking ------------------------------------------------------------------------------


@settings(max_examples=max(60, settings.default.max_examples // 10), deadline=None)
@given(
    shapes=st.lists(st.tuples(st.integers(1, 5), st.integers(1, 40)), min_size=1, max_size=4),
    chunk=st.integers(1, 300),
    dtype=st.sampled_from([np.float16, np.float32, np.float64]),
    seed=st.integers(0, 2**32 - 1),
    with_nan=st.booleans(),
)
def test_chunked_metrics_equal_one_chunk(
    shapes: list[tuple[int, int]], chunk: int, dtype: type[np.floating], seed: int, with_nan: bool
) -> None:
    rng = np.random.default_rng(seed)
    expected = [rng.standard_normal(shape).astype(dtype) for shape in shapes]
    actual = [(e + rng.standard_normal(e.shape) * 1e-2 * (rng.random(e.shape) < 0.5)).astype(dtype) for e in expected]
    if with_nan:
        actual[0].flat[0], expected[-1].flat[-1] = np.nan, np.inf
    tolerance = tol(1e-2, 1e-2, topk_k=2)
    one = compare_output("y", actual, expected, tolerance, chunk_elements=10**6).metrics.to_dict()
    many = compare_output("y", actual, expected, tolerance, chunk_elements=chunk).metrics.to_dict()
    assert one.keys() == many.keys()
    for key, value in one.items():
        if value is None or isinstance(value, bool):
            assert many[key] is value, key
        else:
            assert many[key] == pytest.approx(value, rel=1e-9, abs=1e-300), key


def _nearest_rank_p99(actual: np.ndarray, expected: np.ndarray) -> float:
    errors = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    errors = np.sort(errors[np.isfinite(errors)])
    return float(errors[-(-99 * errors.size // 100) - 1]) if errors.size else 0.0


P99_STREAMS = [
    # id, errors in stream order: each shape tests one way the streamed top-1% can be fooled
    ("random", np.random.default_rng(1).standard_normal(20_000)),
    ("rising", np.linspace(0.0, 1.0, 20_000)),  # every chunk beats the last: the floor keeps rising
    ("falling", np.linspace(1.0, 0.0, 20_000)),  # the first chunk's guess is far too high
    ("ties of a quantized output", np.random.default_rng(2).integers(0, 4, 20_000) * 0.25),
    ("mostly exact", np.where(np.arange(20_000) % 150 == 0, 3.0, 0.0)),
]


@pytest.mark.parametrize("errors", [row[1] for row in P99_STREAMS], ids=[row[0] for row in P99_STREAMS])
@pytest.mark.parametrize("chunk", [64, 1000])
def test_p99_is_the_exact_nearest_rank_value_however_the_errors_arrive(errors: np.ndarray, chunk: int) -> None:
    expected = np.zeros(errors.size)
    expected[::997] = np.nan  # excluded positions count neither in the rank nor as errors
    actual = expected + errors
    m = compare(actual, expected, tol(1e9), chunk_elements=chunk).metrics
    assert m.p99_abs_error == _nearest_rank_p99(actual, expected)


@pytest.mark.slow
@settings(max_examples=max(25, settings.default.max_examples // 20), deadline=None)
@given(
    sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=5),
    chunk=st.integers(1, 700),
    dtype=st.sampled_from([np.float16, np.float32, np.float64, np.int32]),
    seed=st.integers(0, 2**32 - 1),
    with_nan=st.booleans(),
)
def test_the_chunk_size_never_changes_a_maximum_or_the_p99_and_they_are_exact(
    sizes: list[int], chunk: int, dtype: type[np.number], seed: int, with_nan: bool
) -> None:
    rng = np.random.default_rng(seed)
    expected = [(rng.standard_normal(size) * 100).astype(dtype) for size in sizes]
    actual = [(e + rng.standard_normal(e.shape) * (rng.random(e.shape) < 0.3) * 5).astype(dtype) for e in expected]
    if with_nan and np.dtype(dtype).kind == "f":
        actual[0][0], expected[-1][-1] = np.nan, -np.inf
    tolerance = tol(1e-2, 1e-2)
    one = compare_output("y", actual, expected, tolerance, chunk_elements=chunk).metrics
    whole = compare_output("y", actual, expected, tolerance, chunk_elements=100_000).metrics
    for field in ("max_abs_error", "max_rel_error", "p99_abs_error", "max_ulp", "mismatch_count", "error_ratio"):
        assert getattr(one, field) == getattr(whole, field), field
    a, b = np.concatenate(actual).astype(np.float64), np.concatenate(expected).astype(np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    errors = np.abs(a - b)[finite]
    assert one.p99_abs_error == _nearest_rank_p99(a, b)
    assert one.max_abs_error == errors.max(initial=0.0)
    assert one.max_rel_error == (errors / np.maximum(np.abs(b[finite]), tolerance.atol)).max(initial=0.0)


def test_a_zero_chunk_is_refused() -> None:
    with pytest.raises(ValueError, match="chunk_elements"):
        compare([1.0], [1.0], chunk_elements=0)


# --- repeats -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("runs", "spread"),
    [
        ([[1.0, 2.0]], 0.0),
        ([[1.0, NAN, INF], [1.0, NAN, INF]], 0.0),
        ([[1.0, 2.0], [1.0, 2.5], [0.75, 2.0]], 0.5),
        ([[1.0, NAN], [1.0, 2.0]], INF),
        ([[INF], [-INF]], INF),
        ([[1.0, 2.0], [1.0]], INF),
    ],
)
def test_repeat_spread_is_nan_aware(runs: list[list[float]], spread: float) -> None:
    assert repeat_spread([np.array(r) for r in runs]) == spread


@pytest.mark.parametrize(
    ("actual", "expected"),
    [
        (np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32)),
        (np.float64(2.5), np.float64(2.0)),
        (np.arange(12.0).reshape(3, 4).T, np.arange(12.0).reshape(3, 4).T + 0.5),  # not contiguous
    ],
    ids=["empty", "scalar", "transposed"],
)
def test_odd_layouts_are_measured(actual: np.ndarray, expected: np.ndarray) -> None:
    stats = compare(actual, expected, tol(1.0, topk_k=1))
    assert stats.verdict is Verdict.PASS
    assert stats.metrics.element_count == np.size(actual)


def test_read_only_baselines_with_nan_are_never_written() -> None:
    expected = np.array([np.nan, 1.0, 2.0])
    expected.setflags(write=False)
    actual = np.array([np.nan, 1.0, 2.5])
    assert compare(actual, expected, tol(1.0)).metrics.max_abs_error == 0.5
    assert np.isnan(expected[0]) and expected[2] == 2.0
