"""Conversions between ``CheckResult`` values, table rows and the store's plain records.

Output rows are read back as the ``OutputStats`` they were written from. Both ways are derived from the
dataclasses by ``monitor.shapes``: a column is the field of the same name, and the few exceptions (what a
run keeps in other tables, the metrics as columns, what rides in the tolerance JSON) are declared here.

Also the JSON encoder the engine uses: PostgreSQL's JSON type rejects ``NaN``/``Infinity``
tokens, so non-finite floats inside JSON columns are written as the strings ``"NaN"``,
``"Infinity"`` and ``"-Infinity"``: the one rule of ``monitor.jsonsafe`` (docs/json.md), which
rows written before it existed already followed. Metric columns are real floats and keep their values.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import PurePath
from typing import Any

from monitor import jsonsafe, shapes
from monitor.results import CheckResult, OutputMetrics, OutputStats, run_error_ratio, worst_output
from monitor.store import schema, text
from monitor.store.records import BaselineRecord, EventRecord, RunRecord


def json_dumps(value: Any) -> str:
    """Strict JSON (no NaN tokens) for every backend; tuples become lists, paths strings; storable text only."""
    return jsonsafe.dumps(text.storable_json(json_safe(value)), separators=(",", ":"))


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


# A result's fields become the ``runs`` row's columns of the same names (``duration_s`` too), except these,
# kept elsewhere; the times are aware datetimes in the row. A field that is neither a column nor named here
# makes ``schema.Run`` refuse the row (tests/test_shapes.py says so before a migration is forgotten).
RUN_APART: Mapping[str, str] = {
    "model": "the models table (model_id)",
    "outputs": "output_results rows (output_row)",
    "environment": "the environments table, keyed by environment_fingerprint",
    "all_reasons": "derived: each output's reasons are in its row",
}
RUN_TIMES = ("started_at", "finished_at")


def run_row(result: CheckResult, model_id: int, node: str | None, pod: str | None) -> schema.Run:
    """The ``runs`` row of ``result``: its shape (``monitor.shapes``) less ``RUN_APART``, plus what the store adds."""
    worst = worst_output(result.outputs)
    columns = shapes.to_dict(result, exclude=RUN_APART)
    columns.update({name: utc(columns[name]) for name in RUN_TIMES})
    return schema.Run(
        **columns,
        model_id=model_id,
        environment_fingerprint=result.environment_fingerprint,
        node=node or "",
        pod=pod,
        worst_output=worst.name if worst is not None else None,
        worst_max_abs_error=worst.metrics.max_abs_error if worst is not None else None,
        worst_atol_ratio=worst.atol_ratio if worst is not None else None,
        spread=max(spreads) if (spreads := _spreads(result)) else None,
    )


def _spreads(result: CheckResult) -> list[float]:
    return [o.metrics.nondeterminism_max_abs for o in result.outputs if o.metrics.nondeterminism_max_abs is not None]


# An output's fields become its row's columns of the same names, but for these two exceptions: each metric
# is a column of its own, and decisions and warnings ride in the ``tolerance`` JSON (no column: no
# migration), present only when the output has them.
OUTPUT_FLAT = "metrics"
OUTPUT_IN_TOLERANCE = ("decisions", "warnings")


def output_row(output: OutputStats, run_id: int) -> schema.OutputResult:
    columns = shapes.to_dict(output)
    metrics = columns.pop(OUTPUT_FLAT)
    riders = {name: columns.pop(name) for name in OUTPUT_IN_TOLERANCE}
    columns["tolerance"] |= {name: value for name, value in riders.items() if value}
    return schema.OutputResult(run_id=run_id, **columns, **metrics)


def output_stats(row: schema.OutputResult) -> OutputStats:
    """The ``OutputStats`` a stored output row was written from (``output_row`` the other way)."""
    tolerance = dict(row.tolerance)
    riders = {name: tolerance.pop(name, None) for name in OUTPUT_IN_TOLERANCE}
    data = {name: getattr(row, name) for name in shapes.field_names(OutputStats) if hasattr(schema.OutputResult, name)}
    data[OUTPUT_FLAT] = {name: getattr(row, name) for name in shapes.field_names(OutputMetrics)}
    data["tolerance"] = tolerance
    data |= {name: value for name, value in riders.items() if value}
    return shapes.from_dict(OutputStats, data, where=f"stored output {row.name!r} of run {row.run_id}")


def run_record(
    row: schema.Run, model: str, outputs: tuple[OutputStats, ...] = (), error_ratio: float | None = None
) -> RunRecord:
    """The record of a stored run (its columns by name); ``error_ratio`` from ``outputs`` when given, else as passed."""
    if outputs:
        error_ratio = run_error_ratio(o.error_ratio for o in outputs)
    data = {name: getattr(row, name) for name in shapes.field_names(RunRecord) if hasattr(schema.Run, name)}
    given = {
        "model": model,
        "node": row.node or None,
        "outputs": outputs,
        "candidate": bool(getattr(row, "candidate", False)),
        "error_ratio": error_ratio,
    }
    return shapes.from_dict(RunRecord, data, where=f"stored run {row.id}", values=given)


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


def replica(environment: Mapping[str, Any], what: str) -> str | None:
    """``k8s.node`` / ``k8s.pod`` from a snapshot, flat (``"k8s.node"``) or nested (``{"k8s": {"node"}}``)."""
    for key in (f"k8s.{what}", f"k8s_{what}", what):
        if environment.get(key):
            return str(environment[key])
    nested = environment.get("k8s")
    if isinstance(nested, Mapping) and nested.get(what):
        return str(nested[what])
    return None
