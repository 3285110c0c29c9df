"""A gRPC endpoint that accepts a call and never answers it: the server metadata asked at every check (and at
a baseline's capture) is bounded by ``endpoint.timeout_s`` as inference is, ``endpoint_timeout`` in the
``serving.error`` field, instead of waiting as long as the server holds the call (a check hard-killed at
its timeout with everything it measured, a capture that never ends).

The server is a real gRPC server on loopback whose every method sleeps."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import pytest

from monitor.config.endpoint_schema import EndpointConfig
from monitor.serving import metadata

grpc = pytest.importorskip("grpc")
pytest.importorskip("tritonclient.grpc")
pytestmark = pytest.mark.server

HOLD_S = 20.0


_Handler: Any = grpc.GenericRpcHandler


class _Hang(_Handler):  # type: ignore[misc]
    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def service(self, details: Any) -> Any:
        def hold(request: bytes, context: Any) -> bytes:
            self.release.wait(HOLD_S)
            context.abort(grpc.StatusCode.UNAVAILABLE, "released")
            return b""

        return grpc.unary_unary_rpc_method_handler(hold)


@pytest.fixture
def hanging() -> Iterator[int]:
    release = threading.Event()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((_Hang(release),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port
    release.set()
    server.stop(0)


def test_server_metadata_over_grpc_is_bounded_by_the_endpoint_timeout(hanging: int) -> None:
    cfg = EndpointConfig(protocol="v2-grpc", url=f"127.0.0.1:{hanging}", model="m", timeout_s=1)
    began = time.monotonic()
    found = metadata.server_fields(cfg)
    took = time.monotonic() - began
    assert took < HOLD_S / 2, f"the metadata probe waited {took:.1f}s for a server that never answers"
    assert "endpoint_timeout" in str(found["serving.error"][0]), found
