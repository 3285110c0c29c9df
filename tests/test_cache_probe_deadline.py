"""The response-cache probe runs inside the check's timeout: when the replay through a slow endpoint leaves
less time than a probe request may take (``endpoint.timeout_s``), that request is not sent and the probe
says so (``inconclusive``), instead of running past the check's timeout, where the daemon's hard kill
would throw away the whole measured check as a ``timeout``.

The endpoint is a real HTTP server on loopback that answers each inference after a fixed delay."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor import capture
from monitor.check import run_check
from monitor.config.plan import plan_for
from tests import loopback_http, modelzoo
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


@pytest.fixture
def slow_endpoint() -> Iterator[tuple[int, list[float]]]:
    infers: list[float] = []

    def respond(path: str, conn: socket.socket) -> None:
        if path.endswith("/infer"):
            infers.append(time.monotonic())
            time.sleep(DELAY_S)
        body = json.dumps(ANSWERS[path]).encode()
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        )

    for port in loopback_http.serve(respond):
        yield port, infers


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
