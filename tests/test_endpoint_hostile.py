"""An endpoint that answers something that is not an Open Inference Protocol answer: malformed JSON, a
body cut short, an output whose shape is not a list of sizes, ``outputs`` that is not a list, a JSON
array. Each is the endpoint's fault, one ``endpoint_answer`` reason (``serving/client.py``), never an
``internal_error`` that reads as a bug of onnxmon, and the server metadata probe never raises on it.

The server is a real socket on loopback that answers every request with the given raw bytes."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import numpy as np
import pytest

from monitor.config.endpoint_schema import EndpointConfig
from monitor.errors import EndpointError
from monitor.serving import metadata
from monitor.serving.client import EndpointRunner
from tests import loopback_http

pytest.importorskip("tritonclient.http")
pytestmark = pytest.mark.server


def _answer(body: bytes, length: int | None = None) -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {length or len(body)}\r\n\r\n"
    return head.encode() + body


def _output(**fields: object) -> bytes:
    return json.dumps({"outputs": [{"name": "y", "datatype": "FP32", "data": [1.0], **fields}]}).encode()


ANSWERS = {
    "malformed JSON": _answer(b'{"outputs": [nope'),
    "a body cut short": _answer(b'{"outp', length=1000),
    "a shape that is not sizes": _answer(_output(shape=["a"])),
    "a null shape": _answer(_output(shape=None)),
    "outputs not a list": _answer(b'{"outputs": 5}'),
    "a JSON array": _answer(b"[1, 2]"),
}


def _serve(raw: bytes, *, pace_s: float = 0.0) -> Iterator[int]:
    """A server answering every request with ``raw`` and closing; with ``pace_s``, one byte every ``pace_s`` s."""

    def respond(path: str, conn: socket.socket) -> None:
        if not pace_s:
            conn.sendall(raw)
        for i in range(len(raw) if pace_s else 0):  # ends with the client: a closed socket refuses the next byte
            conn.sendall(raw[i : i + 1])
            time.sleep(pace_s)
        conn.shutdown(socket.SHUT_RDWR)  # one answer per connection: a short body is cut short, not waited on

    return loopback_http.serve(respond)


@pytest.fixture(params=sorted(ANSWERS))
def hostile(request: pytest.FixtureRequest) -> Iterator[EndpointConfig]:
    for port in _serve(ANSWERS[request.param]):
        yield EndpointConfig(protocol="v2-rest", url=f"127.0.0.1:{port}", model="m", timeout_s=5)


def test_an_answer_that_is_not_oip_is_endpoint_answer(hostile: EndpointConfig) -> None:
    runner = EndpointRunner(hostile, {"y": np.dtype(np.float32)})
    try:
        with pytest.raises(EndpointError) as raised:
            runner.run({"x": np.zeros((1, 4), np.float32)})
    finally:
        runner.close()
    assert raised.value.code == "endpoint_answer", str(raised.value)
    assert "127.0.0.1" in str(raised.value)


@pytest.mark.parametrize("answer", ["malformed JSON", "a body cut short", "a JSON array"])
def test_the_metadata_probe_never_raises_on_a_malformed_answer(answer: str) -> None:
    for port in _serve(ANSWERS[answer]):
        found = metadata.server_fields(EndpointConfig(protocol="v2-rest", url=f"127.0.0.1:{port}", model="m"))
        assert "endpoint_answer" in str(found["serving.error"][0])


def test_an_answer_that_trickles_is_endpoint_timeout_within_the_timeout() -> None:
    """Each byte comes well within the client's read timeout, the whole answer never does: a request is
    bounded as a whole by ``endpoint.timeout_s`` (REST), as gRPC's ``client_timeout`` bounds it."""
    for port in _serve(_answer(_output(shape=[1])), pace_s=0.5):
        runner = EndpointRunner(
            EndpointConfig(protocol="v2-rest", url=f"127.0.0.1:{port}", model="m", timeout_s=2),
            {"y": np.dtype(np.float32)},
        )
        began = time.monotonic()
        try:
            with pytest.raises(EndpointError) as raised:
                runner.run({"x": np.zeros((1, 4), np.float32)})
        finally:
            runner.close()
        took = time.monotonic() - began
        assert raised.value.code == "endpoint_timeout", str(raised.value)
        assert took < 5, f"a trickling answer held the request {took:.1f}s against a 2 s timeout"
