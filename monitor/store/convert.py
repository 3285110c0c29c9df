"""Conversions between ``CheckResult`` values, table rows and the store's plain records.

Output rows are read back as the ``OutputStats`` they were written from.

Also the JSON encoder the engine uses: PostgreSQL's JSON type rejects ``NaN``/``Infinity``
tokens, so non-finite floats inside JSON columns are written as the strings ``"NaN"``,
``"Infinity"`` and ``"-Infinity"``: the one rule of ``monitor.jsonsafe`` (docs/json.md), which
rows written before it existed already followed. Metric columns are real floats and keep their values.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import PurePath
from typing import Any

from monitor import jsonsafe
from monitor.results import (
    AppliedTolerance,
    CheckResult,
    DecisionStats,
    OutputMetrics,
    OutputStats,
    Reason,
    Verdict,
    run_error_ratio,
    worst_output,
)
from monitor.store import schema
from monitor.store.records import BaselineRecord, EventRecord, RunRecord


def json_dumps(value: Any) -> str:
    """Strict JSON (no NaN tokens) for every backend; tuples become lists, paths strings."""
    return jsonsafe.dumps(json_safe(value), separators=(",", ":"))


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as strings (``jsonsafe.jsonable``), paths and datetimes as text."""
    return jsonsafe.jsonable(value, default=_text)


def _text(value: Any) -> Any:
    return str(value) if isinstance(value, PurePath | datetime) else value


def utc(timestamp: float) -> datetime:
    """An aware UTC datetime from a Unix timestamp."""
    return datetime.fromtimestamp(timestamp, UTC)


def parse_when(value: Any, what: str) -> datetime:
    """An aware UTC datetime from an ISO string or datetime (naive means UTC)."""
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, str):
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    elif isinstance(value, int | float):
        return utc(float(value))
    else:
        raise ValueError(f"{what}: expected an ISO 8601 timestamp, got {value!r}")
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def run_row(result: CheckResult, model_id: int, node: str | None, pod: str | None) -> schema.Run:
    worst = worst_output(result.outputs)
    return schema.Run(
        model_id=model_id,
        baseline_id=result.baseline_id,
        environment_fingerprint=result.environment_fingerprint,
        model_sha256=result.model_sha256,
        benchset=result.benchset,
        benchset_sha256=result.benchset_sha256,
        started_at=utc(result.started_at),
        finished_at=utc(result.finished_at),
        duration_s=result.duration_s,
        verdict=result.verdict.value,
        reasons=[dataclasses.asdict(r) for r in result.reasons],
        attribution=result.attribution,
        node=node or "",
        pod=pod,
        sample_count=result.sample_count,
        providers_requested=list(result.providers_requested),
        providers_effective=list(result.providers_effective),
        timings=dict(result.timings),
        details=dict(result.details),
        worst_output=worst.name if worst is not None else None,
        worst_max_abs_error=worst.metrics.max_abs_error if worst is not None else None,
        worst_atol_ratio=worst.atol_ratio if worst is not None else None,
    )


def output_row(output: OutputStats, run_id: int) -> schema.OutputResult:
    return schema.OutputResult(
        run_id=run_id,
        name=output.name,
        verdict=output.verdict.value,
        dtype=output.dtype,
        shape=list(output.shape),
        tolerance=output.tolerance.to_dict() | _decided(output),
        reasons=[dataclasses.asdict(r) for r in output.reasons],
        **output.metrics.to_dict(),
    )


# Decisions and warnings ride in the output row's ``tolerance`` JSON (no column of their own: no migration).
_DECIDED = ("decisions", "warnings")


def _decided(output: OutputStats) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if output.decisions is not None:
        extra["decisions"] = output.decisions.to_dict()
    if output.warnings:
        extra["warnings"] = [dataclasses.asdict(r) for r in output.warnings]
    return extra


_METRIC_FIELDS = tuple(f.name for f in dataclasses.fields(OutputMetrics))


def output_stats(row: schema.OutputResult) -> OutputStats:
    """The ``OutputStats`` a stored output row was written from (``output_row`` the other way)."""
    metrics = OutputMetrics(**{name: getattr(row, name) for name in _METRIC_FIELDS})
    tolerance = {k: _number(v) for k, v in row.tolerance.items() if k not in _DECIDED}
    decided = row.tolerance.get("decisions")
    return OutputStats(
        name=row.name,
        verdict=Verdict(row.verdict),
        metrics=metrics,
        tolerance=AppliedTolerance(**tolerance),
        reasons=_reasons(row.reasons),
        dtype=row.dtype,
        shape=tuple(row.shape),
        decisions=DecisionStats.from_dict(decided) if decided else None,
        warnings=_reasons(row.tolerance.get("warnings") or []),
    )


def run_record(
    row: schema.Run, model: str, outputs: tuple[OutputStats, ...] = (), error_ratio: float | None = None
) -> RunRecord:
    """The record of a stored run; its ``error_ratio`` from ``outputs`` when given, else as passed."""
    if outputs:
        error_ratio = run_error_ratio(o.error_ratio for o in outputs)
    return RunRecord(
        id=row.id,
        model=model,
        verdict=Verdict(row.verdict),
        started_at=row.started_at,
        finished_at=row.finished_at,
        duration_s=row.duration_s,
        node=row.node or None,
        pod=row.pod,
        reasons=_reasons(row.reasons),
        attribution=row.attribution,
        baseline_id=row.baseline_id,
        environment_fingerprint=row.environment_fingerprint,
        model_sha256=row.model_sha256,
        benchset=row.benchset,
        benchset_sha256=row.benchset_sha256,
        sample_count=row.sample_count,
        providers_requested=tuple(row.providers_requested),
        providers_effective=tuple(row.providers_effective),
        timings=dict(row.timings),
        details=dict(row.details),
        worst_output=row.worst_output,
        worst_max_abs_error=row.worst_max_abs_error,
        worst_atol_ratio=row.worst_atol_ratio,
        outputs=outputs,
        candidate=bool(getattr(row, "candidate", False)),
        error_ratio=error_ratio,
    )


def event_record(row: schema.Event, model: str) -> EventRecord:
    return EventRecord(
        id=row.id,
        model=model,
        kind=row.kind,
        at=row.at,
        node=row.node or None,
        run_id=row.run_id,
        old=row.old,
        new=row.new,
        detail=dict(row.detail),
    )


def baseline_record(row: schema.Baseline, model: str, benchset: schema.Benchset | None) -> BaselineRecord:
    return BaselineRecord(
        baseline_id=row.baseline_id,
        model=model,
        created_at=row.created_at,
        source=row.source,
        is_active=row.is_active,
        model_sha256=row.model_sha256,
        benchset=benchset.name if benchset else None,
        benchset_sha256=benchset.sha256 if benchset else None,
        environment_fingerprint=row.environment_fingerprint,
        path=row.path,
        promoted_at=row.promoted_at,
        promoted_by=row.promoted_by,
        run_id=row.run_id,
    )


def _reasons(raw: list[Any]) -> tuple[Reason, ...]:
    return tuple(Reason(**r) for r in raw)


def _number(value: Any) -> Any:
    """Undo ``json_safe`` for a scalar: the strings it wrote for non-finite floats become floats."""
    return jsonsafe.to_float(value)
