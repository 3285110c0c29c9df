"""Running a real ``onnxmon serve`` in tests: a free port, two small models, the process itself."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from monitor import capture
from monitor.config.plan import plan_for
from tests import modelzoo
from tests.workspace import Workspace

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def two_models(ws: Workspace, *, timeout: str = "3s", interval: str = "1h") -> None:
    """A quick classifier and a ``spin`` model that can be swapped for one that hangs."""
    ws.add_model("clf", modelzoo.classifier(), count=2, timeout=timeout, schedule={"interval": interval})
    ws.add_model(
        "spin", modelzoo.hang(iterations=1), count=1, dims={}, timeout=timeout, schedule={"interval": interval}
    )
    ws.extra["daemon"] = {"startup_spread": 0}
    settings = ws.settings()
    capture.capture_baseline(plan_for(settings, "clf"))
    capture.capture_baseline(plan_for(settings, "spin"))


class Served:
    """A real ``onnxmon serve`` on ``port``: this environment's, or another one's ``onnxmon`` script."""

    def __init__(
        self,
        ws: Workspace,
        port: int,
        *extra: str,
        onnxmon: Path | None = None,
        env: Mapping[str, str] | None = None,
        base_env: Mapping[str, str] | None = None,
        log_name: str = "serve.log",
    ) -> None:
        """``onnxmon serve`` on ``port`` with ``extra`` arguments; ``env`` adds to ``base_env`` (this process's)."""
        self.port = port
        self.log_path = ws.root / log_name
        self.log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [str(onnxmon or BIN / "onnxmon"), "serve", "-c", str(ws.config_file), "--port", str(port), *extra],
            cwd=ws.root,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**(os.environ if base_env is None else base_env), **(env or {})},
        )
        self.wait_until(lambda: self.get("/healthz")[0] == 200, "the daemon to answer /healthz")

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError:
            return 0, ""

    def wait_until(self, condition: Any, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"daemon exited ({self.process.returncode}) while waiting for {what}")
            if condition():
                return
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(60)
        finally:
            self.log.close()


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid``, read from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def check_children(daemon: int) -> list[int]:
    """The daemon's running isolated checks: children of its forkserver (which starts with the first check)."""
    servers = [c for c in children_of(daemon) if b"forkserver" in _cmdline(c)]
    return [pid for server in servers for pid in children_of(server)]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
