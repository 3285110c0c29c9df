"""Serve the API with uvicorn on a background thread, so the main thread keeps the signals.

uvicorn installs its own SIGTERM/SIGINT handlers only when it runs on the main thread; on a
helper thread it leaves them to us, which is what lets SIGTERM first stop the scheduler and
wait for the running check, and only then stop the HTTP server.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn


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
    """Start serving ``api.create_app(handle)``; returns once the socket is listening."""
    from monitor.api import app as api

    app = api.create_app(handle)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="onnxmon-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + wait_s
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not server.started:
        raise OSError(f"HTTP server did not start on {host}:{port} (port in use?)")
    return Server(server, thread)
