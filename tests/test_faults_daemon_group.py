"""Reloads that meet, and a SIGTERM to the daemon's whole process group (issue 42: #15, #16).

- A SIGHUP reload and a ``POST /-/reload`` together reported a valid, unchanged config as invalid
  (APScheduler's ``JobLookupError``: both swapped the same jobs) and set
  ``onnxmon_config_last_reload_successful`` to 0. Reloads now take turns.
- SIGTERM to the daemon's process group (systemd's default ``KillMode=control-group``, supervisord's
  ``stopasgroup``, a terminal's Ctrl-C) recorded the check in flight as ``error``/``crash``:
  multiprocessing's forkserver, in the daemon's group, died of it, and with it the parent's view of
  the check worker. The forkserver now ignores SIGTERM (it still exits with the daemon), the worker
  sits in a group of its own, and the check in flight finishes and is stored as what it was. (A
  group's SIGINT held before: the forkserver ignored SIGINT already.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from monitor import capture
from monitor.config.plan import plan_for
from monitor.store import Store
from tests import modelzoo
from tests.serving import BIN, Served, check_children, free_port, two_models
from tests.workspace import Workspace

pytestmark = pytest.mark.process
TOKEN = "reload-token-0123456789"
MANY = 200  # jobs to swap: the longer a swap takes, the likelier two meet


def many_models(ws: Workspace) -> None:
    """``two_models`` and ``MANY`` more entries of the classifier, none checked while the reloads race."""
    two_models(ws)
    for index in range(MANY):
        ws.models[f"clf{index}"] = ws.models["clf"] | {"name": f"clf{index}"}
    ws.extra["daemon"]["startup_spread"] = "1d"


def post_reload(port: int) -> tuple[int, str]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/-/reload", method="POST", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.server
def test_a_sighup_and_a_post_reload_together_both_apply_the_config(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    many_models(ws)
    ws.extra["api"] = {"token": TOKEN}
    ws.write()
    served = Served(ws, free_port())
    answers: list[tuple[int, str]] = []
    try:
        for _ in range(8):
            posts = [threading.Thread(target=lambda: answers.append(post_reload(served.port))) for _ in range(2)]
            for post in posts:
                post.start()
            served.process.send_signal(signal.SIGHUP)  # the daemon's loop looks every 0.1 s
            for post in posts:
                post.join(120)
        time.sleep(1.0)  # the last SIGHUP's reload is done
        status, metrics = served.get("/metrics")
    finally:
        assert served.stop() == 0
    log = served.log_path.read_text()
    assert len(answers) == 16 and [a for a in answers if a[0] != 200] == []
    failures = [line for line in log.splitlines() if "reload failed" in line or "JobLookupError" in line]
    assert failures == [], failures[:5]
    assert status == 200 and "onnxmon_config_last_reload_successful 1.0" in metrics


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_to_the_process_group_lets_the_check_in_flight_finish(tmp_path: Path, signum: int) -> None:
    """systemd, supervisord (SIGTERM) and a terminal's Ctrl-C (SIGINT) signal the daemon's whole group."""
    ws = Workspace(tmp_path)
    ws.add_model("slow", modelzoo.hang(iterations=1_500_000), count=1, dims={}, timeout="2m")
    ws.extra["daemon"] = {"startup_spread": 0}
    settings = ws.settings()
    capture.capture_baseline(plan_for(settings, "slow"))  # a baseline of this very model: the check passes
    port = free_port()
    with (tmp_path / "serve.log").open("w") as log:
        process = subprocess.Popen(
            [str(BIN / "onnxmon"), "serve", "-c", str(ws.config_file), "--port", str(port)],
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a group of its own, as under systemd or supervisord: killpg reaches it all
        )
        try:
            deadline = time.monotonic() + 120
            while not check_children(process.pid):
                assert time.monotonic() < deadline and process.poll() is None, "no check started"
                time.sleep(0.05)
            time.sleep(0.3)  # the worker has its check in hand
            os.killpg(process.pid, signum)
            stopped = time.monotonic()
            code = process.wait(150)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert code == 0, (tmp_path / "serve.log").read_text()[-3000:]
    store = Store(settings.store.url)
    try:
        runs = store.runs("slow", limit=10)
    finally:
        store.close()
    assert len(runs) == 1, (tmp_path / "serve.log").read_text()[-3000:]
    (run,) = runs
    assert run.verdict.value == "pass", run.reasons
    assert run.finished_at.timestamp() >= time.time() - (time.monotonic() - stopped)  # it ended after the signal
