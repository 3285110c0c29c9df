"""runs.run_key: a run's identity from the spool entry it was written back from, unique.

A spooled result written back and then left on disk by a crash (``kill -9`` between the commit
and the unlink) carries the same key the next time; the store sees it and writes nothing.
NULL for runs written directly (never spooled), which need no key: they are written once.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("run_key", sa.String(64), nullable=True))
        batch.create_unique_constraint("uq_runs_run_key", ["run_key"])


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint("uq_runs_run_key", type_="unique")
        batch.drop_column("run_key")
