"""``models[].checks.calibration_coverage``: a QDQ model's calibration held against the benchmark set at every run.

After the comparison (whatever its verdict), the check's benchmark set is run once more through the
model with its ``QuantizeLinear`` inputs exposed (``coverage``), and
``details["calibration_coverage"]`` records every quantized tensor: clipped share, codes used,
observed and representable ranges, worst first. A tensor clipping more than ``max_clipped_share`` of
its values is a ``calibration_out_of_range`` reason (verdict ``fail``) naming the tensors: the inputs
left the range the model was calibrated on, which shows before the decisions move. Tensors under
``min_codes_used_share`` are listed as ``under_used`` (never a reason). A model without
``QuantizeLinear`` nodes, a set not materialized yet or a check out of time is a note, never a reason.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from monitor.config.plan import CheckPlan
from monitor.details import Details
from monitor.errors import MonitorError
from monitor.files import benchsets
from monitor.quant.coverage import Coverage, TensorCoverage, coverage
from monitor.results import CheckResult, Reason, Verdict
from monitor.runtime.session import RunTimeout

NAMED = 5  # tensors named in the reason's detail


def with_calibration_coverage(plan: CheckPlan, result: CheckResult, *, clock: Any = time.time) -> CheckResult:
    """``result`` with its calibration coverage when configured; never raises."""
    options = plan.model.checks.calibration_coverage
    if options is None:
        return result
    left = plan.timeout_s - (clock() - result.started_at)
    reasons: tuple[Reason, ...] = ()
    document: dict[str, Any]
    if left <= 0:
        document = {"note": "not run: the check used its whole timeout"}
    else:
        bench = benchsets.replayed(plan.benchsets_dir, plan.benchset.name, result)
        if bench is None:
            document = {"note": f"benchset {plan.benchset.name!r} is not materialized yet"}
        else:
            document, reasons = _measure(plan, bench, left, options.max_clipped_share, options.min_codes_used_share)
    details: Details = {**result.details, "calibration_coverage": document}
    verdict = Verdict.worst([result.verdict, Verdict.FAIL]) if reasons else result.verdict
    attribution = result.attribution if verdict is not Verdict.FAIL or result.attribution else "numeric"
    return dataclasses.replace(
        result,
        verdict=verdict,
        reasons=(*result.reasons, *reasons),
        details=details,
        attribution=attribution,
        finished_at=max(result.finished_at, clock()),
    )


def _measure(
    plan: CheckPlan, bench: benchsets.Benchset, left: float, most_clipped: float, fewest_codes: float | None
) -> tuple[dict[str, Any], tuple[Reason, ...]]:
    where = f"checks.calibration_coverage of {plan.model.path.name}"
    try:
        found = coverage(plan.model.path, bench.iter_samples(), timeout_s=left)
    except RunTimeout as exc:
        return {"note": f"not run: {where}: {exc}"}, ()
    except MonitorError as exc:
        return {"note": f"not run: {where}: {exc}"[:2000]}, ()
    except Exception as exc:  # a bug must not cost the check its result
        return {"note": f"not run: {where}: {type(exc).__name__}: {exc}"[:2000]}, ()
    document = {
        **found.to_dict(),
        "max_clipped_share": most_clipped,
        "min_codes_used_share": fewest_codes,
        "benchset": bench.name,
        "benchset_version": bench.version,
    }
    if not found.tensors:
        document["note"] = "the model has no QuantizeLinear node that could be read: nothing to cover"
        return document, ()
    if fewest_codes is not None:
        document["under_used"] = [t.tensor for t in found.tensors if t.codes_used_share < fewest_codes]
    out = [t for t in found.tensors if t.clipped_share > most_clipped]
    if not out:
        return document, ()
    return document, (Reason("calibration_out_of_range", _detail(found, out, most_clipped)[:2000]),)


def _detail(found: Coverage, out: list[TensorCoverage], most: float) -> str:
    named = "; ".join(
        f"{t.tensor} {t.clipped_share:.1%} (range [{t.range_min:.4g}, {t.range_max:.4g}],"
        f" seen [{t.observed_min:.4g}, {t.observed_max:.4g}])"
        for t in out[:NAMED]
    )
    more = f"; and {len(out) - NAMED} more" if len(out) > NAMED else ""
    return (
        f"{len(out)} of {len(found.tensors)} quantized tensors clip more than {most:.2%} of their values over"
        f" {found.samples} samples: {named}{more}"
    )
