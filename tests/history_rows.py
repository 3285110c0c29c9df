"""A realistic history written at any schema revision, and its rows read back for comparison.

The rows are those of onnxmon's head schema (models, runs with their outputs, baselines that point at
runs, latest runs, events, leases, diagnoses, incidents); at an older revision only the tables and
columns that revision has are written, through the tables as reflected from the database itself,
so the same code populates every revision a user's history can be at.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic.script import ScriptDirectory

from monitor import store
from monitor.results import Reason, Verdict
from monitor.store import convert, schema
from tests.test_store import T0, result

ORDER = (
    "models",
    "benchsets",
    "environments",
    "runs",
    "output_results",
    "baselines",
    "latest_runs",
    "events",
    "leases",
    "diagnoses",
    "incidents",
)


def revisions() -> list[str]:
    """Every revision the migrations ship, oldest first."""
    script = ScriptDirectory(str(Path(store.__file__).parent / "migrations"))
    return [s.revision for s in reversed(list(script.walk_revisions()))]


def rows(runs: int = 24) -> dict[str, list[dict[str, Any]]]:
    """The history's rows per table, with every column any revision has (later ones dropped where absent)."""
    environment = {"onnxruntime": "1.20.1", "gpu": {"name": "NVIDIA A10G", "driver": "550.54"}, "k8s": {"node": "n1"}}
    out: dict[str, list[dict[str, Any]]] = {
        "models": [
            {"id": 1, "name": "resnet", "current_sha256": "a" * 64, "first_seen": T0, "last_seen": T0},
            {"id": 2, "name": "bert-ü", "current_sha256": None, "first_seen": T0, "last_seen": T0},
        ],
        "benchsets": [{"id": 1, "name": "imagenet-64", "version": "v1", "sha256": "b" * 64, "created_at": T0}],
        "environments": [
            {"id": 1, "fingerprint": "env-a", "snapshot": environment, "first_seen": T0, "last_seen": T0},
        ],
        "runs": [],
        "output_results": [],
    }
    shapes = {}  # (model, verdict) -> the run's and its outputs' columns as the store writes them
    for i in range(1, runs + 1):
        at = T0 + timedelta(minutes=i)
        model_id, verdict = 1 + i % 2, Verdict.FAIL if i % 5 == 0 else Verdict.PASS
        if (model_id, verdict) not in shapes:
            failed = verdict is Verdict.FAIL
            reasons = (Reason("atol_rtol", "logits: max |a-b| 3e-05 over atol 1e-05"),) if failed else ()
            measured = result(T0, verdict, reasons=reasons, model="resnet" if i % 2 else "bert-ü")
            run = _columns(convert.run_row(measured, model_id, "n1", "onnxmon-0"))
            shapes[model_id, verdict] = run, [_columns(convert.output_row(o, 0)) for o in measured.outputs]
        run, outputs = shapes[model_id, verdict]
        span = run["finished_at"] - run["started_at"]
        moved = {"id": i, "started_at": at, "finished_at": at + span, "pod": f"onnxmon-{i % 3}"}
        out["runs"].append(run | moved | {"environment_fingerprint": "env-a", "candidate": False, "run_key": None})
        for j, columns in enumerate(outputs):
            out["output_results"].append(columns | {"id": 2 * i + j - 1, "run_id": i})
    last = {model: max(r["id"] for r in out["runs"] if r["model_id"] == model) for model in (1, 2)}
    out["baselines"] = [
        {
            "id": model,
            "baseline_id": f"m{model}-20250101-abc",
            "model_id": model,
            "created_at": T0,
            "source": "run",
            "model_sha256": "a" * 64,
            "benchset_id": 1,
            "environment_fingerprint": "env-a",
            "path": f"/b/m{model}",
            "is_active": True,
            "promoted_at": T0,
            "promoted_by": "ops",
            "run_id": model,
        }
        for model in (1, 2)
    ]
    out["latest_runs"] = [{"model_id": model, "node": "n1", "run_id": run} for model, run in last.items()]
    out["events"] = [
        {
            "id": k,
            "model_id": 1 + i % 2,
            "node": "n1",
            "kind": "verdict_changed",
            "at": T0 + timedelta(minutes=i),
            "run_id": i,
            "old": "pass",
            "new": "fail",
            "detail": {"reasons": ["tolerance_exceeded"]},
        }
        for k, i in enumerate(range(5, runs + 1, 5), start=1)
    ]
    out["leases"] = [
        {"model": "resnet", "slot": 28_000_000 + k, "holder": "pod-a", "acquired_at": T0} for k in range(3)
    ]
    out["diagnoses"] = [
        {
            "id": 1,
            "run_id": 5,
            "model_id": 2,
            "created_at": T0,
            "cause": "provider_fallback",
            "confidence": 0.8,
            "document": {"ranked": [{"cause": "provider_fallback", "score": 0.8}]},
        }
    ]
    out["incidents"] = [
        {
            "id": 1,
            "run_id": 5,
            "model": "bert-ü",
            "created_at": T0,
            "created_by": "ops",
            "cause": "provider_fallback",
            "text": "CUDA EP fell back to CPU",
            "fix": "pin the driver",
            "signature": {"outputs": ["logits"]},
        }
    ]
    return out


def populate(connection: sa.Connection, runs: int = 24) -> dict[str, int]:
    """Write the history into whatever tables and columns the database has now; rows written per table."""
    tables, history = _tables(connection), rows(runs)
    written = {}
    for name in ORDER:
        table = tables.get(name)
        if table is None:
            continue
        present = [{k: v for k, v in row.items() if k in table.c} for row in history[name]]
        connection.execute(table.insert(), present)
        written[name] = len(present)
    return written


def dump(connection: sa.Connection) -> dict[str, list[dict[str, Any]]]:
    """Every onnxmon table's rows, in primary-key order, as plain dicts."""
    tables = _tables(connection)
    out = {}
    for name in ORDER:
        table = tables.get(name)
        if table is not None:
            query = sa.select(table).order_by(*table.primary_key.columns)
            out[name] = [dict(row._mapping) for row in connection.execute(query)]
    return out


def _tables(connection: sa.Connection) -> dict[str, sa.Table]:
    metadata = sa.MetaData()
    metadata.reflect(connection, only=[n for n in ORDER if sa.inspect(connection).has_table(n)])
    return dict(metadata.tables)


def advance_sequences(engine: sa.Engine) -> None:
    """PostgreSQL: move each id sequence past the ids ``populate`` wrote (SQLite needs nothing)."""
    if engine.dialect.name != "postgresql":
        return
    with engine.begin() as connection:
        for name in ORDER:
            if "id" not in {c["name"] for c in sa.inspect(connection).get_columns(name)}:
                continue
            sequence = connection.execute(sa.text("SELECT pg_get_serial_sequence(:t, 'id')"), {"t": name}).scalar()
            if sequence:
                connection.execute(
                    sa.text(f"SELECT setval(:s, (SELECT coalesce(max(id), 0) + 1 FROM {name}), false)"), {"s": sequence}
                )


def _columns(row: schema.Base) -> dict[str, Any]:
    """An ORM row's column values by column name (what ``Store.record_run`` would have written)."""
    mapper = sa.inspect(type(row))
    return {attr.columns[0].name: getattr(row, attr.key) for attr in mapper.column_attrs}
