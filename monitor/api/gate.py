"""The API's front door: a request is authenticated and its body bounded before anything reads the body.

FastAPI reads (and parses) a route's JSON body before it runs the route's dependencies, so the
bearer-token check of a mutating call came *after* the whole body was in memory: a 1.5 GB body
POSTed without a token took the daemon from 147 MB to 3.08 GB (issue 42). This ASGI middleware
runs first, from the request head alone:

0. a request head over ``MAX_HEAD_BYTES`` or with more than ``MAX_HEADERS`` fields is 431 (h11 bounds
   only a head still incomplete, so one that came in a single read could reach 256 KiB);
1. a route that needs the token (``needs_token``) without the right ``Authorization: Bearer``
   header is answered 403 (no token configured) or 401 at once, the body unread;
2. a ``Content-Length`` over ``max_body`` is 413 at once, the body unread;
3. any other body (``Content-Length`` or chunked) is read here, at most ``max_body`` bytes (413
   past it) within ``body_timeout_s`` (408 past it), and handed on to the app.

An answer given with a body left unread says ``Connection: close``, so the server drops the
connection instead of reading the rest. The request head's deadline is the server's (``server.py``).
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi.concurrency import run_in_threadpool

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY_BYTES = 1 << 20
"""The largest request body accepted (an incident's text and fix, escaped, are under 256 KiB)."""
MAX_HEAD_BYTES = 32 * 1024
"""The largest request line and headers together (nginx's default buffers hold 32 KiB)."""
MAX_HEADERS = 100
"""The most header fields in one request (Apache's ``LimitRequestFields``)."""
BODY_TIMEOUT_S = 60.0
"""The whole body must arrive within this (1 MiB at 17 KB/s): a body that trickles is cut, 408."""

DISABLED = (
    "mutating calls are disabled: set api.token or api.token_file in the config"
    " (or ONNXMON_API__TOKEN / ONNXMON_API__TOKEN_FILE) and send 'Authorization: Bearer <token>'"
)
WRONG_TOKEN = "missing or wrong bearer token"


def refusal(expected: str | None, authorization: str) -> tuple[int, str] | None:
    """Why ``authorization`` (the header's value) does not carry ``expected``: (403|401, detail), or None."""
    if expected is None:
        return 403, DISABLED
    scheme, _, given = authorization.partition(" ")
    given = given.strip() if scheme.lower() == "bearer" else ""
    if not hmac.compare_digest(given.encode(), expected.encode()):
        return 401, WRONG_TOKEN
    return None


class RequestGate:
    """ASGI middleware: authentication and body bounds from the request head, before any body is read."""

    def __init__(
        self,
        app: App,
        *,
        needs_token: Callable[[Scope], bool],
        token: Callable[[], str | None],
        max_body: int = MAX_BODY_BYTES,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ) -> None:
        self.app = app
        self.needs_token = needs_token
        self.token = token
        self.max_body = max_body
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        fields = scope.get("headers", [])
        size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        size += sum(len(name) + len(value) + 4 for name, value in fields)
        if size > MAX_HEAD_BYTES or len(fields) > MAX_HEADERS:
            too_many = f"the request head is over {MAX_HEAD_BYTES} bytes or {MAX_HEADERS} fields"
            await _answer(send, 431, too_many, close=True)
            return
        headers = _headers(scope)
        length, chunked = headers.get(b"content-length"), b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        if length is not None and not length.isdigit():  # the server refuses these first; never trust that
            await _answer(send, 400, f"Content-Length {length[:40]!r} is not a number of bytes", close=True)
            return
        has_body = chunked or (length is not None and int(length) > 0)
        if self.needs_token(scope):
            expected = await run_in_threadpool(self.token)  # a token file is read at each request
            refused = refusal(expected, headers.get(b"authorization", b"").decode("latin-1"))
            if refused is not None:
                extra = [(b"www-authenticate", b"Bearer")] if refused[0] == 401 else []
                await _answer(send, *refused, close=has_body, extra=extra)
                return
        if length is not None and int(length) > self.max_body:
            await _answer(send, 413, self._too_big(), close=True)
            return
        if not has_body:
            await self.app(scope, receive, send)
            return
        try:
            body = await asyncio.wait_for(self._read(receive), self.body_timeout_s)
        except TimeoutError:
            await _answer(send, 408, f"the request body did not arrive within {self.body_timeout_s:g}s", close=True)
            return
        except _TooBig:
            await _answer(send, 413, self._too_big(), close=True)
            return
        except _Disconnected:
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes:
        """The whole body; ``_TooBig`` past ``max_body``, ``_Disconnected`` when the client goes away."""
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise _TooBig
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)

    def _too_big(self) -> str:
        return f"the request body is over {self.max_body} bytes, the most this API accepts"


class _TooBig(Exception):
    pass


class _Disconnected(Exception):
    pass


def _headers(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by lower-case name; a repeated one keeps its first value."""
    found: dict[bytes, bytes] = {}
    for name, value in scope.get("headers", []):
        found.setdefault(bytes(name).lower(), bytes(value).strip())
    return found


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` that gives ``body`` first, then whatever the server says (a disconnect)."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _answer(
    send: Send, status: int, detail: str, *, close: bool, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    """A JSON ``{"detail": ...}`` answer; ``close``: the server drops the connection after it (body unread)."""
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += extra or []
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
