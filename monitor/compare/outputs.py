"""Compare a model's outputs with their baseline: the metrics and the tolerance rule.

Pure numpy over lists of arrays (one array per benchmark sample), or fed one sample at a time
through ``accumulate.py``; nothing here runs a model.

The tolerance rule (written down once, here; ``tests/test_compare.py`` holds its table)
-------------------------------------------------------------------------------------
``a`` is the actual value, ``b`` the baseline, both cast up to float64 first.

* A **float** element *mismatches* when ``|a-b| > atol + rtol*|b|``. Non-finite values follow
  the *position rule*: a NaN where the baseline has a NaN at the same position, or an Inf where
  the baseline has the same-signed Inf, is agreement; any other NaN/Inf on either side is a
  mismatch (counted in ``nan_mismatch_count`` / ``inf_mismatch_count``).
* An **integer or bool** element mismatches when ``a != b`` (exact, atol/rtol unused);
  other non-float dtypes (strings, objects) likewise by equality; unicode arrays of different
  widths are one dtype (a longer string is a mismatch of its element, not ``dtype_changed``).
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

Cost: one chunked pass of ``chunk_elements`` elements over the flattened samples, on one thread
with fixed float64 buffers; memory is O(chunk) plus the p99 candidates (up to 2% of the
elements, in float64). The pass is fed one sample at a
time (``accumulate.OutputAccumulator``; a check drops each sample after its feed), and the
lists API here is a thin wrapper over it, so both give the same stats to the bit.
``monitor/compare/stream.py`` holds the pass and why its results do not depend on how the data is
split into samples; ``bench/bench_compare.py`` measures it. Sums of
squares are float64 dots over chunks; values past ~1e154 overflow those sums (cosine/SNR become
NaN) - outputs that large are out of scope.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from monitor.compare.accumulate import Comparison, OutputAccumulator, missing
from monitor.compare.stream import DEFAULT_CHUNK_ELEMENTS
from monitor.results import AppliedTolerance, OutputStats

__all__ = [
    "DEFAULT_CHUNK_ELEMENTS",
    "Comparison",
    "OutputAccumulator",
    "compare_output",
    "compare_outputs",
    "repeat_spread",
]


def compare_outputs(
    actual: Mapping[str, Sequence[np.ndarray]],
    expected: Mapping[str, Sequence[np.ndarray]],
    tolerances: Mapping[str, AppliedTolerance],
) -> tuple[OutputStats, ...]:
    """Stats for every output that has a baseline, in baseline order.

    An output in ``expected`` but absent from ``actual`` is an error (``missing_output``); an
    output in ``actual`` with no baseline is ignored: there is nothing to compare it with.
    ``tolerances`` must hold every baseline output name (the caller merges defaults). A check
    feeds a ``Comparison`` one sample at a time instead; the results are the same.
    """
    missing_tol = [name for name in expected if name not in tolerances]
    if missing_tol:
        raise ValueError(f"no tolerance for outputs {missing_tol}; tolerances cover {sorted(tolerances)}")
    results = []
    for name, baseline in expected.items():
        if name not in actual:
            first = np.asarray(baseline[0]) if len(baseline) else None
            results.append(missing(name, tolerances[name], list(actual), first))
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
    """Judge one output (one array per sample) against its baseline; never raises on bad data.

    A thin wrapper over ``OutputAccumulator``, fed the samples in order.
    """
    elements = sum(np.asarray(b).size for b in expected)
    accumulator = OutputAccumulator(
        name,
        tolerance,
        samples=len(expected),
        elements=elements,
        chunk_elements=chunk_elements,
    )
    pairs = list(zip(actual, expected, strict=False))
    if len(actual) != len(expected):
        pairs = pairs[:1]  # the result is an error: the first sample only names the observed dtype
    for a, b in pairs:
        accumulator.feed(a, b)
    return accumulator.finish(len(actual))


def repeat_spread(runs: Sequence[np.ndarray]) -> float:
    """Max ``|run_i - run_0|`` over repeats of one sample, in float64.

    NaN at the same position in both runs (and the same-signed Inf) counts as equal; a NaN or
    Inf that moved, or a changed shape, is ``inf``. 0.0 for fewer than two runs.
    """
    if len(runs) < 2:
        return 0.0
    if np.asarray(runs[0]).dtype.kind not in "fiub":  # strings: equal or not, no distance
        return 0.0 if all(np.array_equal(run, runs[0]) for run in runs[1:]) else math.inf
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
