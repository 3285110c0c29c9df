"""Batch invariance: one run of ``batch`` stacked samples against ``batch`` single-sample runs.

Why: a model exported with a batch baked into a Reshape, BatchNorm left on batch statistics, or
an attention mask broadcast over the wrong axis gives each sample a different answer depending
on what else is in the batch, which no comparison with a baseline captured at one batch size can
see. The rule: the benchmark set's first ``batch`` samples (repeated in order when the set is
smaller) are concatenated on axis 0 of every input and run once; each sample is also run alone;
every output of the batched run, split on axis 0 into the samples' sizes, must match the single
runs within the model's own tolerance (``compare_output``, the check's rule). Otherwise the check
fails with ``batch_variant``, naming the output and the numbers, and pointing at the nodes lint
found (``baked_batch``, ``batchnorm_training``) when there are any.

A model whose inputs fix axis 0 cannot take a batch: that is a ``config_error`` (the check is
configured for a model it cannot apply to), said in one sentence with what to change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from monitor.compare import outputs
from monitor.config.plan import CheckPlan
from monitor.errors import MonitorError
from monitor.files import benchsets
from monitor.lint import Hazard
from monitor.results import Reason
from monitor.runtime.session import Deadline, RunTimeout, Session

MAX_STACKED_BYTES = 2**31  # the batched inputs (plus the single ones) are held in memory at once
EXPLAINING = ("baked_batch", "batchnorm_training", "dropout_training", "fixed_dim")


@dataclass(frozen=True)
class BatchInvariance:
    """What the batch-invariance check found: its reasons (none when invariant) and its numbers."""

    reasons: tuple[Reason, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return not self.reasons


def check_batch_invariance(
    plan: CheckPlan,
    bench: benchsets.Benchset,
    *,
    batch: int,
    timeout_s: float | None,
    hazards: Sequence[Hazard] = (),
) -> BatchInvariance:
    """Run the check on ``plan``'s model; never raises (a failure is a reason)."""
    where = f"checks.batch_invariance of {plan.model.path.name}"
    try:
        return _check(plan, bench, batch, timeout_s, hazards, where)
    except RunTimeout as exc:
        return BatchInvariance((Reason("timeout", f"{where}: {exc}"),), {"batch": batch})
    except MonitorError as exc:
        return BatchInvariance((Reason("config_error", f"{where}: {exc}"[:2000]),), {"batch": batch})
    except Exception as exc:  # a bug: still a verdict, never a crash of the check
        detail = f"{where}: {type(exc).__name__}: {exc}"[:2000]
        return BatchInvariance((Reason("internal_error", detail),), {"batch": batch})


def _check(
    plan: CheckPlan,
    bench: benchsets.Benchset,
    batch: int,
    timeout_s: float | None,
    hazards: Sequence[Hazard],
    where: str,
) -> BatchInvariance:
    session = Session(plan.model.path, plan.model.providers, plan.model.session)
    fixed = [
        (s.name, s.shape[0]) for s in session.info.inputs if s.shape and isinstance(s.shape[0], int) and s.shape[0] > 0
    ]
    if fixed:
        shown = ", ".join(f"{name!r} axis 0 = {size}" for name, size in fixed)
        return BatchInvariance(
            (
                Reason(
                    "config_error",
                    f"{where}: not applicable, the model fixes its batch dim ({shown}); export it with a dynamic"
                    " batch axis (dynamic_axes / dynamic_shapes) or remove checks.batch_invariance",
                ),
            ),
            {"batch": batch, "applicable": False, "fixed_inputs": dict(fixed)},
        )
    if len(bench) == 0:
        raise MonitorError(f"benchset {bench.name!r} has no samples")
    indices = [i % len(bench) for i in range(batch)]
    needed = sum(int(np.prod(e.shape)) * np.dtype(e.dtype).itemsize for i in indices for e in bench.samples[i])
    if needed > MAX_STACKED_BYTES:
        raise MonitorError(
            f"a batch of {batch} of these samples takes {needed / 2**30:.3g} GiB of inputs, more than"
            f" {MAX_STACKED_BYTES / 2**30:g} GiB; lower checks.batch_invariance.batch"
        )
    details: dict[str, Any] = {"batch": batch, "applicable": True, "samples": indices, "outputs": {}}
    suspects = [h.to_dict() for h in hazards if h.code in EXPLAINING]
    if suspects:
        details["lint"] = suspects
    hint = _hint(hazards)
    with Deadline(timeout_s) as guard:
        singles = [bench.load_sample(i) for i in indices]
        stacked = _stack(singles, where)
        alone = [
            session.run(feeds, guard=guard, where=f"{where}: sample {i}")
            for i, feeds in zip(indices, singles, strict=True)
        ]
        try:
            together = session.run(stacked, guard=guard, where=f"{where}: batch of {batch}")
        except (RunTimeout, MonitorError):
            raise
        except Exception as exc:  # ONNX Runtime refused the batch: the clearest batch variance there is
            message = " ".join(str(exc).split())[:600]
            return BatchInvariance(
                (Reason("batch_variant", f"the batch-{batch} run failed while single samples run: {message}{hint}"),),
                details,
            )
    sizes = [_leading(feeds) for feeds in singles]
    reasons = []
    for name in session.output_names:
        reason, summary = _compare(name, together[name], [run[name] for run in alone], sizes, plan, batch)
        details["outputs"][name] = summary
        if reason:
            reasons.append(Reason("batch_variant", reason + hint, name))
    return BatchInvariance(tuple(reasons), details)


def _compare(
    name: str, together: np.ndarray, alone: list[np.ndarray], sizes: list[int], plan: CheckPlan, batch: int
) -> tuple[str, dict[str, Any]]:
    """The reason ``name`` is batch-variant ("" when it is not) and its numbers."""
    expected_rows = sum(sizes)
    shapes = {tuple(a.shape) for a in alone}
    if together.ndim == 0 or together.shape[0] != expected_rows or any(a.ndim == 0 for a in alone):
        return (
            f"batch-{batch} output has shape {tuple(together.shape)}, single runs give {sorted(shapes)}: the batch"
            f" is not on axis 0 of this output (expected {expected_rows} rows)",
            {"verdict": "fail", "shape": list(together.shape)},
        )
    parts = np.split(together, np.cumsum(sizes)[:-1], axis=0)
    stats = outputs.compare_output(name, parts, alone, plan.tolerance(name))
    summary = {
        "verdict": stats.verdict.value,
        "max_abs_error": stats.metrics.max_abs_error,
        "mismatch_ratio": stats.metrics.mismatch_ratio,
        "error_ratio": stats.error_ratio,
    }
    if stats:
        return "", summary
    tolerance = stats.tolerance
    return (
        f"batch-{batch} run differs from {batch} single-sample runs: max abs {stats.metrics.max_abs_error:.3g},"
        f" {stats.metrics.mismatch_ratio:.1%} of elements outside atol {tolerance.atol:g} + rtol {tolerance.rtol:g}",
        summary,
    )


def _stack(samples: Sequence[Mapping[str, np.ndarray]], where: str) -> dict[str, np.ndarray]:
    stacked = {}
    for name in samples[0]:
        arrays = [np.asarray(s[name]) for s in samples]
        if any(a.ndim == 0 for a in arrays):
            raise MonitorError(f"{where}: input {name!r} is a scalar, it has no batch axis to stack on")
        try:
            stacked[name] = np.concatenate(arrays, axis=0)
        except ValueError as exc:
            raise MonitorError(f"{where}: samples of input {name!r} cannot be stacked on axis 0: {exc}") from None
    return stacked


def _leading(feeds: Mapping[str, np.ndarray]) -> int:
    first = next(iter(feeds.values()))
    return int(np.asarray(first).shape[0])


def _hint(hazards: Sequence[Hazard]) -> str:
    named = [f"{h.code} at {h.node}" for h in hazards if h.code in EXPLAINING][:3]
    return f" (lint: {'; '.join(named)})" if named else ""
