"""``GET /api/v1/fleet``: the fleet vote on output digests, per model (docs/fleet.md), as ``onnxmon fleet -o json``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

from fastapi import FastAPI, Query
from fastapi.responses import JSONResponse

from monitor.api import schemas
from monitor.fleet import report

if TYPE_CHECKING:
    from monitor.api.handle import DaemonHandle


def mount(app: FastAPI, handle: DaemonHandle) -> None:
    @app.get("/api/v1/fleet", tags=["history"])
    def fleet(model: Annotated[str | None, Query(max_length=200)] = None) -> JSONResponse:
        """Per model: its groups (nodes, digest, mode), its outliers (node, kind, since, samples), ``separated_by``."""
        votes = report.vote(handle.store, handle.settings, datetime.now(UTC), model=model)
        return JSONResponse(schemas.json_safe([report.document(v) for v in votes]))
