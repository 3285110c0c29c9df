"""A real Open Inference Protocol server for tests: ``tests/oip_server.py`` run by an interpreter that has
KServe (``kserve`` from PyPI), on free loopback ports, REST and gRPC.

KServe pins packages onnxmon's own environment must not take (an older protobuf, uvloop and httptools that
uvicorn would pick up), so it lives in a virtual environment of its own: ``$ONNXMON_KSERVE_PYTHON``, else
``.venv-kserve/bin/python`` beside the repository's ``.venv`` (``.ci/run`` makes it:
``python -m venv .venv-kserve && .venv-kserve/bin/pip install kserve onnxruntime numpy``). Without one the
tests skip, unless ``ONNXMON_REQUIRE`` names ``kserve``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.conftest import unavailable
from tests.serving import free_port

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests" / "oip_server.py"
KSERVE_INSTALL = "python -m venv .venv-kserve && .venv-kserve/bin/pip install kserve onnxruntime numpy"


def kserve_python() -> str:
    """The interpreter with kserve and onnxruntime, or skip (fail under ``ONNXMON_REQUIRE=kserve``)."""
    named = os.environ.get("ONNXMON_KSERVE_PYTHON")
    candidates = (
        [Path(named)]
        if named
        else [ROOT / ".venv-kserve/bin/python", Path(sys.executable).parents[2] / ".venv-kserve/bin/python"]
    )
    for python in candidates:
        if python.is_file():
            probe = subprocess.run([str(python), "-c", "import kserve, onnxruntime"], capture_output=True, timeout=60)
            if probe.returncode == 0:
                return str(python)
    unavailable(
        "kserve", f"no interpreter with kserve and onnxruntime at {[str(c) for c in candidates]}: {KSERVE_INSTALL}"
    )
    raise AssertionError("unreachable")


class OipServer:
    """``tests/oip_server.py`` serving ``model`` as ``name``; ``stop()`` ends it (and only it)."""

    def __init__(
        self, model: Path, name: str, *, variant: str = "plain", warm: Path | None = None, delay: float = 5.0
    ) -> None:
        self.name = name
        self.http_port, self.grpc_port = free_port(), free_port()
        command = [
            kserve_python(),
            str(SERVER),
            str(model),
            "--name",
            name,
            "--http-port",
            str(self.http_port),
            "--grpc-port",
            str(self.grpc_port),
            "--variant",
            variant,
            "--delay",
            str(delay),
        ]
        if warm is not None:
            command += ["--warm", str(warm)]
        self.log = model.parent / f"oip-{name}-{variant}-{self.http_port}.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def url(self, protocol: str) -> str:
        return f"127.0.0.1:{self.http_port if protocol == 'v2-rest' else self.grpc_port}"

    def _wait_ready(self, timeout: float = 90.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise AssertionError(f"the OIP server exited {self.process.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.http_port}/v2/models/{self.name}/ready", timeout=2
                ) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise AssertionError(f"the OIP server was not ready in {timeout:g}s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)

    def __enter__(self) -> OipServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
