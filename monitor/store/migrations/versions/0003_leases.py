"""Leases: one row per (model, schedule slot) so sharded replicas run each check exactly once.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("slot", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("holder", sa.String(253), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("model", "slot", name="pk_leases"),
    )
    op.create_index("ix_leases_acquired_at", "leases", ["acquired_at"])


def downgrade() -> None:
    op.drop_index("ix_leases_acquired_at", table_name="leases")
    op.drop_table("leases")
