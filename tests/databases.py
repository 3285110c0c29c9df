"""The databases store tests run on: a SQLite file, and an isolated schema of a real PostgreSQL."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def postgres_schema(postgres_url: str) -> Iterator[str]:
    """A URL whose search_path is a fresh schema, dropped afterwards (nothing left in db ``test``)."""
    import psycopg

    name = f"onnxmon_t{os.getpid()}_{uuid.uuid4().hex[:8]}"
    dsn = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    joiner = "&" if "?" in postgres_url else "?"
    try:
        yield f"{postgres_url}{joiner}options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


@contextmanager
def database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL of an empty database on ``backend`` (``sqlite`` file or ``postgresql`` schema)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'history.db'}"
    else:
        with postgres_schema(request.getfixturevalue("postgres_url")) as url:
            yield url


BACKENDS = [pytest.param("sqlite"), pytest.param("postgresql", marks=pytest.mark.postgres)]
