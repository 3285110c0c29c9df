"""Real traffic into a benchmark set over HTTP: samples staged, then promoted by a person.

* ``POST /api/v1/benchsets/{benchset}/samples``  one Open Inference Protocol request payload, or one KServe
  request-logger CloudEvent (binary mode: ``ce-*`` headers; structured: ``application/cloudevents+json``);
  bearer token as every mutating call, the body bounded by ``gate.py``. 201 with the sample's digest and
  whether it was a duplicate; 202 for an event that is not a request (the logger's response events);
  400 for a payload that is not a sample of the model's signature; 409 when the set takes no traffic
  (declare it ``imported: true``) or its staging area is full; 507 when the sample could not be written (a
  full disk: nothing staged).
* ``GET  /api/v1/benchsets/{benchset}/samples``  how many samples are staged.
* ``POST /api/v1/benchsets/{benchset}/promote``  the staged samples become the set's next version (201).

The set must be declared (``benchsets: [{name, imported: true}]``) and used by a model, whose signature
every sample is validated against (``files/traffic.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.params import Depends
from fastapi.params import Path as PathParam
from fastapi.responses import JSONResponse

from monitor.api import schemas
from monitor.api.handle import DaemonHandle
from monitor.errors import BenchsetError, ModelError
from monitor.files import signature, traffic
from monitor.files.signature import InputSpec

SetName = Annotated[str, PathParam(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=200)]


def mount(app: FastAPI, handle: DaemonHandle, *, auth: Sequence[Depends]) -> None:
    """Add the traffic routes; ``auth`` guards the two writes."""
    problems: dict[int | str, dict[str, Any]] = {
        code: {"model": schemas.Problem} for code in (400, 401, 403, 404, 409, 507)
    }

    @app.post("/api/v1/benchsets/{benchset}/samples", dependencies=list(auth), responses=problems, tags=["benchsets"])
    async def add_sample(benchset: SetName, request: Request) -> JSONResponse:
        """Stage one sample of real traffic (an OIP request payload or a request-logger CloudEvent)."""
        name = benchset
        spec = _signature(handle, name)
        body = await request.body()
        try:
            sample = traffic.parse_request(body, dict(request.headers))
            if sample is None:
                return JSONResponse({"staged": False, "note": "not an inference request event: ignored"}, 202)
            staged = traffic.stage(_root(handle), name, sample, spec, where=f"a sample for {name!r}")
        except traffic.StagingFull as exc:
            raise HTTPException(409, str(exc)) from None
        except traffic.StagingFailed as exc:  # the disk, not the sample: the sender may retry later
            raise HTTPException(507, str(exc)) from None
        except (BenchsetError, ModelError) as exc:
            raise HTTPException(400, str(exc)) from None
        body_out = {"benchset": name, "digest": staged.digest, "duplicate": staged.duplicate, "staged": staged.count}
        return JSONResponse(body_out, 200 if staged.duplicate else 201)

    @app.get("/api/v1/benchsets/{benchset}/samples", responses=problems, tags=["benchsets"])
    def staged_samples(benchset: SetName) -> JSONResponse:
        """How many samples wait for promotion."""
        name = benchset
        _declared(handle, name)
        files = traffic.staged(_root(handle), name)
        return JSONResponse({"benchset": name, "staged": len(files), "bytes": traffic.staged_bytes(files)})

    @app.post("/api/v1/benchsets/{benchset}/promote", dependencies=list(auth), responses=problems, tags=["benchsets"])
    def promote(benchset: SetName) -> JSONResponse:
        """The staged samples become the set's next version, versioned and checksummed."""
        name = benchset
        _signature(handle, name)
        try:
            made = traffic.promote(_root(handle), name)
        except BenchsetError as exc:
            raise HTTPException(409, str(exc)) from None
        body = {"benchset": made.name, "version": made.version, "samples": len(made), "sha256": made.sha256}
        return JSONResponse(body, 201)


def _root(handle: DaemonHandle) -> Any:
    return handle.settings.store.benchsets_dir


def _declared(handle: DaemonHandle, name: str) -> Any:
    for declared in handle.settings.benchsets:
        if declared.name == name:
            return declared
    raise HTTPException(404, f"no benchset {name!r} in the config")


def _signature(handle: DaemonHandle, name: str) -> list[InputSpec]:
    """The signature of a model using set ``name``; 409 when the set takes no traffic."""
    if not _declared(handle, name).imported:
        raise HTTPException(409, f"benchset {name!r} is not declared 'imported: true': traffic cannot be added to it")
    users = [m for m in handle.settings.models if m.benchset == name]
    if not users:
        raise HTTPException(409, f"no model uses benchset {name!r}: no signature to validate samples against")
    try:
        return signature.model_signature(users[0].path)
    except ModelError as exc:
        raise HTTPException(409, str(exc)) from None
