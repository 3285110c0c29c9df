"""The API's last line of defence: an unexpected exception becomes a bare JSON 500 (or 503), never a traceback.

The traceback goes to the log; the response says only what a client can act on. When the store
does not answer, the cause is almost surely the store, so the answer is 503 "retry later".
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

if TYPE_CHECKING:
    from monitor.api.handle import DaemonHandle

log = logging.getLogger("monitor.api.app")


# DB-API outage classes (SQLAlchemy wraps the driver's under the same names; only store/ imports it),
# and the store's own: such an error answers 503 at once, without waiting on a ping of a hung database.
_OUTAGES = frozenset({"OperationalError", "InterfaceError", "DisconnectionError", "StoreUnavailable"})


def internal_error(handle: DaemonHandle, exc: BaseException | None = None) -> JSONResponse:
    outage = exc is not None and any(kind.__name__ in _OUTAGES for kind in type(exc).__mro__)
    if outage or not handle.store.ping():
        return JSONResponse({"detail": "the history store is unreachable; retry later"}, status_code=503)
    return JSONResponse({"detail": "internal error; the daemon log has the details"}, status_code=500)


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
