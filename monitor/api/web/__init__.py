"""The status page: server-rendered HTML over the same ``DaemonHandle`` the API reads.

``mount(app, handle)`` adds the pages to the API's FastAPI app:

* ``/``                              every configured model, failing ones first
* ``/models/{name}``                 run history chart, baselines, events, runs
* ``/runs/{id}``                     outputs, reasons, environment diff, localization
* ``/runs/{id}/model-explorer.json``  the localization as Google Model Explorer node data
* ``/environments/{fingerprint}``    one snapshot, grouped, stable fields marked
* ``/environments/diff?a=&b=``       two environments (fingerprints or baseline ids) side by side

Pages are plain HTML with inline CSS and SVG, no script and nothing fetched from elsewhere
(a strict Content-Security-Policy says so to the browser), so they work air-gapped. Each page's
module computes plain values and a Jinja2 template under ``templates/`` renders them, escaping
every value (``templating.py``). Anything unknown is a small 404 page; path parameters are
validated here rather than by FastAPI so that even a malformed id gets an HTML answer, not a
JSON 422.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

from fastapi import FastAPI, Query
from fastapi.responses import HTMLResponse, Response

from monitor import jsonsafe
from monitor.api.web import env_page, fleet_page, model_page, overview, run_page
from monitor.api.web.env_page import NotFound
from monitor.api.web.formats import CONTENT_SECURITY_POLICY
from monitor.api.web.lookup import error_page

if TYPE_CHECKING:
    from monitor.api.handle import DaemonHandle

__all__ = ["mount"]

_TITLES = {404: "Not found", 409: "Ambiguous"}
RefParam = Annotated[str | None, Query(description="fingerprint (prefix) or baseline id")]


def _now() -> datetime:
    return datetime.now(UTC)


def mount(app: FastAPI, handle: DaemonHandle, *, clock: Callable[[], datetime] = _now) -> None:
    """Add the status page routes to ``app``; ``clock`` gives "now" for ages such as "3 min ago"."""

    def respond(render: Callable[[], str]) -> HTMLResponse:
        try:
            body, status = render(), 200
        except NotFound as missing:
            body, status = (
                error_page(missing.status, _TITLES.get(missing.status, "Not found"), missing.message),
                missing.status,
            )
        return HTMLResponse(body, status_code=status, headers=_HEADERS)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def home() -> HTMLResponse:
        return respond(lambda: overview.render(handle, clock()))

    @app.get("/models/{name:path}", response_class=HTMLResponse, include_in_schema=False)
    def model(name: str) -> HTMLResponse:
        return respond(lambda: model_page.render(handle, name, clock()))

    @app.get("/runs/{run_id}/model-explorer.json", include_in_schema=False)
    def run_model_explorer(run_id: str) -> Response:
        """The run's localization as Google Model Explorer node data (the run page links it)."""
        try:
            body, status = jsonsafe.dumps(run_page.model_explorer(handle, run_id)), 200
        except NotFound as missing:
            body, status = jsonsafe.dumps({"detail": missing.message}), missing.status
        return Response(body, status_code=status, media_type="application/json", headers=_HEADERS)

    @app.get("/runs/{run_id:path}", response_class=HTMLResponse, include_in_schema=False)
    def run(run_id: str) -> HTMLResponse:
        return respond(lambda: run_page.render(handle, run_id, clock()))

    @app.get("/fleet", response_class=HTMLResponse, include_in_schema=False)
    def fleet() -> HTMLResponse:
        return respond(lambda: fleet_page.render(handle, clock()))

    @app.get("/environments/diff", response_class=HTMLResponse, include_in_schema=False)
    def environments_diff(a: RefParam = None, b: RefParam = None) -> HTMLResponse:
        return respond(lambda: env_page.render_diff(handle, a, b))

    @app.get("/environments/{fingerprint:path}", response_class=HTMLResponse, include_in_schema=False)
    def environment(fingerprint: str) -> HTMLResponse:
        return respond(lambda: env_page.render_environment(handle, fingerprint, clock()))


_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
