"""The daemon's HTTP API: ``/metrics``, health and readiness, and the read-only history under ``/api/v1``.

``create_app(handle)`` builds a FastAPI app over a ``DaemonHandle`` (the daemon, or a test's
small real implementation). Reads come from the store and the baselines on disk; three calls
change something (run a check now, promote a baseline, reload the config) and need
``Authorization: Bearer <token>`` where the token is ``api.token`` or the content of
``api.token_file``, read at each request so a rotated secret works at once. No token configured
means those calls are disabled (403); a wrong or missing one is refused (401), from the request
head before any body is read; bodies are bounded (``gate.py``).

Errors are JSON ``{"detail": ...}``: 404 for an unknown model, run, baseline or environment,
422 for bad parameters (FastAPI's validation), 503 when the store is unreachable, and a generic
500 for anything else (the traceback goes to the log, never into a response). Non-finite
numbers are encoded as the strings ``"Infinity"``, ``"-Infinity"`` and ``"NaN"`` (see
``schemas``; the rule is ``monitor.jsonsafe``, docs/json.md).
"""

from __future__ import annotations

import errno
import hmac
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.routing import Match, Route

from monitor import __version__, bounded, jsonsafe
from monitor.api import environments, fleet, gate, incidents, index, params, schemas, traffic, web
from monitor.api.environments import HEX_PREFIX, NAME
from monitor.api.guard import ErrorGuard, internal_error, invalid_request
from monitor.api.handle import DaemonHandle
from monitor.config.settings import Settings
from monitor.errors import BusyError, MonitorError
from monitor.files import baselines
from monitor.sinks.prometheus.render import render
from monitor.store import pick_latest

log = logging.getLogger(__name__)
_MAX_TOKEN_FILE = 64 * 1024  # a bearer token is one short line; a longer file is a mistake, never cut to a prefix

ModelName = Annotated[str, PathParam(pattern=NAME, max_length=200, description="a model name from the config")]
Limit = Annotated[int, Query(ge=1, le=1000, description="newest first, at most this many")]
_bearer = HTTPBearer(auto_error=False, description="api.token or the content of api.token_file")
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": schemas.Problem}}
_METRICS_TYPES: dict[str, Any] = {"text/plain": {}, "application/openmetrics-text": {}}


def create_app(handle: DaemonHandle, *, body_timeout_s: float = gate.BODY_TIMEOUT_S) -> FastAPI:
    """The HTTP app over ``handle``; the OpenAPI document is at ``/openapi.json``.

    No ``/docs`` or ``/redoc``: FastAPI's pages load Swagger UI and ReDoc from a CDN, which the
    pages' Content-Security-Policy forbids and an air-gapped cluster cannot reach. Point any
    OpenAPI viewer at ``/openapi.json`` instead.
    """
    app = FastAPI(
        title="onnxmon",
        version=__version__,
        description=__doc__,
        docs_url=None,
        redoc_url=None,
        responses={500: {"model": schemas.Problem}, 503: {"model": schemas.Problem}},
    )
    app.add_middleware(ErrorGuard, on_error=lambda exc: internal_error(handle, exc))
    app.add_exception_handler(RequestValidationError, invalid_request)
    _health_routes(app, handle)
    _read_routes(app, handle)
    fleet.mount(app, handle)
    authorized = _write_routes(app, handle)
    # Outermost (added last): the token and the body's size are checked before anything reads the body.
    guarded = [
        r for r in app.routes if isinstance(r, APIRoute) and any(d.dependency is authorized for d in r.dependencies)
    ]
    app.add_middleware(
        gate.RequestGate,
        needs_token=lambda scope: any(route.matches(scope)[0] is Match.FULL for route in guarded),
        takes_body=lambda scope: scope["method"] not in ("GET", "HEAD") and _routed(app, scope),
        token=lambda: _configured_token(handle.settings),
        body_timeout_s=body_timeout_s,
    )
    index.mount(app)  # lists the routes at each request, whatever is mounted after it
    web.mount(app, handle)  # the status page (HTML) at / and beside the API
    return app


# --- health and metrics --------------------------------------------------------------------------


def _health_routes(app: FastAPI, handle: DaemonHandle) -> None:
    @app.get("/metrics", response_class=Response, responses={200: {"content": _METRICS_TYPES}}, tags=["health"])
    def metrics(request: Request) -> Response:
        """Prometheus exposition of every onnxmon series (OpenMetrics when the scraper asks for it)."""
        body, content_type = render(handle.registry, request.headers.get("accept", ""))
        return Response(body, media_type=content_type)

    @app.get("/healthz", tags=["health"])
    def healthz() -> schemas.Health:
        """The process is alive (always 200)."""
        return schemas.Health()

    @app.get("/readyz", responses={503: {"model": schemas.Readiness}}, tags=["health"])
    def readyz() -> JSONResponse:
        """200 when config, store and scheduler are all ready, else 503 naming what is not."""
        try:
            checks = {name: bool(ok) for name, ok in handle.readiness().items()}
        except Exception:
            log.exception("readiness check raised")
            checks = {"readiness_check": False}
        failed = sorted(name for name, ok in checks.items() if not ok)
        info_of = getattr(handle, "readiness_info", None)  # optional: numbers such as results spooled
        info = dict(info_of()) if callable(info_of) else {}
        reasons_of = getattr(handle, "readiness_reasons", None)  # optional: why each failing check fails
        reasons = {k: str(v) for k, v in dict(reasons_of()).items() if k in failed} if callable(reasons_of) else {}
        body = schemas.Readiness(ready=not failed, checks=checks, failed=failed, info=info, reasons=reasons)
        return JSONResponse(body.model_dump(), status_code=503 if failed else 200)


# --- reads ---------------------------------------------------------------------------------------


def _read_routes(app: FastAPI, handle: DaemonHandle) -> None:
    @app.get("/api/v1/models", tags=["history"])
    def models(node: Annotated[str | None, Query(max_length=253)] = None) -> list[schemas.ModelSummary]:
        """Every configured model with its last verdict (overall, or on ``node``), per-node status, active baseline."""
        settings = handle.settings
        records = handle.store.latest_per_model()
        if node is not None:
            records = [r for r in records if r.node == node]
        latest = pick_latest(records, None)
        per_node: dict[str, list[schemas.NodeStatus]] = {}
        for record in records:
            per_node.setdefault(record.model, []).append(
                schemas.NodeStatus(
                    node=record.node,
                    last_run_id=record.id,
                    last_run_at=record.finished_at,
                    last_verdict=record.verdict.value,
                )
            )
        summaries = []
        for model in settings.models:
            last = latest.get(model.name)
            summaries.append(
                schemas.ModelSummary(
                    name=model.name,
                    benchset=model.benchset,
                    providers=[p.name for p in model.providers],
                    active_baseline_id=_active_id(settings, model.name),
                    last_run_id=last.id if last is not None else None,
                    last_run_at=last.finished_at if last is not None else None,
                    last_verdict=last.verdict.value if last is not None else None,
                    last_node=last.node if last is not None else None,
                    nodes=per_node.get(model.name, []),
                )
            )
        return summaries

    @app.get("/api/v1/models/{name}/runs", responses=_NOT_FOUND, tags=["history"])
    def runs(
        name: ModelName,
        limit: Limit = 50,
        since: params.Since = None,
        node: Annotated[str | None, Query(max_length=253)] = None,
        candidates: Annotated[
            bool, Query(description="the rehearsals' candidate runs (onnxmon rehearse) instead of production's")
        ] = False,
    ) -> list[schemas.RunSummary]:
        """Runs of a model, newest first (without outputs; ``/api/v1/runs/{id}`` has them)."""
        _known_model(handle, name)
        found = handle.store.runs(name, since=_utc(since), node=node, limit=limit, candidates=candidates)
        return [schemas.RunSummary.of(r) for r in found]

    @app.get("/api/v1/runs/{run_id}", responses=_NOT_FOUND, tags=["history"])
    def run(run_id: params.Id) -> schemas.RunDetail:
        """One run: every output's metrics, reasons, attribution, and the diff against the baseline's environment."""
        record = handle.store.run(run_id)
        if record is None:
            raise HTTPException(404, f"no run {run_id} in the history")
        return schemas.RunDetail.build(record, environments.run_env_diff(handle, record))

    @app.get(
        "/api/v1/models/{name}/baselines", responses=_NOT_FOUND | {409: {"model": schemas.Problem}}, tags=["baselines"]
    )
    def model_baselines(name: ModelName) -> list[schemas.BaselineOut]:
        """Baselines of a model, oldest first: on disk (the truth for which is active) and in the store."""
        _known_model(handle, name)
        root = handle.settings.store.baselines_dir
        active = _active_id(handle.settings, name)
        recorded = {b.baseline_id: b for b in handle.store.baseline_history(name)}
        try:
            on_disk = baselines.list_baselines(root, name)
        except MonitorError as exc:  # a damaged baseline.json: say which, not a bare 500
            raise HTTPException(409, str(exc)) from None
        listed = [schemas.baseline_out(b.meta, active=b.id == active, record=recorded.pop(b.id, None)) for b in on_disk]
        listed += [_store_only_baseline(r, active) for r in recorded.values()]
        return listed

    @app.get(
        "/api/v1/environments/diff", responses=_NOT_FOUND | {409: {"model": schemas.Problem}}, tags=["environments"]
    )
    def environments_diff(
        a: Annotated[
            str, Query(min_length=1, max_length=200, description="fingerprint (prefix), baseline id or 'current'")
        ],
        b: Annotated[
            str, Query(min_length=1, max_length=200, description="fingerprint (prefix), baseline id or 'current'")
        ] = "current",
    ) -> schemas.EnvDiff:
        """What differs from ``a`` to ``b`` (default ``current``, the daemon's environment now).

        Each is a fingerprint, a unique prefix of one, a baseline id, or ``current``."""
        fp_a, snap_a = environments.resolve_environment(handle, a)
        fp_b, snap_b = environments.resolve_environment(handle, b)
        return environments.diff(fp_a, snap_a, fp_b, snap_b)

    @app.get(
        "/api/v1/environments/{fingerprint}",
        responses=_NOT_FOUND | {409: {"model": schemas.Problem}},
        tags=["environments"],
    )
    def environment(fingerprint: Annotated[str, PathParam(pattern=HEX_PREFIX)]) -> schemas.EnvironmentOut:
        """One environment snapshot by fingerprint or a unique prefix of it (4 hex digits at least)."""
        return schemas.EnvironmentOut.of(environments.find_environment(handle, fingerprint))

    @app.get("/api/v1/events", tags=["history"])
    def events(
        model: Annotated[str | None, Query(pattern=NAME, max_length=200)] = None,
        since: params.Since = None,
        limit: Limit = 100,
        node: Annotated[str | None, Query(max_length=253)] = None,
    ) -> list[schemas.EventOut]:
        """State changes (verdict, environment, model, baselines, provider fallback), newest first."""
        found = handle.store.events(model=model, since=_utc(since), node=node, limit=limit)
        return [schemas.EventOut.of(e) for e in found]


# --- writes --------------------------------------------------------------------------------------


def _write_routes(app: FastAPI, handle: DaemonHandle) -> Callable[..., None]:
    """Add the mutating routes; returns their token dependency (``gate.RequestGate`` checks it before the body)."""

    def authorized(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
        expected = _configured_token(handle.settings)
        if expected is None:
            raise HTTPException(403, gate.DISABLED)
        given = credentials.credentials if credentials is not None else ""
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise HTTPException(401, gate.WRONG_TOKEN, headers={"WWW-Authenticate": "Bearer"})

    guarded: dict[int | str, dict[str, Any]] = {401: {"model": schemas.Problem}, 403: {"model": schemas.Problem}}
    auth = [Depends(authorized)]

    busy: dict[int | str, dict[str, Any]] = {
        429: {"model": schemas.Problem, "description": "every check worker is busy"}
    }
    incidents.mount(app, handle, auth=auth, token=lambda: _configured_token(handle.settings))
    traffic.mount(app, handle, auth=auth)

    @app.post("/api/v1/models/{name}/check", dependencies=auth, responses=guarded | _NOT_FOUND | busy, tags=["actions"])
    def check_now(name: ModelName) -> schemas.CheckOut:
        """Run one check of the model now (isolated, recorded like a scheduled run) and return its result."""
        if name not in {m.name for m in handle.settings.models}:
            raise HTTPException(404, f"no model {name!r} in the config; models are {_model_names(handle)}")
        try:
            result = handle.run_now(name)
        except BusyError as exc:
            raise HTTPException(429, str(exc), headers={"Retry-After": "5"}) from None
        record = schemas.json_safe(jsonsafe.with_timestamps(result.to_dict()))
        return schemas.CheckOut(model=result.model, verdict=result.verdict.value, result=record)

    @app.post(
        "/api/v1/baselines/{baseline_id}/promote",
        dependencies=auth,
        responses=guarded | _NOT_FOUND | {507: {"model": schemas.Problem, "description": "the disk is full"}},
        tags=["actions"],
    )
    def promote(
        baseline_id: Annotated[str, PathParam(pattern=NAME, max_length=200)],
        by: Annotated[str, Query(min_length=1, max_length=100, description="who promotes, for the log")] = "api",
    ) -> schemas.Promotion:
        """Make a baseline the active one of its model; 507 when the disk is full (nothing changed)."""
        try:
            model = handle.promote(baseline_id, by)
        except baselines.NotWritten as exc:  # a full disk (507) or another write error: the old one stays active
            raise HTTPException(507 if exc.disk_full else 500, str(exc)) from None
        except MonitorError as exc:
            raise HTTPException(404, str(exc)) from None
        return schemas.Promotion(baseline_id=baseline_id, model=model, promoted_by=by)

    @app.post("/-/reload", dependencies=auth, responses={**guarded, 409: {"model": schemas.Reloaded}}, tags=["actions"])
    def reload() -> JSONResponse:
        """Re-read the config file; 409 when it is invalid (the previous config stays in force)."""
        if handle.reload():
            return JSONResponse(schemas.Reloaded(reloaded=True, detail="configuration reloaded").model_dump())
        body = schemas.Reloaded(
            reloaded=False, detail="new configuration is invalid; kept the previous one (see the log)"
        )
        return JSONResponse(body.model_dump(), status_code=409)

    return authorized


# --- helpers -------------------------------------------------------------------------------------


def _configured_token(settings: Settings) -> str | None:
    """The bearer token, read now (a rotated token file works without a restart); None when unset."""
    if settings.api.token:
        return settings.api.token
    if settings.api.token_file is not None:
        path = Path(settings.api.token_file)
        try:
            # Regular files only, bounded: a FIFO would block this request's thread, a long file is no token.
            token = bounded.read_bytes(path, limit=_MAX_TOKEN_FILE).decode("utf-8").strip()
            if "\n" in token or "\r" in token:
                raise OSError(errno.EINVAL, "more than one line")
        except UnicodeDecodeError:
            token, why = "", "not UTF-8 text"
        except OSError as exc:
            token, why = "", str(exc.strerror)
        else:
            why = ""
        if why:
            log.warning("api.token_file %s cannot be read (%s): mutating calls disabled", path, why)
            return None
        return token or None
    return None


def _routed(app: FastAPI, scope: Any) -> bool:
    """Some route answers this method on this path (the gate reads a body only for one)."""
    return any(isinstance(r, Route) and r.matches(scope)[0] is Match.FULL for r in app.router.routes)


def _model_names(handle: DaemonHandle) -> list[str]:
    return [m.name for m in handle.settings.models]


def _known_model(handle: DaemonHandle, name: str) -> None:
    """404 unless ``name`` is configured or has history (a model removed from the config keeps its past)."""
    if name in _model_names(handle) or name in handle.store.models():
        return
    raise HTTPException(404, f"no model {name!r} in the config or the history; models are {_model_names(handle)}")


def _active_id(settings: Settings, model: str) -> str | None:
    try:
        return baselines.active_id(settings.store.baselines_dir, model)
    except (OSError, MonitorError):  # an unreadable ACTIVE file: no active baseline to report
        return None


def _utc(when: datetime | None) -> datetime | None:
    """``when`` in UTC (naive means UTC); ``params.Since`` has already clamped what UTC cannot hold."""
    if when is None:
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _store_only_baseline(record: Any, active: str | None) -> schemas.BaselineOut:
    return schemas.BaselineOut(
        baseline_id=record.baseline_id,
        model=record.model,
        created_at=jsonsafe.timestamp(record.created_at),
        source=record.source,
        active=record.baseline_id == active,
        model_sha256=record.model_sha256,
        benchset=record.benchset,
        environment_fingerprint=record.environment_fingerprint,
        sample_count=None,
        outputs=[],
        promoted_at=record.promoted_at,
        promoted_by=record.promoted_by,
        recorded_in_store=True,
    )
