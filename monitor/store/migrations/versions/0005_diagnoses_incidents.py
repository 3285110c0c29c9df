"""diagnoses (a run's ranked causes) and incidents (what people found, with the failure's signature).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "diagnoses",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("run_id", _ID, nullable=False),
        sa.Column("model_id", _ID, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cause", sa.String(40), nullable=False),
        sa.Column("confidence", sa.Double[float](), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_diagnoses_run_id_runs", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name="fk_diagnoses_model_id_models"),
        sa.PrimaryKeyConstraint("id", name="pk_diagnoses"),
    )
    op.create_index("ix_diagnoses_run_id", "diagnoses", ["run_id"])
    op.create_index("ix_diagnoses_model_id_created_at", "diagnoses", ["model_id", "created_at"])
    op.create_table(
        "incidents",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("run_id", _ID, nullable=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.Column("cause", sa.String(40), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("fix", sa.Text(), nullable=True),
        sa.Column("signature", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_incidents_run_id_runs", ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name="pk_incidents"),
    )
    op.create_index("ix_incidents_run_id", "incidents", ["run_id"])
    op.create_index("ix_incidents_created_at", "incidents", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_incidents_created_at", table_name="incidents")
    op.drop_index("ix_incidents_run_id", table_name="incidents")
    op.drop_table("incidents")
    op.drop_index("ix_diagnoses_model_id_created_at", table_name="diagnoses")
    op.drop_index("ix_diagnoses_run_id", table_name="diagnoses")
    op.drop_table("diagnoses")
