"""Initial history schema: models, benchsets, environments, runs, output results, baselines.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the column types: a migration must not change when schema.py does.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
When = sa.DateTime(timezone=True)
Real = sa.Double[float]()


def upgrade() -> None:
    op.create_table(
        "models",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("current_sha256", sa.String(64), nullable=True),
        sa.Column("first_seen", When, nullable=False),
        sa.Column("last_seen", When, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_models"),
        sa.UniqueConstraint("name", name="uq_models_name"),
    )
    op.create_table(
        "benchsets",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("version", sa.String(100), nullable=True),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("created_at", When, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_benchsets"),
        sa.UniqueConstraint("name", "sha256", name="uq_benchsets_name_sha256"),
    )
    op.create_table(
        "environments",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("fingerprint", sa.String(128), nullable=False),
        sa.Column("snapshot", sa.JSON(), nullable=False),
        sa.Column("first_seen", When, nullable=False),
        sa.Column("last_seen", When, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_environments"),
        sa.UniqueConstraint("fingerprint", name="uq_environments_fingerprint"),
    )
    op.create_table(
        "runs",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("model_id", BigId, nullable=False),
        sa.Column("baseline_id", sa.String(200), nullable=True),
        sa.Column("environment_fingerprint", sa.String(128), nullable=True),
        sa.Column("model_sha256", sa.String(64), nullable=True),
        sa.Column("benchset", sa.String(200), nullable=True),
        sa.Column("benchset_sha256", sa.String(64), nullable=True),
        sa.Column("started_at", When, nullable=False),
        sa.Column("finished_at", When, nullable=False),
        sa.Column("duration_s", Real, nullable=False),
        sa.Column("verdict", sa.String(8), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("attribution", sa.Text(), nullable=True),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("pod", sa.String(253), nullable=True),
        sa.Column("sample_count", sa.Integer(), nullable=False),
        sa.Column("providers_requested", sa.JSON(), nullable=False),
        sa.Column("providers_effective", sa.JSON(), nullable=False),
        sa.Column("timings", sa.JSON(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("worst_output", sa.String(200), nullable=True),
        sa.Column("worst_max_abs_error", Real, nullable=True),
        sa.Column("worst_atol_ratio", Real, nullable=True),
        sa.ForeignKeyConstraint(
            ["environment_fingerprint"],
            ["environments.fingerprint"],
            name="fk_runs_environment_fingerprint_environments",
        ),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name="fk_runs_model_id_models"),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
    )
    op.create_index("ix_runs_model_id_started_at", "runs", ["model_id", "started_at"])
    op.create_index("ix_runs_model_id_node_started_at", "runs", ["model_id", "node", "started_at"])
    op.create_index("ix_runs_started_at", "runs", ["started_at"])
    op.create_table(
        "output_results",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("run_id", BigId, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("verdict", sa.String(8), nullable=False),
        sa.Column("dtype", sa.String(32), nullable=False),
        sa.Column("shape", sa.JSON(), nullable=False),
        sa.Column("element_count", sa.BigInteger(), nullable=False),
        *(
            sa.Column(name, Real, nullable=False)
            for name in (
                "max_abs_error",
                "mean_abs_error",
                "rms_error",
                "max_rel_error",
                "p99_abs_error",
                "cosine_similarity",
                "snr_db",
            )
        ),
        sa.Column("max_ulp", sa.BigInteger(), nullable=True),
        sa.Column("mismatch_count", sa.BigInteger(), nullable=False),
        sa.Column("mismatch_ratio", Real, nullable=False),
        sa.Column("nan_count", sa.BigInteger(), nullable=False),
        sa.Column("nan_mismatch_count", sa.BigInteger(), nullable=False),
        sa.Column("inf_count", sa.BigInteger(), nullable=False),
        sa.Column("inf_mismatch_count", sa.BigInteger(), nullable=False),
        sa.Column("bitwise_equal", sa.Boolean(), nullable=False),
        sa.Column("topk_agreement", Real, nullable=True),
        sa.Column("nondeterminism_max_abs", Real, nullable=True),
        sa.Column("tolerance", sa.JSON(), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_output_results_run_id_runs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_output_results"),
    )
    op.create_index("ix_output_results_run_id", "output_results", ["run_id"])
    op.create_table(
        "baselines",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("baseline_id", sa.String(200), nullable=False),
        sa.Column("model_id", BigId, nullable=False),
        sa.Column("created_at", When, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("model_sha256", sa.String(64), nullable=True),
        sa.Column("benchset_id", BigId, nullable=True),
        sa.Column("environment_fingerprint", sa.String(128), nullable=True),
        sa.Column("path", sa.Text(), nullable=True),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("promoted_at", When, nullable=True),
        sa.Column("promoted_by", sa.String(200), nullable=True),
        sa.Column("run_id", BigId, nullable=True),
        sa.ForeignKeyConstraint(["benchset_id"], ["benchsets.id"], name="fk_baselines_benchset_id_benchsets"),
        sa.ForeignKeyConstraint(
            ["environment_fingerprint"],
            ["environments.fingerprint"],
            name="fk_baselines_environment_fingerprint_environments",
        ),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name="fk_baselines_model_id_models"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_baselines_run_id_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_baselines"),
        sa.UniqueConstraint("baseline_id", name="uq_baselines_baseline_id"),
    )
    op.create_index("ix_baselines_model_id_created_at", "baselines", ["model_id", "created_at"])
    op.create_index("ix_baselines_run_id", "baselines", ["run_id"])
    op.create_table(
        "latest_runs",
        sa.Column("model_id", BigId, nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("run_id", BigId, nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name="fk_latest_runs_model_id_models"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_latest_runs_run_id_runs"),
        sa.PrimaryKeyConstraint("model_id", "node", name="pk_latest_runs"),
    )


def downgrade() -> None:
    for table in ("latest_runs", "baselines", "output_results", "runs", "environments", "benchsets", "models"):
        op.drop_table(table)
