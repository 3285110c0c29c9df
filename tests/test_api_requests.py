"""Hostile requests against the daemon's real HTTP server (uvicorn on a real socket, issue 42 #2).

The outside attack POSTed a 1.5 GB body without a token to ``/api/v1/runs/1/incidents``: FastAPI
read all of it before the route's token check ran (147 MB to 3.08 GB). Now the token and the body's
size are checked from the request head (``monitor/api/gate.py``) and the server drops the connection
with the body unread; a body is at most 1 MiB and must arrive in time; a request head must arrive
within its deadline (``monitor/api/server.py``), so half-sent requests do not hold connections for ever.
"""

from __future__ import annotations

import contextlib
import json
import resource
import select
import socket
import time
from collections.abc import Iterator

import pytest

from monitor.api import server
from monitor.api.gate import MAX_BODY_BYTES, MAX_HEADERS
from monitor.results import CAUSE_CODES
from monitor.store import Store
from tests.serving import free_port
from tests.test_api import TOKEN, with_api
from tests.test_metrics import RealDaemon, Scenario

pytestmark = pytest.mark.server

HEAD_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.5
INCIDENT = json.dumps({"cause": sorted(CAUSE_CODES)[0], "text": "found it"}).encode()


@pytest.fixture
def port(scenario: Scenario, store: Store) -> Iterator[int]:
    handle = RealDaemon(with_api(scenario.settings, token=TOKEN), store)
    handle.dispatch(scenario.passing)  # run 1
    number = free_port()
    running = server.start(handle, "127.0.0.1", number, head_timeout_s=HEAD_TIMEOUT_S, body_timeout_s=BODY_TIMEOUT_S)
    try:
        yield number
    finally:
        running.stop()


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def head(path: str, *headers: str, method: str = "POST") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: onnxmon", *headers, "", ""]
    return "\r\n".join(lines).encode()


def response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one answer (0 when none came before the socket's timeout)."""
    data = b""
    with contextlib.suppress(OSError):
        while b"\r\n\r\n" not in data:
            more = sock.recv(65536)
            if not more:
                break
            data += more
    if b"\r\n\r\n" not in data:
        return 0, {}, data
    top, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    want = int(headers.get("content-length", "0"))
    with contextlib.suppress(OSError):
        while len(body) < want and (more := sock.recv(65536)):
            body += more
    return int(status_line.split()[1]), headers, body


def closed(sock: socket.socket) -> bool:
    """The server closed the connection (EOF or a reset) rather than waiting for more (what is left is drained)."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_a_big_body_without_a_token_is_refused_before_it_is_read(port: int) -> None:
    """The attack's request: 1.5 GB announced, no token. The 401 comes at once and the connection closes."""
    before = max_rss_mib()
    sock = connect(port)
    sock.sendall(head("/api/v1/runs/1/incidents", "Content-Type: application/json", "Content-Length: 1500000000"))
    chunk, sent, give_up = b"x" * (1 << 20), 0, 256 << 20
    with contextlib.suppress(OSError):  # the server's close ends the sending (a reset or a broken pipe)
        while sent < give_up and not select.select([sock], [], [], 0)[0]:
            sock.sendall(chunk)
            sent += len(chunk)
    status, headers, body = response(sock)
    grown = max_rss_mib() - before
    print(f"\nMEASURED sent {sent >> 20} MiB of 1430 MiB before the answer; max RSS grew {grown:.0f} MiB")
    assert status == 401, (status, body[:200])
    assert json.loads(body) == {"detail": "missing or wrong bearer token"}
    assert headers.get("connection") == "close" and closed(sock)
    assert sent < 32 << 20, f"{sent} bytes sent before the refusal: the body was being read"
    assert grown < 64, f"max RSS grew {grown:.0f} MiB"


@pytest.mark.parametrize(
    "path",
    ["/api/v1/models/clf/check", "/api/v1/baselines/nope-1/promote", "/-/reload", "/api/v1/runs/1/incidents"],
)
def test_every_guarded_route_answers_401_from_the_head_alone(port: int, path: str) -> None:
    sock = connect(port)
    sock.sendall(head(path, "Authorization: Bearer wrong", "Content-Length: 1500000000"))
    status, headers, _ = response(sock)  # no byte of the body sent
    assert status == 401 and headers.get("www-authenticate") == "Bearer"
    assert headers.get("connection") == "close" and closed(sock)


@pytest.mark.parametrize(
    ("method", "path", "status"), [("GET", "/healthz", 200), ("POST", "/healthz", 405), ("PUT", "/nowhere", 404)]
)
def test_a_body_sent_to_a_route_that_takes_none_is_never_read(port: int, method: str, path: str, status: int) -> None:
    """No token needed there, so no 401; but the gate reads a body only for a route that takes one."""
    sock = connect(port)
    sock.sendall(head(path, "Content-Length: 1000000", method=method))  # under the limit: no 413 either
    answer, headers, _ = response(sock)
    assert answer == status and headers.get("connection") == "close" and closed(sock)


def test_an_authenticated_body_over_the_limit_is_413_before_it_is_read(port: int) -> None:
    sock = connect(port)
    too_big = MAX_BODY_BYTES + 1
    sock.sendall(head("/api/v1/runs/1/incidents", f"Authorization: Bearer {TOKEN}", f"Content-Length: {too_big}"))
    status, headers, body = response(sock)  # no byte of the body sent
    assert status == 413, (status, body[:200])
    assert f"over {MAX_BODY_BYTES} bytes" in json.loads(body)["detail"]
    assert headers.get("connection") == "close" and closed(sock)


def chunked(body: bytes, size: int = 65536) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        part = body[start : start + size]
        yield b"%x\r\n%s\r\n" % (len(part), part)
    yield b"0\r\n\r\n"


def test_a_chunked_body_over_the_limit_is_413_and_one_within_it_is_served(port: int) -> None:
    """No Content-Length: the body is read at most to the limit, then refused; within it, the route gets it all."""
    sock = connect(port)
    auth = f"Authorization: Bearer {TOKEN}"
    sock.sendall(head("/api/v1/runs/1/incidents", auth, "Content-Type: application/json", "Transfer-Encoding: chunked"))
    padded = INCIDENT[:-1] + b', "fix": "' + b"f" * (2 * MAX_BODY_BYTES) + b'"}'
    with contextlib.suppress(OSError):
        for part in chunked(padded):
            sock.sendall(part)
    status, _, body = response(sock)
    assert status == 413, (status, body[:200])

    sock = connect(port)
    sock.sendall(head("/api/v1/runs/1/incidents", auth, "Content-Type: application/json", "Transfer-Encoding: chunked"))
    for part in chunked(INCIDENT, size=7):
        sock.sendall(part)
    status, _, body = response(sock)
    assert status == 201, (status, body[:300])
    assert json.loads(body)["text"] == "found it"


@pytest.mark.parametrize(
    "length",
    [
        "Content-Length: -1",
        "Content-Length: 1e3",
        "Content-Length: abc",
        "Content-Length: 5\r\nContent-Length: 6",
        f"Content-Length: {len(INCIDENT)}\r\nTransfer-Encoding: chunked",  # which frames the body? (smuggling)
    ],
)
def test_a_content_length_that_is_not_a_size_is_400(port: int, length: str) -> None:
    sock = connect(port)
    sock.sendall(head("/api/v1/runs/1/incidents", f"Authorization: Bearer {TOKEN}", length) + INCIDENT)
    status, _, _ = response(sock)
    assert status == 400
    assert closed(sock)


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ([f"X-Filler-{i}: {'v' * 40}" for i in range(MAX_HEADERS + 1)], 431),  # 5 KiB, too many fields
        ([f"X-Filler-{i}: {'v' * 1000}" for i in range(40)], 431),  # 40 KiB in one read: h11 takes it whole
        ([f"X-Filler-{i}: {'v' * 8000}" for i in range(64)], 400),  # 512 KiB: h11 refuses it incomplete
    ],
)
def test_a_request_head_over_its_bounds_is_refused(port: int, headers: list[str], status: int) -> None:
    sock = connect(port)
    with contextlib.suppress(OSError):
        sock.sendall(head("/healthz", *headers, method="GET"))
    assert response(sock)[0] == status
    assert closed(sock)


def test_a_request_head_that_trickles_is_cut_at_its_deadline(port: int) -> None:
    """Slowloris: a header line every 0.2 s never completes the head; the server answers 408 and closes."""
    sock = connect(port)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: onnxmon\r\n")
    started = time.monotonic()
    with contextlib.suppress(OSError):
        while time.monotonic() - started < 10 * HEAD_TIMEOUT_S and not select.select([sock], [], [], 0.2)[0]:
            sock.sendall(b"X-Slow: 1\r\n")
    status, _, body = response(sock)
    took = time.monotonic() - started
    assert status == 408, (status, body)
    assert closed(sock)
    assert took < 5 * HEAD_TIMEOUT_S


def test_an_idle_connection_is_closed_at_the_head_deadline_and_a_kept_alive_one_too(port: int) -> None:
    silent = connect(port)
    started = time.monotonic()
    assert closed(silent) and time.monotonic() - started < 5 * HEAD_TIMEOUT_S

    sock = connect(port)
    sock.sendall(head("/healthz", method="GET"))
    assert response(sock)[0] == 200
    sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # the next request on the kept-alive connection, never finished
    status, _, _ = response(sock)
    assert status == 408
    assert closed(sock)


def test_a_flood_of_idle_connections_is_closed_and_the_server_answers_meanwhile(port: int) -> None:
    idle = [connect(port) for _ in range(300)]
    idle[0].sendall(b"GET /healthz HTTP/1.1\r\n")  # one half-sent head among them
    sock = connect(port)
    sock.sendall(head("/healthz", method="GET"))
    assert response(sock)[0] == 200
    time.sleep(2 * HEAD_TIMEOUT_S)
    assert all(closed(conn) for conn in idle)


def test_a_body_that_trickles_is_cut_at_its_deadline(port: int) -> None:
    sock = connect(port)
    sock.sendall(head("/api/v1/runs/1/incidents", f"Authorization: Bearer {TOKEN}", f"Content-Length: {len(INCIDENT)}"))
    sock.sendall(INCIDENT[:10])
    started = time.monotonic()
    status, _, body = response(sock)
    assert status == 408, (status, body)
    assert "did not arrive within" in json.loads(body)["detail"]
    assert closed(sock)
    assert time.monotonic() - started < 5 * BODY_TIMEOUT_S


def test_an_ordinary_request_is_served_as_before(port: int) -> None:
    sock = connect(port)
    auth = f"Authorization: Bearer {TOKEN}"
    sock.sendall(
        head("/api/v1/runs/1/incidents", auth, "Content-Type: application/json", f"Content-Length: {len(INCIDENT)}")
    )
    sock.sendall(INCIDENT)
    status, _, body = response(sock)
    assert status == 201, body
    sock.sendall(head("/api/v1/runs/1/incidents", "Content-Type: application/json", f"Content-Length: {len(INCIDENT)}"))
    sock.sendall(INCIDENT)
    status, _, _ = response(sock)
    assert status == 401  # without the token, even with a small body
    sock = connect(port)
    sock.sendall(head("/healthz", method="GET"))
    assert response(sock)[0] == 200
