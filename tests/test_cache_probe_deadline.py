"""The response-cache probe runs inside the check's timeout: when the replay through a slow endpoint leaves
less time than a probe request may take (``endpoint.timeout_s``), that request is not sent and the probe
says so (``inconclusive``), instead of running past the check's timeout, where the daemon's hard kill
would throw away the whole measured check as a ``timeout``.

The endpoint is a real HTTP server on loopback that answers each inference after a fixed delay."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor import capture
from monitor.check import run_check
from monitor.config.plan import plan_for
from tests import modelzoo
from tests.workspace import Workspace

pytest.importorskip("tritonclient.http")
pytestmark = pytest.mark.server

DELAY_S = 1.0
OUTPUT = {"datatype": "FP32", "shape": [1, 10], "data": [0.0] * 10}
ANSWERS = {
    "/v2": {"name": "slow", "version": "1", "extensions": []},
    "/v2/models/clf": {"name": "clf", "versions": ["1"], "platform": "onnxruntime_onnx"},
    "/v2/models/clf/infer": {"model_name": "clf", "outputs": [{"name": n, **OUTPUT} for n in ("logits", "prob")]},
}


def _connection(conn: socket.socket, infers: list[float]) -> None:
    pending = b""
    with conn:
        while True:
            while b"\r\n\r\n" not in pending:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                pending += chunk
            head, _, pending = pending.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            length = next(
                (int(v) for k, _, v in (ln.partition(":") for ln in lines[1:]) if k.lower() == "content-length"), 0
            )
            while len(pending) < length:
                pending += conn.recv(65536)
            pending = pending[length:]
            if path.endswith("/infer"):
                infers.append(time.monotonic())
                time.sleep(DELAY_S)
            body = json.dumps(ANSWERS[path]).encode()
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
            )


@pytest.fixture
def slow_endpoint() -> Iterator[tuple[int, list[float]]]:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop, infers = threading.Event(), list[float]()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            threading.Thread(target=_connection, args=(conn, infers), daemon=True).start()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield listener.getsockname()[1], infers
    stop.set()
    thread.join(5)
    listener.close()


def test_a_probe_that_would_run_past_the_checks_timeout_is_skipped(
    slow_endpoint: tuple[int, list[float]], tmp_path: Path
) -> None:
    port, infers = slow_endpoint
    ws = Workspace(tmp_path)
    ws.add_model(
        "clf", modelzoo.classifier(), count=5, dims={"batch": 1}
    )  # 5 requests of DELAY_S: 5 s of the 6.5 s timeout
    endpoint = {"protocol": "v2-rest", "url": f"127.0.0.1:{port}", "model": "clf", "timeout_s": "2s"}
    ws.set("clf", endpoint=endpoint, timeout="6.5s")
    ws.write()
    capture.capture_baseline(plan_for(ws.settings(), "clf"), promote=True)
    result = run_check(plan_for(ws.settings(), "clf"))
    took = result.finished_at - result.started_at
    assert took < 6.5, f"the check ran {took:.1f}s, past its 6.5 s timeout ({len(infers)} inference requests)"
    probe = result.details["serving"]["cache_probe"]
    assert probe["result"] == "inconclusive" and "timeout" in probe["detail"], probe
    assert len(infers) == 5  # the replay's requests only
