"""The API's front door: a request is authenticated and its body bounded before anything reads the body.

FastAPI reads (and parses) a route's JSON body before it runs the route's dependencies, so the
bearer-token check of a mutating call came *after* the whole body was in memory: a 1.5 GB body
POSTed without a token took the daemon from 147 MB to 3.08 GB (issue 42). This ASGI middleware
runs first, from the request head alone:

0. a request head over ``MAX_HEAD_BYTES`` or with more than ``MAX_HEADERS`` fields is 431 (h11 bounds
   only a head still incomplete, so one that came in a single read could reach 256 KiB);
1. a route that needs the token (``needs_token``) without the right ``Authorization: Bearer``
   header is answered 403 (no token configured) or 401 at once, the body unread;
2. a ``Content-Length`` over ``max_body`` is 413 at once, the body unread (as are a length that is
   not a number and a length beside ``Transfer-Encoding``: 400);
3. a body sent to a route that takes none (``takes_body``: a GET, a 404, a 405) is never read;
4. any other body (``Content-Length`` or chunked) is read here, at most ``max_body`` bytes (413
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
        takes_body: Callable[[Scope], bool],
        token: Callable[[], str | None],
        max_body: int = MAX_BODY_BYTES,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ) -> None:
        """``needs_token``: the request's route wants the bearer token; ``takes_body``: its route reads a body."""
        self.app = app
        self.needs_token = needs_token
        self.takes_body = takes_body
        self.token = token
        self.max_body = max_body
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        length = headers.get(b"content-length")
        has_body = b"transfer-encoding" in headers or (length is not None and length != b"0")
        refused = _malformed(scope, headers)
        if refused is None and self.needs_token(scope):
            expected = await run_in_threadpool(self.token)  # a token file is read at each request
            refused = refusal(expected, headers.get(b"authorization", b"").decode("latin-1"))
        if refused is None and length is not None and int(length) > self.max_body:
            refused = 413, self._too_big()
        if refused is not None:
            extra = [(b"www-authenticate", b"Bearer")] if refused[0] == 401 else []
            await _answer(send, *refused, close=has_body or refused[0] in (400, 413, 431), extra=extra)
        elif not has_body:
            await self.app(scope, receive, send)
        elif not self.takes_body(scope):  # a 404, a 405, a GET: answered without reading what was sent
            await self.app(scope, _no_body(receive), _closing(send))
        else:
            await self._with_body(scope, receive, send)

    async def _with_body(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Read the body (bounded in size and time), then hand it to the app."""
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


def _malformed(scope: Scope, headers: dict[bytes, bytes]) -> tuple[int, str] | None:
    """A head too big, or a body's framing the server should have refused (never trust that it did)."""
    fields = scope.get("headers", [])
    size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
    size += sum(len(name) + len(value) + 4 for name, value in fields)
    if size > MAX_HEAD_BYTES or len(fields) > MAX_HEADERS:
        return 431, f"the request head is over {MAX_HEAD_BYTES} bytes or {MAX_HEADERS} fields"
    length = headers.get(b"content-length")
    if length is not None and not length.isdigit():
        return 400, f"Content-Length {length[:40]!r} is not a number of bytes"
    if length is not None and b"transfer-encoding" in headers:  # which one frames the body? (request smuggling)
        return 400, "both Content-Length and Transfer-Encoding: send one"
    return None


def _headers(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by lower-case name; a repeated one keeps its first value."""
    found: dict[bytes, bytes] = {}
    for name, value in scope.get("headers", []):
        found.setdefault(bytes(name).lower(), bytes(value).strip())
    return found


def _no_body(receive: Receive) -> Receive:
    """``receive`` for a route that takes no body: an empty one, then whatever the server says."""
    return _replay(b"", receive)


def _closing(send: Send) -> Send:
    """``send`` that asks the server to close the connection after the answer (the body sent was never read)."""

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
        await send(message)

    return closing


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
