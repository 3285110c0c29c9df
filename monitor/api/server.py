"""Serve the API with uvicorn on a background thread, so the main thread keeps the signals.

uvicorn installs its own SIGTERM/SIGINT handlers only when it runs on the main thread; on a
helper thread it leaves them to us, which is what lets SIGTERM first stop the scheduler and
wait for the running check, and only then stop the HTTP server.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from typing import Any

import uvicorn

from monitor.errors import ConfigError


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


def start(handle: Any, host: str, port: int, *, wait_s: float = 15.0) -> Server:
    """Start serving ``app.create_app(handle)``; returns once the socket is listening.

    The socket is bound here, before uvicorn's thread starts, so a port in use or a host that does
    not resolve is a ``ConfigError`` naming the address (one line, exit 2) rather than a thread that
    dies quietly and a generic "did not start".
    """
    from monitor.api import app

    sock = listen(host, port)
    application = app.create_app(handle)
    access = bool(getattr(getattr(getattr(handle, "settings", None), "api", None), "access_log", False))
    # log_config=None: uvicorn's loggers propagate to onnxmon's handler (text or JSON), none of its own.
    config = uvicorn.Config(
        application, host=host, port=port, log_level="warning", access_log=access, lifespan="off", log_config=None
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
