"""``/api/v1/`` (and ``/api``, ``/api/v1``): an index of the API, where the README points.

Why: a person or a script that opens the API's root should learn what is there without reading the
code: the OpenAPI document's address and every route under ``/api/v1`` with its methods and summary,
taken from the app's own routes, so the index cannot drift from them.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.routing import APIRoute

from monitor import __version__
from monitor.api import schemas as out

PREFIX = "/api/v1"


def mount(app: FastAPI) -> None:
    """Add the index at ``/api/v1/``; ``/api`` and ``/api/v1`` redirect to it."""

    @app.get(f"{PREFIX}/", tags=["index"])
    def index() -> out.ApiIndex:
        """The API's routes (path, methods, summary) and where the OpenAPI document is."""
        routes = [
            out.ApiRoute(path=route.path, methods=sorted(route.methods or ()), summary=route.summary or _first(route))
            for route in app.routes
            if isinstance(route, APIRoute) and route.path.startswith(f"{PREFIX}/") and route.path != f"{PREFIX}/"
        ]
        return out.ApiIndex(version=__version__, openapi="/openapi.json", routes=routes)

    for bare in ("/api", PREFIX):

        @app.get(bare, include_in_schema=False)
        def to_index() -> RedirectResponse:
            return RedirectResponse(f"{PREFIX}/", status_code=308)


def _first(route: APIRoute) -> str:
    """The first line of the endpoint's docstring (what FastAPI shows as its description)."""
    return (route.description or "").strip().splitlines()[0] if route.description else route.name
