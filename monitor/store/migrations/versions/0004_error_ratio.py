"""output_results.error_ratio: the worst |a-b| / (atol + rtol*|b|) of an output (1.0 is the line).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("output_results") as batch:
        batch.add_column(sa.Column("error_ratio", sa.Double[float](), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("output_results") as batch:
        batch.drop_column("error_ratio")
