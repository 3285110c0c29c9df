"""The CLI fails in one line with the documented exit code, never with a traceback (issue 17, item 8)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import modelzoo
from tests.workspace import Workspace

BIN = Path(sys.executable).parent


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    workspace = Workspace(tmp_path)
    workspace.add_model("clf", modelzoo.classifier(), count=2)
    workspace.write()
    return workspace


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def serve(ws: Workspace, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "onnxmon"), "serve", "-c", str(ws.config_file), *args],
        cwd=ws.root,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_serve_on_a_port_in_use_says_so_in_one_line(ws: Workspace, taken_port: int) -> None:
    result = serve(ws, "--port", str(taken_port))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"cannot listen on 127.0.0.1:{taken_port}: the port is already in use" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "Invalid value for '--port'"),
        (["--host", "no.such.host.invalid", "--port", "1"], "api.host: 'no.such.host.invalid' does not resolve"),
    ],
)
def test_serve_with_an_impossible_address_is_a_usage_error(ws: Workspace, args: list[str], message: str) -> None:
    result = serve(ws, *args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert message in result.stderr
