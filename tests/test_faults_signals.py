"""A SIGKILLed daemon takes its check children with it (issue 17, item 12).

Before, a child kept running a hung model past its hard cut once the daemon that would have
killed it was gone. Children now ask the kernel for SIGKILL when their parent (the forkserver,
which exits with the daemon) dies.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests import modelzoo
from tests.serving import Served, check_children, free_port, two_models
from tests.workspace import Workspace

pytestmark = pytest.mark.process


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigkill_of_the_daemon_kills_its_running_check_children(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    two_models(ws, timeout="5m", interval="1h")
    ws.replace_model("spin", modelzoo.hang(iterations=10**12))
    ws.write()
    served = Served(ws, free_port())
    try:
        served.wait_until(lambda: check_children(served.process.pid), "a check child to be running", timeout=120)
        running = check_children(served.process.pid)
    except BaseException:
        served.process.kill()
        raise
    served.process.send_signal(signal.SIGKILL)
    served.process.wait(30)
    served.log.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(pid) for pid in running):
        time.sleep(0.1)
    survivors = [pid for pid in running if alive(pid)]
    for pid in survivors:  # leave nothing behind, whatever the verdict
        os.kill(pid, signal.SIGKILL)
    assert survivors == [], f"check children {survivors} outlived the SIGKILLed daemon"


def test_a_sighup_the_moment_the_port_opens_reloads_instead_of_killing_the_daemon(tmp_path: Path) -> None:
    """A supervisor may reload as soon as the daemon listens; the handler must already be there."""
    import socket
    import subprocess

    from tests.serving import BIN

    ws = Workspace(tmp_path)
    two_models(ws)
    port = free_port()
    with (tmp_path / "serve.log").open("w") as log:
        process = subprocess.Popen(
            [str(BIN / "onnxmon"), "serve", "-c", str(ws.config_file), "--port", str(port)],
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and process.poll() is None:
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.001)
            process.send_signal(signal.SIGHUP)
            time.sleep(1.0)
            assert process.poll() is None, f"a SIGHUP at start-up killed the daemon (exit {process.returncode})"
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(60)
    assert code == 0, (tmp_path / "serve.log").read_text()[-2000:]
