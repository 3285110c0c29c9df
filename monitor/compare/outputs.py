"""Compare a model's outputs with their baseline: the metrics and the tolerance rule.

Pure numpy over lists of arrays (one array per benchmark sample); nothing here runs a model.

The tolerance rule (written down once, here; ``tests/test_compare.py`` holds its table)
-------------------------------------------------------------------------------------
``a`` is the actual value, ``b`` the baseline, both cast up to float64 first.

* A **float** element *mismatches* when ``|a-b| > atol + rtol*|b|``. Non-finite values follow
  the *position rule*: a NaN where the baseline has a NaN at the same position, or an Inf where
  the baseline has the same-signed Inf, is agreement; any other NaN/Inf on either side is a
  mismatch (counted in ``nan_mismatch_count`` / ``inf_mismatch_count``).
* An **integer or bool** element mismatches when ``a != b`` (exact, atol/rtol unused);
  other non-float dtypes (strings, objects) likewise by equality.
* A float output **FAILS** when any of these holds (each adds one ``Reason``):
  ``nan_mismatch`` / ``inf_mismatch`` (any position-rule violation), ``atol_rtol`` (the share of
  finite elements breaking the element rule exceeds ``max_mismatch_ratio``), ``cosine``
  (cosine similarity < ``cosine_min``), ``snr`` (SNR dB < ``snr_min_db``), ``topk`` (top-k
  agreement < ``topk_min_agreement``). An exact output FAILS with ``exact_mismatch`` when
  ``mismatch_ratio > max_mismatch_ratio``, or with ``topk``. Thresholds left ``None`` are off.
* A float output whose dtype changed to another float dtype (float16, float32, float64; e.g. an
  fp32 baseline and an fp16 output after a conversion with ``keep_io_types=False``) is compared
  in float64 by the rules above, and **FAILS** with ``dtype_changed`` (naming both dtypes) beside
  whatever numeric reasons the comparison finds: the dtype change is itself a drift, so it fails
  even when every value is within tolerance. ``bitwise_equal`` is then false. (numpy has no
  bfloat16; onnxmon does not represent it.)
* Any other dtype change (int <-> float, int32 <-> int64, bool, strings, or a dtype pair that
  differs between samples), a changed shape (or sample count), or an output with a baseline that
  the model did not produce, is verdict **error** (``dtype_changed`` / ``shape_changed`` /
  ``missing_output``): nothing could be measured. An extra output with no baseline is ignored.

Why distribution metrics sit beside the element-wise rule: the element rule looks at each number
alone, with a slack proportional to it. A saturated softmax squashes a changed weight into
differences of 1e-4 on values near 0 and 1; every element stays inside ``atol=1e-3`` yet the
whole vector has moved coherently. Cosine similarity, SNR and top-k agreement judge the
output as a vector and catch that (``test_saturated_softmax_passes_atol_but_fails_snr``).

Metric definitions (over all samples of one output; error = a - b)
------------------------------------------------------------------
* max/mean/RMS/p99 abs error, max rel error, cosine, SNR and max ULP are taken over the
  positions where **both** sides are finite; non-finite positions are judged by the position
  rule only. ``mismatch_count`` counts every disagreeing element (finite rule + position rule);
  ``mismatch_ratio`` divides it by ``element_count``. ``nan_count`` / ``inf_count`` count the
  actual output's NaN / Inf.
* Relative error is ``|a-b| / max(|b|, floor)`` with ``floor = max(atol, float64 tiny)``: a
  reference nearer zero than atol is measured against atol, so a 1e-30 baseline cannot blow
  the relative error up to 1e+20 for a harmless absolute difference.
* SNR dB is ``10*log10(sum b^2 / sum (a-b)^2)``: +inf when equal, -inf for an all-zero
  baseline that changed. Cosine is 1.0 when both vectors are zero, 0.0 when only one is.
* p99 is the exact nearest-rank 99th percentile of the finite absolute errors: the
  ``ceil(0.99 * n)``-th smallest of the ``n`` errors (so 0 when 99% of them are 0), never above
  the max.
* Max ULP distance is counted in the output's *own* float dtype via integer views of the bit
  patterns (+0 and -0 are 0 ULP apart; adjacent floats are 1 apart). None for non-floats. When
  the float dtype changed it is counted in the *coarser* of the two: both sides are rounded to
  it first (an fp16 output against an fp32 baseline: fp16 ULPs, the baseline rounded to fp16).
* Top-k agreement (when ``topk_k`` is set): the share of rows along the last axis whose top-k
  index *sets* match. Ties are broken by ``argpartition``, so identical rows always agree.
  None for 0-d outputs or when not asked.

Cost: one chunked pass of ``chunk_elements`` elements over the flattened samples, on
``workers`` threads, with fixed float64 buffers per thread; memory is O(chunk) plus the p99
candidates (up to 2% of the elements, in float64, per worker). ``monitor/compare/stream.py`` holds that
accumulator and why its results do not depend on the thread count; ``bench/bench_compare.py``
measures it. Sums of squares are float64 dots over chunks; values past ~1e154 overflow those
sums (cosine/SNR become NaN) - outputs that large are out of scope.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from monitor.compare.stream import DEFAULT_CHUNK_ELEMENTS, DEFAULT_WORKERS, Pair, stream_metrics
from monitor.results import AppliedTolerance, OutputMetrics, OutputStats, Reason, Verdict

__all__ = ["DEFAULT_CHUNK_ELEMENTS", "DEFAULT_WORKERS", "compare_output", "compare_outputs", "repeat_spread"]

Array = npt.NDArray[np.generic]


def compare_outputs(
    actual: Mapping[str, Sequence[np.ndarray]],
    expected: Mapping[str, Sequence[np.ndarray]],
    tolerances: Mapping[str, AppliedTolerance],
) -> tuple[OutputStats, ...]:
    """Stats for every output that has a baseline, in baseline order.

    An output in ``expected`` but absent from ``actual`` is an error (``missing_output``); an
    output in ``actual`` with no baseline is ignored: there is nothing to compare it with.
    ``tolerances`` must hold every baseline output name (the caller merges defaults).
    """
    missing_tol = [name for name in expected if name not in tolerances]
    if missing_tol:
        raise ValueError(f"no tolerance for outputs {missing_tol}; tolerances cover {sorted(tolerances)}")
    results = []
    for name, baseline in expected.items():
        if name not in actual:
            detail = f"output {name!r} has a baseline but the model did not produce it; produced: {sorted(actual)}"
            first = np.asarray(baseline[0]) if len(baseline) else np.zeros(0)
            results.append(_error(name, tolerances[name], Reason("missing_output", detail, output=name), first))
            continue
        results.append(compare_output(name, actual[name], baseline, tolerances[name]))
    return tuple(results)


def compare_output(
    name: str,
    actual: Sequence[np.ndarray],
    expected: Sequence[np.ndarray],
    tolerance: AppliedTolerance,
    *,
    chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
    workers: int = DEFAULT_WORKERS,
) -> OutputStats:
    """Judge one output (one array per sample) against its baseline; never raises on bad data.

    ``workers`` threads share the chunks; the metrics are the same, to the bit, for any count.
    """
    if min(chunk_elements, workers) < 1 or (tolerance.topk_k is not None and tolerance.topk_k < 1):
        detail = f"{chunk_elements}, {workers} and {tolerance.topk_k}"
        raise ValueError(f"chunk_elements, workers and topk_k must be >= 1, got {detail}")
    pairs = [(np.asarray(a), np.asarray(b)) for a, b in zip(actual, expected, strict=False)]
    problem = _layout_problem(name, len(actual), len(expected), pairs)
    if problem is not None:
        return _error(name, tolerance, problem, pairs[0][0] if pairs else np.zeros(0))
    dtype = pairs[0][1].dtype if pairs else np.dtype(np.float64)
    observed = pairs[0][0].dtype if pairs else dtype
    drift = _float_dtype_drift(name, observed, dtype)
    if drift is not None:  # two float dtypes: both sides in float64, ULPs in the coarser dtype
        coarse = min(observed, dtype, key=lambda d: d.itemsize)
        wide = [(a.astype(np.float64), b.astype(np.float64)) for a, b in pairs]
        metrics, finite_mismatches = stream_metrics(
            wide, tolerance, chunk_elements, exact=False, workers=workers, ulp_dtype=coarse
        )
        metrics = _replace(metrics, bitwise_equal=False)
    elif _is_float(dtype):
        metrics, finite_mismatches = stream_metrics(pairs, tolerance, chunk_elements, exact=False, workers=workers)
    elif dtype.kind in "iub":
        metrics, finite_mismatches = stream_metrics(pairs, tolerance, chunk_elements, exact=True, workers=workers)
    else:  # strings, objects, complex, long double: equality only
        metrics, finite_mismatches = _equality_only(pairs), 0
    if tolerance.topk_k is not None:
        agreement = _topk_agreement(pairs, tolerance.topk_k, chunk_elements)
        metrics = _replace(metrics, topk_agreement=agreement)
    reasons = _judge(name, metrics, tolerance, finite_mismatches, exact=dtype.kind != "f")
    if drift is not None:
        reasons = (drift, *reasons)
    shape = tuple(pairs[0][1].shape) if pairs else ()
    return OutputStats(
        name=name,
        verdict=Verdict.FAIL if reasons else Verdict.PASS,
        metrics=metrics,
        tolerance=tolerance,
        reasons=reasons,
        dtype=str(observed),
        shape=shape,
    )


def repeat_spread(runs: Sequence[np.ndarray]) -> float:
    """Max ``|run_i - run_0|`` over repeats of one sample, in float64.

    NaN at the same position in both runs (and the same-signed Inf) counts as equal; a NaN or
    Inf that moved, or a changed shape, is ``inf``. 0.0 for fewer than two runs.
    """
    if len(runs) < 2:
        return 0.0
    first = np.asarray(runs[0]).astype(np.float64, copy=False).ravel()
    spread = 0.0
    for run in runs[1:]:
        other = np.asarray(run)
        if other.shape != np.shape(runs[0]):
            return math.inf
        values = other.astype(np.float64, copy=False).ravel()
        with np.errstate(invalid="ignore"):
            diff = np.abs(values - first)
        same = (values == first) | (np.isnan(values) & np.isnan(first))
        diff[same] = 0.0  # inf - inf and nan - nan produce NaN where the runs agree
        if np.isnan(diff).any():
            return math.inf
        if diff.size:
            spread = max(spread, float(diff.max()))
    return spread


# --- validation and judgement -------------------------------------------------------------


def _is_float(dtype: np.dtype[np.generic]) -> bool:
    """float16, float32 or float64: the dtypes the tolerance rule and the chunked pass measure."""
    return dtype.kind == "f" and dtype.itemsize in (2, 4, 8)


def _float_dtype_drift(name: str, observed: np.dtype[np.generic], baseline: np.dtype[np.generic]) -> Reason | None:
    """The ``dtype_changed`` reason of a float output that changed float dtype; None if unchanged."""
    if observed == baseline:
        return None
    detail = f"dtype {observed}, baseline {baseline}: compared in float64, a failure whatever the values"
    return Reason("dtype_changed", detail, output=name)


def _layout_problem(name: str, n_actual: int, n_expected: int, pairs: list[Pair]) -> Reason | None:
    if n_actual != n_expected:
        detail = f"{n_actual} samples, baseline has {n_expected}"
        return Reason("shape_changed", detail, output=name)
    for index, (a, b) in enumerate(pairs):
        first = pairs[0]
        floats = _is_float(a.dtype) and _is_float(b.dtype)
        if a.dtype != b.dtype and not floats:
            return Reason("dtype_changed", f"sample {index}: dtype {a.dtype}, baseline {b.dtype}", output=name)
        if (a.dtype, b.dtype) != (first[0].dtype, first[1].dtype):  # one dtype pair for every sample
            detail = (
                f"sample {index}: dtype {a.dtype}, baseline {b.dtype}; sample 0: {first[0].dtype}, {first[1].dtype}"
            )
            return Reason("dtype_changed", detail, output=name)
        if a.shape != b.shape:
            return Reason("shape_changed", f"sample {index}: shape {a.shape}, baseline {b.shape}", output=name)
    return None


def _error(name: str, tolerance: AppliedTolerance, reason: Reason, observed: Array) -> OutputStats:
    """An output that could not be measured: metrics stay at their unmeasured defaults."""
    return OutputStats(
        name=name,
        verdict=Verdict.ERROR,
        metrics=OutputMetrics(bitwise_equal=False),
        tolerance=tolerance,
        reasons=(reason,),
        dtype=str(observed.dtype),
        shape=tuple(observed.shape),
    )


def _judge(
    name: str, m: OutputMetrics, tol: AppliedTolerance, finite_mismatches: int, *, exact: bool
) -> tuple[Reason, ...]:
    reasons: list[Reason] = []
    if exact:
        if m.mismatch_ratio > tol.max_mismatch_ratio:
            detail = f"{m.mismatch_count} of {m.element_count} elements differ (max ratio {tol.max_mismatch_ratio})"
            reasons.append(Reason("exact_mismatch", detail, output=name))
    else:
        if m.nan_mismatch_count:
            reasons.append(Reason("nan_mismatch", f"{m.nan_mismatch_count} NaN positions differ", output=name))
        if m.inf_mismatch_count:
            reasons.append(Reason("inf_mismatch", f"{m.inf_mismatch_count} Inf positions differ", output=name))
        ratio = finite_mismatches / m.element_count if m.element_count else 0.0
        if ratio > tol.max_mismatch_ratio:
            detail = (
                f"{finite_mismatches} of {m.element_count} elements ({ratio:.3g}) outside |a-b| <= atol + rtol*|b| "
                f"(atol={tol.atol:g}, rtol={tol.rtol:g}, max ratio {tol.max_mismatch_ratio:g}); "
                f"max abs error {m.max_abs_error:.3g}, max rel error {m.max_rel_error:.3g}"
            )
            reasons.append(Reason("atol_rtol", detail, output=name))
        if tol.cosine_min is not None and not m.cosine_similarity >= tol.cosine_min:
            detail = f"cosine similarity {m.cosine_similarity:.9f} < {tol.cosine_min}"
            reasons.append(Reason("cosine", detail, output=name))
        if tol.snr_min_db is not None and not m.snr_db >= tol.snr_min_db:
            reasons.append(Reason("snr", f"SNR {m.snr_db:.2f} dB < {tol.snr_min_db} dB", output=name))
    minimum = tol.topk_min_agreement
    if minimum is not None and m.topk_agreement is not None and m.topk_agreement < minimum:
        detail = f"top-{tol.topk_k} agreement {m.topk_agreement:.4f} < {minimum}"
        reasons.append(Reason("topk", detail, output=name))
    return tuple(reasons)


def _replace(metrics: OutputMetrics, **changes: object) -> OutputMetrics:
    import dataclasses

    return dataclasses.replace(metrics, **changes)  # type: ignore[arg-type]


def _equality_only(pairs: list[Pair]) -> OutputMetrics:
    count = sum(a.size for a, _ in pairs)
    differ = sum(int(np.count_nonzero(a != b)) for a, b in pairs)
    return OutputMetrics(
        element_count=count,
        mismatch_count=differ,
        mismatch_ratio=differ / count if count else 0.0,
        bitwise_equal=differ == 0,
        error_ratio=math.inf if differ else 0.0,
    )


def _topk_agreement(pairs: list[Pair], k: int, chunk: int) -> float | None:
    """Share of last-axis rows whose top-k index sets match; None when there are no rows."""
    rows = agree = 0
    for a, b in pairs:
        if a.ndim == 0 or a.shape[-1] == 0 or a.dtype.kind not in "fiub":
            continue
        width = a.shape[-1]
        rows_a, rows_b = a.reshape(-1, width), b.reshape(-1, width)
        step = max(1, chunk // width)
        for start in range(0, rows_a.shape[0], step):
            top_a = _topk_sets(rows_a[start : start + step], k)
            top_b = _topk_sets(rows_b[start : start + step], k)
            agree += int(np.count_nonzero((top_a == top_b).all(axis=1)))
            rows += top_a.shape[0]
    return agree / rows if rows else None


def _topk_sets(rows: Array, k: int) -> npt.NDArray[np.intp]:
    """Sorted indices of each row's k largest values (NaN never ranks high)."""
    width = rows.shape[-1]
    negated = -rows.astype(np.float64)
    if k >= width:
        return np.broadcast_to(np.arange(width), negated.shape)
    return np.sort(np.argpartition(negated, k - 1, axis=-1)[:, :k], axis=-1)
