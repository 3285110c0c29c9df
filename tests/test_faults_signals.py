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

from tests import modelzoo
from tests.serving import Served, check_children, free_port, two_models
from tests.workspace import Workspace


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
