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
* A changed dtype or shape (or sample count), or an output with a baseline that the model did
  not produce, is verdict **error** (``dtype_changed`` / ``shape_changed`` / ``missing_output``):
  nothing could be measured. An extra output with no baseline is ignored, not compared.

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
* p99 comes from a fixed log-spaced histogram (the float64 bit pattern shifted to keep the
  exponent and 7 mantissa bits, i.e. 128 bins per octave): the reported value is the upper edge
  of the bin holding the nearest-rank 99th percentile, clamped to the max, so it is never
  below the true p99 and at most 2**-7 (0.8%) above it; it is exactly 0 when 99% of the errors
  are 0 (errors under 2**-126, about 1.2e-38, read as 0).
* Max ULP distance is counted in the output's *own* float dtype via integer views of the bit
  patterns (+0 and -0 are 0 ULP apart; adjacent floats are 1 apart). None for non-floats.
* Top-k agreement (when ``topk_k`` is set): the share of rows along the last axis whose top-k
  index *sets* match. Ties are broken by ``argpartition``, so identical rows always agree.
  None for 0-d outputs or when not asked.

Cost: one chunked pass of ``chunk_elements`` elements over the flattened samples (small
samples are packed together), with fixed float64 buffers, so memory is O(chunk) and time near a
few reads of the tensors; bitwise-equal chunks take a fast path (measured in
``bench/bench_compare.py``). Sums of squares use BLAS dots on float64 chunks; values past
~1e154 overflow those sums (cosine/SNR become NaN) - outputs that large are out of scope.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from monitor.results import AppliedTolerance, OutputMetrics, OutputStats, Reason, Verdict

# 64k elements keep the five float64 chunk buffers near L2; bench/bench_compare.py measured it
# ~1.5x faster than 1M-element chunks, and Python overhead per chunk is still small there.
DEFAULT_CHUNK_ELEMENTS = 1 << 16
HISTOGRAM_MANTISSA_BITS = 7  # 2**-7 = 0.8% relative bin width for p99
_HIST_SHIFT = 52 - HISTOGRAM_MANTISSA_BITS
# Errors below float32's smallest normal (2**-126) share bin 0; starting the bins there keeps the
# histogram ~14k bins wide for typical errors instead of ~130k (bincount cost scales with width).
_HIST_BASE_BITS = int(np.array(2.0**-126).view(np.int64))
_TINY = float(np.finfo(np.float64).tiny)

Array = npt.NDArray[np.generic]
F64 = npt.NDArray[np.float64]


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
) -> OutputStats:
    """Judge one output (one array per sample) against its baseline; never raises on bad data."""
    if chunk_elements < 1 or (tolerance.topk_k is not None and tolerance.topk_k < 1):
        raise ValueError(f"chunk_elements and topk_k must be >= 1, got {chunk_elements} and {tolerance.topk_k}")
    pairs = [(np.asarray(a), np.asarray(b)) for a, b in zip(actual, expected, strict=False)]
    problem = _layout_problem(name, len(actual), len(expected), pairs)
    if problem is not None:
        return _error(name, tolerance, problem, pairs[0][0] if pairs else np.zeros(0))
    dtype = pairs[0][1].dtype if pairs else np.dtype(np.float64)
    if dtype.kind == "f" and dtype.itemsize in (2, 4, 8):
        metrics, finite_mismatches = _stream(pairs, tolerance, chunk_elements, exact=False)
    elif dtype.kind in "iub":
        metrics, finite_mismatches = _stream(pairs, tolerance, chunk_elements, exact=True)
    else:  # strings, objects, complex, long double: equality only
        metrics, finite_mismatches = _equality_only(pairs), 0
    if tolerance.topk_k is not None:
        agreement = _topk_agreement(pairs, tolerance.topk_k, chunk_elements)
        metrics = _replace(metrics, topk_agreement=agreement)
    reasons = _judge(name, metrics, tolerance, finite_mismatches, exact=dtype.kind != "f")
    shape = tuple(pairs[0][1].shape) if pairs else ()
    return OutputStats(
        name=name,
        verdict=Verdict.FAIL if reasons else Verdict.PASS,
        metrics=metrics,
        tolerance=tolerance,
        reasons=reasons,
        dtype=str(dtype),
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


def _layout_problem(name: str, n_actual: int, n_expected: int, pairs: list[tuple[Array, Array]]) -> Reason | None:
    if n_actual != n_expected:
        detail = f"{n_actual} samples, baseline has {n_expected}"
        return Reason("shape_changed", detail, output=name)
    for index, (a, b) in enumerate(pairs):
        if a.dtype != b.dtype:
            return Reason("dtype_changed", f"sample {index}: dtype {a.dtype}, baseline {b.dtype}", output=name)
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


# --- the one-pass stream ------------------------------------------------------------------


def _pieces(pairs: list[tuple[Array, Array]], chunk: int) -> Iterator[tuple[Array, Array]]:
    """Flattened (actual, baseline) pieces of at most ``chunk`` elements; small samples are packed.

    Every metric is order-free (sums, maxima, a histogram), so packing changes nothing but the
    number of numpy calls per element.
    """
    pending_a: list[Array] = []
    pending_b: list[Array] = []
    pending = 0
    for a, b in pairs:
        flat_a, flat_b = a.reshape(-1), b.reshape(-1)  # views for contiguous arrays
        for start in range(0, flat_a.size, chunk):
            piece_a, piece_b = flat_a[start : start + chunk], flat_b[start : start + chunk]
            if piece_a.size == chunk:
                yield piece_a, piece_b
                continue
            pending_a.append(piece_a)
            pending_b.append(piece_b)
            pending += piece_a.size
            if pending >= chunk:
                packed_a, packed_b = np.concatenate(pending_a), np.concatenate(pending_b)
                yield packed_a[:chunk], packed_b[:chunk]
                pending_a, pending_b, pending = [packed_a[chunk:]], [packed_b[chunk:]], packed_a.size - chunk
    if pending:
        yield np.concatenate(pending_a), np.concatenate(pending_b)


def _stream(
    pairs: list[tuple[Array, Array]], tol: AppliedTolerance, chunk: int, *, exact: bool
) -> tuple[OutputMetrics, int]:
    total = sum(a.size for a, _ in pairs)
    stream = _Stream(pairs[0][1].dtype, tol, min(chunk, max(total, 1)), exact=exact)
    for piece_a, piece_b in _pieces(pairs, chunk):
        stream.update(piece_a, piece_b)
    return stream.metrics(), stream.finite_mismatch


class _Stream:
    """Running sums, maxima and the p99 histogram over chunks, with fixed float64 buffers."""

    def __init__(self, dtype: np.dtype[np.generic], tol: AppliedTolerance, chunk: int, *, exact: bool) -> None:
        self.exact, self.tol = exact, tol
        self.floor = max(tol.atol, _TINY)
        self.float64_input = dtype == np.float64
        self.int_view = np.dtype(f"i{dtype.itemsize}")
        self.a64, self.b64, self.err, self.abs_b, self.limit = (np.empty(chunk) for _ in range(5))
        # np.maximum/np.dot with array operands take SIMD/BLAS paths that scalar operands miss
        self.floors, self.ones = np.full(chunk, self.floor), np.ones(chunk)
        self.hist_base = np.full(chunk, _HIST_BASE_BITS, np.int64)
        self.bins = np.empty(chunk, np.int64)
        self.mask = np.empty(chunk, np.bool_)
        self.int_diff, self.int_sign = np.empty(chunk, self.int_view), np.empty(chunk, self.int_view)
        self.hist = np.zeros(1, np.int64)
        self.count = self.finite_count = self.excluded = 0
        self.finite_mismatch = self.nonfinite_mismatch = 0
        self.nan_count = self.nan_mismatch = self.inf_count = self.inf_mismatch = 0
        self.sum_abs = self.max_abs = self.max_rel = 0.0
        self.ss_a = self.ss_b = self.ss_err = self.dot_ab = 0.0
        self.max_ulp = 0
        self.bitwise_equal = True

    def update(self, raw_a: Array, raw_b: Array) -> None:
        n = raw_a.size
        self.count += n
        int_a, int_b = raw_a.view(self.int_view), raw_b.view(self.int_view)
        if self.exact:
            differ = int(np.count_nonzero(np.not_equal(int_a, int_b, out=self.mask[:n])))
        else:  # the bit-pattern difference doubles as the equality test and the ULP distance
            int_diff = np.subtract(int_a, int_b, out=self.int_diff[:n])
            differ = int(int_diff.max()) != 0 or int(int_diff.min()) != 0
        if not differ:
            self._equal_chunk(raw_a)
            return
        self.bitwise_equal = False
        a, b = self._as_float64(raw_a, self.a64), self._as_float64(raw_b, self.b64)
        ss_a, ss_b = float(np.dot(a, a)), float(np.dot(b, b))
        if self.exact:
            self.finite_mismatch += differ
            self.finite_count += n
        elif math.isfinite(ss_a) and math.isfinite(ss_b):
            self.finite_count += n
            self._ulp(int_a, int_b, int_diff)
        else:
            raw_a, raw_b, a, b = self._position_rule(raw_a, raw_b, a, b)
            ss_a, ss_b = float(np.dot(a, a)), float(np.dot(b, b))
            int_a, int_b = raw_a.view(self.int_view), raw_b.view(self.int_view)
            self._ulp(int_a, int_b, np.subtract(int_a, int_b, out=self.int_diff[:n]))
        self.ss_a += ss_a
        self.ss_b += ss_b
        self._errors(a, b)

    def _errors(self, a: F64, b: F64) -> None:
        n = a.size
        err = np.subtract(a, b, out=self.err[:n])
        self.ss_err += float(np.dot(err, err))
        self.dot_ab += float(np.dot(a, b))
        np.abs(err, out=err)
        chunk_max = float(err.max())
        if chunk_max == 0.0:
            self.hist[0] += n
            return
        self.max_abs = max(self.max_abs, chunk_max)
        self.sum_abs += float(np.dot(err, self.ones[:n]))
        abs_b = np.abs(b, out=self.abs_b[:n])
        if not self.exact and chunk_max > self.tol.atol:  # else no element can break the rule
            limit = np.multiply(abs_b, self.tol.rtol, out=self.limit[:n])
            limit += self.tol.atol
            self.finite_mismatch += int(np.count_nonzero(np.greater(err, limit, out=self.mask[:n])))
        np.maximum(abs_b, self.floors[:n], out=abs_b)
        self.max_rel = max(self.max_rel, float(np.divide(err, abs_b, out=abs_b).max()))
        bins = np.maximum(err.view(np.int64), self.hist_base[:n], out=self.bins[:n])
        bins -= _HIST_BASE_BITS
        np.right_shift(bins, _HIST_SHIFT, out=bins)
        counts = np.bincount(bins)
        if counts.size > self.hist.size:
            self.hist = np.concatenate([self.hist, np.zeros(counts.size - self.hist.size, np.int64)])
        self.hist[: counts.size] += counts

    def _equal_chunk(self, raw: Array) -> None:
        """Bitwise-equal chunk: errors are exactly zero; only the squares and NaN/Inf remain."""
        n = raw.size
        values = self._as_float64(raw, self.a64)
        squares = float(np.dot(values, values))
        finite = n
        if not self.exact and not math.isfinite(squares):
            nan, inf = int(np.count_nonzero(np.isnan(values))), int(np.count_nonzero(np.isinf(values)))
            self.nan_count, self.inf_count = self.nan_count + nan, self.inf_count + inf
            finite = n - nan - inf
            if nan or inf:
                kept = values[np.isfinite(values)]
                squares = float(np.dot(kept, kept))
        self.finite_count += finite
        self.hist[0] += finite
        self.ss_a, self.ss_b, self.dot_ab = self.ss_a + squares, self.ss_b + squares, self.dot_ab + squares

    def _position_rule(self, raw_a: Array, raw_b: Array, a: F64, b: F64) -> tuple[Array, Array, F64, F64]:
        """Count NaN/Inf (dis)agreements, then zero every position not finite on both sides."""
        nan_a, nan_b, inf_a, inf_b = np.isnan(a), np.isnan(b), np.isinf(a), np.isinf(b)
        same = a == b  # true for equal signed Inf, false for NaN
        both_finite = ~(nan_a | nan_b | inf_a | inf_b)
        self.nan_count += int(np.count_nonzero(nan_a))
        self.inf_count += int(np.count_nonzero(inf_a))
        self.nan_mismatch += int(np.count_nonzero(nan_a != nan_b))
        self.inf_mismatch += int(np.count_nonzero((inf_a | inf_b) & ~same))
        self.nonfinite_mismatch += int(np.count_nonzero(~both_finite & ~same & ~(nan_a & nan_b)))
        finite = int(np.count_nonzero(both_finite))
        self.finite_count += finite
        self.excluded += a.size - finite  # their zeroed errors land in histogram bin 0
        outside = ~both_finite
        raw_a, raw_b, a, b = raw_a.copy(), raw_b.copy(), a.copy(), b.copy()
        for array in (raw_a, raw_b, a, b):
            array[outside] = 0
        return raw_a, raw_b, a, b

    def _ulp(self, int_a: Array, int_b: Array, int_diff: Array) -> None:
        """Max ULP distance in the output's own dtype from the bit-pattern difference."""
        # Same-sign floats are ordered like their bit patterns, so the difference is exact and
        # never overflows; opposite signs are |a| + |b| in ULPs (+0 and -0 are 0 apart).
        if int(np.bitwise_xor(int_a, int_b, out=self.int_sign[: int_a.size]).min()) < 0:
            opposite = np.less(np.bitwise_xor(int_a, int_b), 0)
            magnitude = (1 << (8 * self.int_view.itemsize - 1)) - 1
            across = np.bitwise_and(int_a[opposite], magnitude).astype(np.uint64)
            across += np.bitwise_and(int_b[opposite], magnitude).astype(np.uint64)
            self.max_ulp = max(self.max_ulp, int(across.max()))
            int_diff = np.where(opposite, 0, int_diff)
        self.max_ulp = max(self.max_ulp, int(int_diff.max()), -int(int_diff.min()))

    def _as_float64(self, raw: Array, buffer: F64) -> F64:
        if self.float64_input:
            return raw  # type: ignore[return-value]
        out = buffer[: raw.size]
        np.copyto(out, raw, casting="unsafe")
        return out

    def metrics(self) -> OutputMetrics:
        finite = self.finite_count
        return OutputMetrics(
            element_count=self.count,
            max_abs_error=self.max_abs,
            mean_abs_error=self.sum_abs / finite if finite else 0.0,
            rms_error=math.sqrt(self.ss_err / finite) if finite else 0.0,
            max_rel_error=self.max_rel,
            p99_abs_error=self._p99(),
            cosine_similarity=_cosine(self.dot_ab, self.ss_a, self.ss_b),
            snr_db=_snr_db(self.ss_b, self.ss_err),
            max_ulp=None if self.exact else self.max_ulp,
            mismatch_count=self.finite_mismatch + self.nonfinite_mismatch,
            mismatch_ratio=(self.finite_mismatch + self.nonfinite_mismatch) / self.count if self.count else 0.0,
            nan_count=self.nan_count,
            nan_mismatch_count=self.nan_mismatch,
            inf_count=self.inf_count,
            inf_mismatch_count=self.inf_mismatch,
            bitwise_equal=self.bitwise_equal,
        )

    def _p99(self) -> float:
        hist = self.hist.copy()
        hist[0] -= self.excluded
        total = int(hist.sum())
        if total == 0 or self.max_abs == 0.0:
            return 0.0
        rank = -(-99 * total // 100)  # nearest rank, ceil(0.99 * total)
        index = int(np.searchsorted(np.cumsum(hist), rank))
        if index == 0:
            return 0.0
        upper = float(np.array([((index + 1) << _HIST_SHIFT) + _HIST_BASE_BITS], np.int64).view(np.float64)[0])
        return min(upper, self.max_abs)


def _cosine(dot_ab: float, ss_a: float, ss_b: float) -> float:
    if ss_a == 0.0 and ss_b == 0.0:
        return 1.0
    if ss_a == 0.0 or ss_b == 0.0:
        return 0.0
    return max(-1.0, min(1.0, dot_ab / math.sqrt(ss_a) / math.sqrt(ss_b)))


def _snr_db(ss_b: float, ss_err: float) -> float:
    if ss_err == 0.0:
        return math.inf
    if ss_b == 0.0:
        return -math.inf
    return 10.0 * math.log10(ss_b / ss_err)


def _equality_only(pairs: list[tuple[Array, Array]]) -> OutputMetrics:
    count = sum(a.size for a, _ in pairs)
    differ = sum(int(np.count_nonzero(a != b)) for a, b in pairs)
    return OutputMetrics(
        element_count=count,
        mismatch_count=differ,
        mismatch_ratio=differ / count if count else 0.0,
        bitwise_equal=differ == 0,
    )


def _topk_agreement(pairs: list[tuple[Array, Array]], k: int, chunk: int) -> float | None:
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
