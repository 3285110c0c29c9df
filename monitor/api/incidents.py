"""Diagnoses and incidents over HTTP: read a run's diagnosis, note an incident (token), list them.

* ``GET  /api/v1/runs/{id}/diagnosis``  the stored diagnosis, with the incidents similar to the
  run *now* (an incident noted after the diagnosis is offered too); 404 when there is none
* ``GET  /api/v1/runs/{id}/similar-incidents``  the incidents whose signature is like the run's
* ``GET  /api/v1/incidents`` · ``GET /api/v1/incidents/{id}``
* ``POST /api/v1/runs/{id}/incidents``  JSON ``{"cause", "text", "fix", "by"}``, bearer token as
  every mutating call; 201 with the incident
* ``POST /runs/{id}/incidents``  the run page's form (``application/x-www-form-urlencoded``, the
  token as a form field since a plain HTML form cannot send a header); answers 303 to the run page,
  or a small HTML error page. No JavaScript, within the pages' CSP (``form-action 'self'``).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import FastAPI, HTTPException, Query, Request, Response
from fastapi.params import Depends
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from monitor.api import params, schemas
from monitor.api.handle import DaemonHandle
from monitor.api.params import MAX_ID
from monitor.api.web.lookup import error_page
from monitor.errors import MonitorError
from monitor.results import CAUSE_CODES
from monitor.store import incidents
from monitor.store.text import NOT_BLANK

RunId = params.Id
# text and fix at incidents.MAX_TEXT characters each, 12 bytes per 4-byte character URL-encoded,
# and room for the rest
_MAX_FORM = 2 * 12 * incidents.MAX_TEXT + 16 * 1024


_NO_NUL = r"^[^\x00]*$"


class IncidentIn(BaseModel):
    """An incident as a person notes it."""

    model_config = ConfigDict(extra="forbid")
    cause: str = Field(
        description=f"one of {', '.join(sorted(CAUSE_CODES))}",
        max_length=40,
        json_schema_extra={"enum": list[JsonValue](sorted(CAUSE_CODES))},  # the closed set, in the OpenAPI schema too
    )
    # No NUL: the store refuses it (store/text.py); said here too, so the schema tells clients (a 422 like any field)
    text: str = Field(min_length=1, max_length=incidents.MAX_TEXT, pattern=NOT_BLANK, description="what was found")
    fix: str | None = Field(default=None, max_length=incidents.MAX_TEXT, pattern=_NO_NUL, description="what fixed it")
    by: str = Field(default="api", min_length=1, max_length=200, pattern=_NO_NUL, description="who notes it")

    @field_validator("cause")
    @classmethod
    def _known_cause(cls, cause: str) -> str:
        """A code outside the closed set is FastAPI's 422, like every other invalid field."""
        if cause not in CAUSE_CODES:
            raise ValueError(f"{cause!r} is not a cause code; expected one of {', '.join(sorted(CAUSE_CODES))}")
        return cause


def mount(app: FastAPI, handle: DaemonHandle, *, auth: Sequence[Depends], token: Callable[[], str | None]) -> None:
    """Add the diagnosis and incident routes; ``auth`` guards the JSON write, ``token()`` the form's field."""
    guarded: dict[int | str, dict[str, Any]] = {401: {"model": schemas.Problem}, 403: {"model": schemas.Problem}}
    missing: dict[int | str, dict[str, Any]] = {404: {"model": schemas.Problem}}

    @app.get("/api/v1/runs/{run_id}/diagnosis", responses=missing, tags=["diagnosis"])
    def run_diagnosis(run_id: RunId) -> JSONResponse:
        """The run's stored diagnosis (hypotheses, experiments) and the incidents similar to it now."""
        if handle.store.run(run_id) is None:
            raise HTTPException(404, f"no run {run_id} in the history")
        document = incidents.diagnosis(handle.store, run_id)
        if document is None:  # the run exists, nobody diagnosed it: say how, and still offer incidents
            hint = f"not diagnosed: run `onnxmon diagnose MODEL --run {run_id}` or set daemon.diagnose_on_fail"
            document = {"run_id": run_id, "hypotheses": [], "experiments": [], "notes": [hint]}
        body = {**document, "diagnosed": bool(document.get("hypotheses")), "similar_incidents": similar(handle, run_id)}
        return JSONResponse(schemas.json_safe(body))

    @app.get("/api/v1/runs/{run_id}/similar-incidents", responses=missing, tags=["diagnosis"])
    def run_similar(run_id: RunId) -> JSONResponse:
        """The incidents whose signature is like this run's, best first (no diagnosis needed)."""
        if handle.store.run(run_id) is None:
            raise HTTPException(404, f"no run {run_id} in the history")
        return JSONResponse(schemas.json_safe(similar(handle, run_id)))

    @app.get("/api/v1/incidents", tags=["diagnosis"])
    def list_incidents(model: Annotated[str | None, Query(max_length=200)] = None) -> JSONResponse:
        """Every incident noted, newest first."""
        return JSONResponse(schemas.json_safe([i.to_dict() for i in incidents.incidents(handle.store, model=model)]))

    @app.get("/api/v1/incidents/{incident_id}", responses=missing, tags=["diagnosis"])
    def show_incident(incident_id: RunId) -> JSONResponse:
        """One incident with the signature it is matched by."""
        record = incidents.incident(handle.store, incident_id)
        if record is None:
            raise HTTPException(404, f"no incident {incident_id}")
        return JSONResponse(schemas.json_safe(record.to_dict()))

    @app.post(
        "/api/v1/runs/{run_id}/incidents",
        dependencies=list(auth),
        status_code=201,
        responses=guarded | missing | {400: {"model": schemas.Problem}},
        tags=["diagnosis"],
    )
    def note_incident(run_id: RunId, body: IncidentIn) -> JSONResponse:
        """Note an incident on a run: its cause, what was found, the fix; matched to later failures."""
        try:
            record = note(handle, run_id, body)
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from None
        except MonitorError as exc:
            raise HTTPException(400, str(exc)) from None
        return JSONResponse(schemas.json_safe(record.to_dict()), status_code=201)

    @app.post("/runs/{run_id}/incidents", include_in_schema=False, response_model=None)
    async def incident_form(run_id: str, request: Request) -> Response:
        raw = bytearray()
        async for chunk in request.stream():  # bounded while reading: a cut form would store a cut text
            raw += chunk
            if len(raw) > _MAX_FORM:
                too_big = f"the form is over {_MAX_FORM // 1024} KiB; text and fix hold {incidents.MAX_TEXT} characters"
                return HTMLResponse(error_page(413, "Not noted", too_big), status_code=413)
        body = raw.decode("utf-8", errors="replace")
        form = {key: values[0] for key, values in parse_qs(body, keep_blank_values=True).items()}
        number = params.page_id(run_id)
        expected = token()
        if expected is None:
            disabled = "mutating calls are disabled: set api.token or api.token_file in the config"
            return HTMLResponse(error_page(403, "Not allowed", disabled), status_code=403)
        if not hmac.compare_digest(form.get("token", "").encode(), expected.encode()):
            return HTMLResponse(
                error_page(
                    401,
                    "Not allowed",
                    "missing or wrong token: the API token (api.token) is needed to note an incident",
                ),
                status_code=401,
            )
        try:
            fields = IncidentIn(
                cause=form.get("cause", ""),
                text=form.get("text", ""),
                fix=form.get("fix") or None,
                by=form.get("by") or "web",
            )
            note(handle, number, fields)
        except LookupError as exc:
            return HTMLResponse(error_page(404, "Not found", str(exc)), status_code=404)
        except (MonitorError, ValueError) as exc:
            return HTMLResponse(error_page(422, "Not noted", str(exc).splitlines()[0][:500]), status_code=422)
        return RedirectResponse(f"/runs/{number}#incidents", status_code=303)


def note(handle: DaemonHandle, run_id: int, body: IncidentIn) -> incidents.IncidentRecord:
    """Record the incident with the run's signature; ``LookupError`` for an unknown run."""
    signature = incidents.signature_of(handle.store, run_id) if 1 <= run_id <= MAX_ID else None
    if signature is None:
        raise LookupError(f"no run {run_id} in the history")
    return incidents.record_incident(
        handle.store, run_id, cause=body.cause, text=body.text, fix=body.fix, by=body.by, signature=signature
    )


def similar(handle: DaemonHandle, run_id: int) -> list[dict[str, Any]]:
    """Incidents similar to the run (other than ones noted on the run itself), best first."""
    return incidents.similar_to_run(handle.store, run_id)
