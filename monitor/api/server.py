"""Serve the API with uvicorn on a background thread, so the main thread keeps the signals.

uvicorn installs its own SIGTERM/SIGINT handlers only when it runs on the main thread; on a
helper thread it leaves them to us, which is what lets SIGTERM first stop the scheduler and
wait for the running check, and only then stop the HTTP server.

The HTTP/1.1 parser is h11 (always, whatever else is installed), with a deadline for each request
head (``HEAD_TIMEOUT_S``): uvicorn has none, so a client that opened a connection and sent half a
request line, or a byte every few seconds, held it for ever (slowloris). h11 refuses (400) a head
still incomplete past ``gate.MAX_HEAD_BYTES``; the app refuses (431) a complete one over it, and
bounds the body (``gate.py``).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import threading
import time
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from monitor.api import gate
from monitor.errors import ConfigError

HEAD_TIMEOUT_S = 15.0
"""A request's line and headers must arrive within this of their first byte (or of the connection)."""
_TIMED_OUT = b"the request head did not arrive in time"
_REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(_TIMED_OUT), _TIMED_OUT)
)


class Server:
    """A running uvicorn server; ``stop()`` shuts it down gracefully."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def started(self) -> bool:
        return bool(self._server.started)

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)


def start(
    handle: Any,
    host: str,
    port: int,
    *,
    wait_s: float = 15.0,
    head_timeout_s: float = HEAD_TIMEOUT_S,
    body_timeout_s: float = gate.BODY_TIMEOUT_S,
) -> Server:
    """Start serving ``app.create_app(handle)``; returns once the socket is listening.

    The socket is bound here, before uvicorn's thread starts, so a port in use or a host that does
    not resolve is a ``ConfigError`` naming the address (one line, exit 2) rather than a thread that
    dies quietly and a generic "did not start".
    """
    from monitor.api import app

    sock = listen(host, port)
    application = app.create_app(handle, body_timeout_s=body_timeout_s)
    access = bool(getattr(getattr(getattr(handle, "settings", None), "api", None), "access_log", False))
    # log_config=None: uvicorn's loggers propagate to onnxmon's handler (text or JSON), none of its own.
    config = uvicorn.Config(
        application,
        host=host,
        port=port,
        http=_deadline_protocol(head_timeout_s),
        h11_max_incomplete_event_size=gate.MAX_HEAD_BYTES,
        ws="none",  # no WebSocket route: an upgrade request is plain HTTP, no second parser to attack
        log_level="warning",
        access_log=access,
        lifespan="off",
        log_config=None,
    )
    if access:  # uvicorn set its loggers to warning; the access lines are INFO
        logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="onnxmon-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + wait_s
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not server.started:
        server.should_exit = True
        sock.close()
        raise ConfigError(f"api: the HTTP server did not start on {host}:{port} within {wait_s:g}s")
    return Server(server, thread)


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv4 or IPv6); ``ConfigError`` saying why it cannot be had."""
    if not 0 <= port <= 65535:
        raise ConfigError(f"api.port: {port} is not a TCP port (0-65535)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(f"api.host: {host!r} does not resolve to an address to listen on ({exc})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        why = "the port is already in use" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
        raise ConfigError(f"api: cannot listen on {host}:{port}: {why}") from None
    sock.set_inheritable(False)
    return sock


class _HeadDeadline(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head (from the connection or its first byte).

    Past it, a connection whose head is still incomplete is answered 408 (closed quietly if it sent
    nothing). Between requests of a kept-alive connection uvicorn's own keep-alive timeout applies.
    """

    head_timeout_s = HEAD_TIMEOUT_S
    _head_timer: asyncio.TimerHandle | None = None
    _head_bytes = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm()

    def data_received(self, data: bytes) -> None:
        self._head_bytes = self._head_bytes or bool(data)
        super().data_received(data)
        self._settle()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._head_bytes = bool(self.conn.trailing_data[0])  # a pipelined request already begun
        self._settle()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _settle(self) -> None:
        """Disarm once a head is complete; arm when a new head has begun."""
        if self.conn.their_state is not h11.IDLE or self.transport.is_closing():
            self._disarm()
        elif self._head_bytes and self._head_timer is None:
            self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _expired(self) -> None:
        self._head_timer = None
        if self.conn.their_state is not h11.IDLE or self.transport.is_closing():
            return
        if self._head_bytes:
            self.transport.write(_REQUEST_TIMEOUT)
        self.transport.close()


def _deadline_protocol(head_timeout_s: float) -> type[_HeadDeadline]:
    return type("HeadDeadline", (_HeadDeadline,), {"head_timeout_s": head_timeout_s})
