"""Alembic environment: runs on the connection the ``Store`` hands over (no URL in an ini file).

``Store.upgrade()`` builds the Alembic ``Config`` in code and puts an open connection in
``config.attributes["connection"]``; this file only wires that connection to the metadata.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from monitor.store.schema import Base

config = context.config
connection = config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError("onnxmon migrations run through monitor.store.Store (no connection was given)")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things in place
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
