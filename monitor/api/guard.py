"""The API's last line of defence: an unexpected exception becomes a bare JSON 500 (or 503), never a traceback.

The traceback goes to the log; the response says only what a client can act on. When the store
does not answer, the cause is almost surely the store, so the answer is 503 "retry later".
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from monitor.store import StoreUnavailable
from monitor.store.text import storable_json

if TYPE_CHECKING:
    from monitor.api.handle import DaemonHandle

log = logging.getLogger("monitor.api.app")


def internal_error(handle: DaemonHandle, exc: BaseException | None = None) -> JSONResponse:
    """503 for an outage (``StoreUnavailable``, raised by the store at its boundary: no ping needed), else 500."""
    if isinstance(exc, StoreUnavailable) or not handle.store.ping():
        return JSONResponse({"detail": "the history store is unreachable; retry later"}, status_code=503)
    return JSONResponse({"detail": "internal error; the daemon log has the details"}, status_code=500)


async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 body, with the echoed input made encodable: a lone surrogate in a request made it a 500."""
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"detail": storable_json(jsonable_encoder(exc.errors()))}, status_code=422)


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class ErrorGuard:
    """ASGI middleware: an unexpected exception is logged with its traceback and answered with a bare JSON 500/503."""

    def __init__(
        self,
        app: Callable[[Scope, Receive, Send], Awaitable[None]],
        on_error: Callable[[BaseException], JSONResponse],
    ):
        self.app = app
        self.on_error = on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: MutableMapping[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            log.exception("unhandled error in %s %s", scope.get("method"), scope.get("path"))
            if started:
                raise
            response = await run_in_threadpool(self.on_error, exc)
            await response(scope, receive, send)
