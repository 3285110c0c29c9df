"""A bare HTTP/1.1 server on loopback for endpoint tests that need answers no real server gives.

``serve(respond)`` accepts connections on ``127.0.0.1`` (a thread each) and, for every request read
whole (head and ``Content-Length`` body), sends what ``respond(path, connection)`` writes; keep-alive
requests on one connection are answered in turn. It yields the port and stops when the test is done.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator

Respond = Callable[[str, socket.socket], None]


def serve(respond: Respond) -> Iterator[int]:
    """The port of a server answering each request through ``respond``; stops when the generator is closed."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)  # the loop sees ``stop`` soon after the test
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5)
            threading.Thread(target=_connection, args=(conn, respond), daemon=True).start()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()
        thread.join(5)


def _connection(conn: socket.socket, respond: Respond) -> None:
    pending = b""
    with conn, contextlib.suppress(OSError):
        while True:
            while b"\r\n\r\n" not in pending:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                pending += chunk
            head, _, pending = pending.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            fields = (line.partition(":") for line in lines[1:])
            length = next((int(value) for key, _, value in fields if key.lower() == "content-length"), 0)
            while len(pending) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                pending += chunk
            pending = pending[length:]
            respond(lines[0].split(" ")[1], conn)
