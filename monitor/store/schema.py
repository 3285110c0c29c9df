"""The tables of the history database, as SQLAlchemy 2 typed models.

The schema is portable between SQLite (the default, one file next to the config) and
PostgreSQL (production): JSON columns use the generic ``JSON`` type, timestamps are
timezone-aware UTC, integer keys are 64-bit on PostgreSQL. Migrations in
``migrations/versions`` create exactly these tables; ``alembic check`` in the tests
proves the two never drift apart.

Two numeric pitfalls are handled by column types here, once:

* ``UTCDateTime``: SQLite has no time zones and returns naive datetimes; we store UTC and
  hand back aware UTC datetimes on every backend.
* ``Real``: metrics can be ``nan`` or ``±inf`` (an SNR of identical outputs is ``+inf``).
  PostgreSQL ``double precision`` stores all three; SQLite stores ``±inf`` but silently turns
  ``NaN`` into ``NULL``, which would read back as "not applicable". On SQLite we therefore store
  NaN as the text ``'NaN'`` (a REAL-affinity column keeps non-numeric text as text) and turn
  it back into ``nan`` on read. ``NULL`` keeps meaning "not applicable".

And text: every string column is ``text.StoredString`` / ``text.StoredText`` and every JSON value goes
through ``text.storable_json``, so a NUL or a lone surrogate is stored the same on both backends.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from monitor.store.text import StoredString, StoredText

# One naming convention so that constraint names are identical on every backend and in migrations.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# 64-bit keys on PostgreSQL; SQLite only auto-increments a column declared exactly INTEGER.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite returns naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the store only accepts timezone-aware datetimes")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class _SQLiteDouble(Double[float]):
    """DOUBLE without SQLAlchemy's ``float()`` bind step, which would turn our ``'NaN'`` text back into NaN."""

    def bind_processor(self, dialect: Dialect) -> None:
        return None


class Real(TypeDecorator[float]):
    """A float64 column where ``nan``, ``+inf`` and ``-inf`` round-trip on SQLite and PostgreSQL."""

    impl = Double()
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        return dialect.type_descriptor(_SQLiteDouble() if dialect.name == "sqlite" else Double())

    def process_bind_param(self, value: float | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        value = float(value)
        if math.isnan(value) and dialect.name == "sqlite":
            return "NaN"  # SQLite would store NaN as NULL
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> float | None:
        if value is None:
            return None
        return float(value)  # float("NaN") is nan; values that came back as text are only ever "NaN"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        float: Real(),
        dict[str, Any]: JSON(),
        list[Any]: JSON(),
    }


class Model(Base):
    """A monitored model, by its configured name; tracks the hash of the file last checked."""

    __tablename__ = "models"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(StoredString(200), unique=True)
    current_sha256: Mapped[str | None] = mapped_column(StoredString(64))
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]


class Benchset(Base):
    """A benchmark set version, identified by name and content hash."""

    __tablename__ = "benchsets"
    __table_args__ = (UniqueConstraint("name", "sha256"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(StoredString(200))
    version: Mapped[str | None] = mapped_column(StoredString(100))
    sha256: Mapped[str] = mapped_column(StoredString(64))
    created_at: Mapped[datetime]


class Environment(Base):
    """One distinct environment snapshot (library versions, drivers, hardware), by fingerprint."""

    __tablename__ = "environments"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    fingerprint: Mapped[str] = mapped_column(StoredString(128), unique=True)
    snapshot: Mapped[dict[str, Any]]
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]


class Run(Base):
    """One check of one model on one node: verdict, reasons, providers and a worst-output summary.

    ``worst_*`` columns are computed once at write time so that history reads one table.
    ``node`` is ``''`` when unknown (so that it can be part of a key).
    """

    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_model_id_started_at", "model_id", "started_at"),
        Index("ix_runs_model_id_node_started_at", "model_id", "node", "started_at"),
        Index("ix_runs_started_at", "started_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    baseline_id: Mapped[str | None] = mapped_column(StoredString(200))
    environment_fingerprint: Mapped[str | None] = mapped_column(ForeignKey("environments.fingerprint"))
    model_sha256: Mapped[str | None] = mapped_column(StoredString(64))
    benchset: Mapped[str | None] = mapped_column(StoredString(200))
    benchset_sha256: Mapped[str | None] = mapped_column(StoredString(64))
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime]
    duration_s: Mapped[float]
    verdict: Mapped[str] = mapped_column(StoredString(8))
    reasons: Mapped[list[Any]]
    attribution: Mapped[str | None] = mapped_column(StoredText)
    node: Mapped[str] = mapped_column(StoredString(253), default="")
    pod: Mapped[str | None] = mapped_column(StoredString(253))
    sample_count: Mapped[int] = mapped_column(Integer)
    providers_requested: Mapped[list[Any]]
    providers_effective: Mapped[list[Any]]
    timings: Mapped[dict[str, Any]]
    details: Mapped[dict[str, Any]]
    worst_output: Mapped[str | None] = mapped_column(StoredString(200))
    worst_max_abs_error: Mapped[float | None]
    worst_atol_ratio: Mapped[float | None]
    # the spool entry's key when the run was written back from the spool: a second write-back is a no-op
    run_key: Mapped[str | None] = mapped_column(StoredString(64), unique=True)
    candidate: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """A rehearsal's run on a candidate stack (``onnxmon rehearse``): shown, never production's state."""
    # What the run computed (compare/digest.py) and on which stack (runtime/stackkey.py): the fleet vote's rows
    digests: Mapped[list[Any]] = mapped_column(JSON, default=list, server_default="[]")
    run_digest: Mapped[str | None] = mapped_column(StoredString(32))
    stack: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, server_default="{}")
    stack_key: Mapped[str | None] = mapped_column(StoredString(32))
    spread: Mapped[float | None]  # the largest run-to-run spread of its outputs (repeats > 1), else NULL


class OutputResult(Base):
    """The comparison of one output in one run: every ``OutputMetrics`` field as a column."""

    __tablename__ = "output_results"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(StoredString(200))
    verdict: Mapped[str] = mapped_column(StoredString(8))
    dtype: Mapped[str] = mapped_column(StoredString(32))
    shape: Mapped[list[Any]]
    element_count: Mapped[int] = mapped_column(BigInteger)
    max_abs_error: Mapped[float]
    mean_abs_error: Mapped[float]
    rms_error: Mapped[float]
    max_rel_error: Mapped[float]
    p99_abs_error: Mapped[float]
    cosine_similarity: Mapped[float]
    snr_db: Mapped[float]
    max_ulp: Mapped[int | None] = mapped_column(BigInteger)
    mismatch_count: Mapped[int] = mapped_column(BigInteger)
    mismatch_ratio: Mapped[float]
    nan_count: Mapped[int] = mapped_column(BigInteger)
    nan_mismatch_count: Mapped[int] = mapped_column(BigInteger)
    inf_count: Mapped[int] = mapped_column(BigInteger)
    inf_mismatch_count: Mapped[int] = mapped_column(BigInteger)
    bitwise_equal: Mapped[bool] = mapped_column(Boolean)
    topk_agreement: Mapped[float | None]
    nondeterminism_max_abs: Mapped[float | None]
    error_ratio: Mapped[float | None]
    tolerance: Mapped[dict[str, Any]]
    reasons: Mapped[list[Any]]


class Baseline(Base):
    """A baseline known to the store: where it came from, which environment, whether active."""

    __tablename__ = "baselines"
    __table_args__ = (Index("ix_baselines_model_id_created_at", "model_id", "created_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    baseline_id: Mapped[str] = mapped_column(StoredString(200), unique=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    created_at: Mapped[datetime]
    source: Mapped[str] = mapped_column(StoredString(16))  # captured | imported | reference
    model_sha256: Mapped[str | None] = mapped_column(StoredString(64))
    benchset_id: Mapped[int | None] = mapped_column(ForeignKey("benchsets.id"))
    environment_fingerprint: Mapped[str | None] = mapped_column(ForeignKey("environments.fingerprint"))
    path: Mapped[str | None] = mapped_column(StoredText)
    is_active: Mapped[bool] = mapped_column(Boolean, default=False)
    promoted_at: Mapped[datetime | None]
    promoted_by: Mapped[str | None] = mapped_column(StoredString(200))
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"), index=True)


class LatestRun(Base):
    """Pointer to the newest run per (model, node), so ``/metrics`` reads O(models) rows per scrape."""

    __tablename__ = "latest_runs"

    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), primary_key=True)
    node: Mapped[str] = mapped_column(StoredString(253), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))


class FleetOutlier(Base):
    """A node whose digest the fleet vote outvoted for a model (``monitor/fleet/``): what it was found to be.

    One row per (model, node) while the node stands apart, deleted when it agrees again; ``since`` is the
    first run it stood apart in, ``run_id`` the run last attributed, ``samples`` the samples that differ.
    """

    __tablename__ = "fleet_outliers"

    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), primary_key=True)
    node: Mapped[str] = mapped_column(StoredString(253), primary_key=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    kind: Mapped[str] = mapped_column(StoredString(24))
    since: Mapped[datetime]
    updated_at: Mapped[datetime]
    samples: Mapped[list[Any]]
    detail: Mapped[str] = mapped_column(StoredText, default="")


class Event(Base):
    """A change of state (verdict flip, new environment, promotion, ...): one row, kept longer than runs."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_model_id_at", "model_id", "at"), Index("ix_events_at", "at"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    node: Mapped[str] = mapped_column(StoredString(253), default="")
    kind: Mapped[str] = mapped_column(StoredString(32))
    at: Mapped[datetime]
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), index=True)
    old: Mapped[str | None] = mapped_column(StoredText)
    new: Mapped[str | None] = mapped_column(StoredText)
    detail: Mapped[dict[str, Any]]


class Lease(Base):
    """Who runs a model in one schedule slot when replicas share the models (``daemon.mode: sharded``).

    The primary key *is* the lock: the first replica to insert ``(model, slot)`` runs the
    check, every other replica's insert conflicts and it skips. No home-made consensus, and
    it works the same on SQLite and PostgreSQL.
    """

    __tablename__ = "leases"
    __table_args__ = (Index("ix_leases_acquired_at", "acquired_at"),)

    model: Mapped[str] = mapped_column(StoredString(200), primary_key=True)
    slot: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    holder: Mapped[str] = mapped_column(StoredString(253))
    acquired_at: Mapped[datetime]


class Diagnosis(Base):
    """A diagnosis of one run (``onnxmon diagnose``, ``daemon.diagnose_on_fail``): top cause and the document."""

    __tablename__ = "diagnoses"
    __table_args__ = (Index("ix_diagnoses_model_id_created_at", "model_id", "created_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    created_at: Mapped[datetime]
    cause: Mapped[str] = mapped_column(StoredString(40))  # one of results.CAUSE_CODES
    confidence: Mapped[float]
    document: Mapped[dict[str, Any]]


class Incident(Base):
    """What a person found a failure to be: cause, notes, fix, and the failure's signature for matching.

    Kept when the run is pruned (``run_id`` becomes NULL): the knowledge outlives the history.
    """

    __tablename__ = "incidents"
    __table_args__ = (Index("ix_incidents_created_at", "created_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), index=True)
    model: Mapped[str] = mapped_column(StoredString(200))
    created_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(StoredString(200))
    cause: Mapped[str] = mapped_column(StoredString(40))
    text: Mapped[str] = mapped_column(StoredText)
    fix: Mapped[str | None] = mapped_column(StoredText)
    signature: Mapped[dict[str, Any]]
