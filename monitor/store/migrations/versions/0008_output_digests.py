"""runs.digests, run_digest, stack, stack_key, spread and the fleet_outliers table: the fleet vote (docs/fleet.md).

A run records what it computed (each output's per-sample xxh3-128 digests and one digest of the run) and
on which stack (the stack key's fields and their digest); ``fleet_outliers`` keeps what the vote found a
node that stands apart to be (transient, suspect_hardware, stack), since when and on which samples.
Runs written before carry no digest and take part in no vote.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("digests", sa.JSON(), nullable=False, server_default="[]"))
        batch.add_column(sa.Column("run_digest", sa.String(32), nullable=True))
        batch.add_column(sa.Column("stack", sa.JSON(), nullable=False, server_default="{}"))
        batch.add_column(sa.Column("stack_key", sa.String(32), nullable=True))
        batch.add_column(sa.Column("spread", sa.Double[float](), nullable=True))
    op.create_table(
        "fleet_outliers",
        sa.Column("model_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("kind", sa.String(24), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("samples", sa.JSON(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name="fk_fleet_outliers_model_id_models"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_fleet_outliers_run_id_runs", ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("model_id", "node", name="pk_fleet_outliers"),
    )


def downgrade() -> None:
    op.drop_table("fleet_outliers")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("spread")
        batch.drop_column("stack_key")
        batch.drop_column("stack")
        batch.drop_column("run_digest")
        batch.drop_column("digests")
