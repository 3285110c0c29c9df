"""The tolerance rule applied: from measured metrics and sample layouts to reasons and verdicts.

The rule itself is written down once, in the docstring of ``monitor/compare/outputs.py``; this
module is its code, shared by the per-sample accumulator (``accumulate.py``) and the list API.
Layout checks run per sample, so a check that drops each sample after comparing it still
reports the first sample whose dtype or shape moved.
"""

from __future__ import annotations

import numpy as np

from monitor.results import AppliedTolerance, OutputMetrics, OutputStats, Reason, Verdict


def is_float(dtype: np.dtype[np.generic]) -> bool:
    """float16, float32 or float64: the dtypes the tolerance rule and the chunked pass measure."""
    return dtype.kind == "f" and dtype.itemsize in (2, 4, 8)


def float_dtype_drift(name: str, observed: np.dtype[np.generic], baseline: np.dtype[np.generic]) -> Reason | None:
    """The ``dtype_changed`` reason of a float output that became another float dtype; None if unchanged."""
    if observed == baseline:
        return None
    detail = f"dtype {observed}, baseline {baseline}: compared in float64, a failure whatever the values"
    return Reason("dtype_changed", detail, output=name)


def _text(dtype: np.dtype[np.generic]) -> bool:
    return dtype.kind == "U"


def sample_count_problem(name: str, n_actual: int, n_expected: int) -> Reason | None:
    if n_actual == n_expected:
        return None
    return Reason("shape_changed", f"{n_actual} samples, baseline has {n_expected}", output=name)


def layout_problem(
    name: str, index: int, a: np.ndarray, b: np.ndarray, first: tuple[np.dtype[np.generic], np.dtype[np.generic]]
) -> Reason | None:
    """Why sample ``index`` cannot be compared (``first``: sample 0's dtype pair), or None.

    Unicode text of any width is one dtype: a longer string in this run is a mismatch of that
    element (compared by value), not a changed dtype.
    """
    if _text(a.dtype) and _text(b.dtype) and _text(first[0]) and _text(first[1]):
        pass
    elif a.dtype != b.dtype and not (is_float(a.dtype) and is_float(b.dtype)):
        return Reason("dtype_changed", f"sample {index}: dtype {a.dtype}, baseline {b.dtype}", output=name)
    elif (a.dtype, b.dtype) != first:  # one dtype pair for every sample
        detail = f"sample {index}: dtype {a.dtype}, baseline {b.dtype}; sample 0: {first[0]}, {first[1]}"
        return Reason("dtype_changed", detail, output=name)
    if a.shape != b.shape:
        return Reason("shape_changed", f"sample {index}: shape {a.shape}, baseline {b.shape}", output=name)
    return None


def error_stats(
    name: str, tolerance: AppliedTolerance, reason: Reason, dtype: np.dtype[np.generic], shape: tuple[int, ...]
) -> OutputStats:
    """An output that could not be measured: metrics stay at their unmeasured defaults."""
    return OutputStats(
        name=name,
        verdict=Verdict.ERROR,
        metrics=OutputMetrics(bitwise_equal=False),
        tolerance=tolerance,
        reasons=(reason,),
        dtype=str(dtype),
        shape=shape,
    )


def judge(
    name: str, m: OutputMetrics, tol: AppliedTolerance, finite_mismatches: int, *, exact: bool
) -> tuple[Reason, ...]:
    """The numeric reasons of one measured output, in the rule's order."""
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
