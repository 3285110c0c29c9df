"""The daemon survives what models do to it: hangs, crashes, signals and broken configs."""

from __future__ import annotations

import json
import multiprocessing.forkserver
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monitor.daemon.root import Daemon
from monitor.results import Verdict
from monitor.store import Store
from tests import modelzoo
from tests.serving import Served, free_port, two_models
from tests.workspace import Workspace

pytestmark = pytest.mark.process


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


WORKERS = ["fresh", "warm"]  # daemon.worker: every isolation guarantee holds in both


@pytest.fixture(params=WORKERS)
def daemon(ws: Workspace, request: pytest.FixtureRequest) -> Iterator[Daemon]:
    two_models(ws)
    ws.extra["daemon"]["worker"] = request.param
    settings = ws.settings()
    store = Store(settings.store.url)
    store.upgrade()
    instance = Daemon(settings, store=store)
    yield instance
    instance.stop()
    store.close()


def test_a_hung_model_is_stopped_at_its_timeout_and_the_next_check_still_runs(ws: Workspace, daemon: Daemon) -> None:
    ws.replace_model("spin", modelzoo.hang(iterations=10**9))
    began = time.monotonic()
    hung = daemon.run_now("spin")
    assert hung.verdict is Verdict.ERROR
    assert hung.reasons[0].code == "timeout"
    assert time.monotonic() - began < 20
    healthy = daemon.run_now("clf")
    assert healthy.verdict is Verdict.PASS
    runs = {r.model: r.verdict for r in daemon.store.latest_per_model()}
    assert runs == {"spin": "error", "clf": "pass"}


def check_children() -> set[int]:
    """Processes forked by the forkserver: the check children."""
    server = multiprocessing.forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if server and int(fields[1]) == server:
            found.add(int(stat.parent.name))
    return found


def test_a_child_killed_with_sigkill_is_recorded_as_a_crash(ws: Workspace, daemon: Daemon) -> None:
    ws.replace_model("spin", modelzoo.hang(iterations=10**9))
    daemon.run_now("clf")  # starts the forkserver
    before = check_children()
    outcome: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: outcome.update(result=daemon.run_now("spin")))
    worker.start()
    deadline = time.monotonic() + 10
    while not (check_children() - before) and time.monotonic() < deadline:
        time.sleep(0.02)
    (child,) = check_children() - before
    time.sleep(0.3)
    os.kill(child, signal.SIGKILL)
    worker.join(30)
    result = outcome["result"]
    assert result.verdict is Verdict.ERROR
    assert result.reasons[0].code == "crash"
    assert "SIGKILL" in result.reasons[0].detail
    assert [r.code for r in result.reasons[1:]] == ["model_changed"], "the crashing file is not the baseline's"


def test_a_model_that_keeps_failing_to_run_is_backed_off(ws: Workspace) -> None:
    two_models(ws, interval="10m")
    settings = ws.settings()
    (ws.root / "models" / "spin.onnx").unlink()
    now = [1000.0]
    store = Store(settings.store.url)
    store.upgrade()
    daemon = Daemon(settings, store=store, clock=lambda: now[0])
    ran = []
    original = daemon.run_plan
    daemon.run_plan = lambda plan: ran.append(plan.name) or original(plan)  # type: ignore[method-assign]
    for _ in range(3):
        daemon.scheduled_check("spin")
    assert ran == ["spin", "spin"], "after the second failure the model waits"
    now[0] += 2 * 600 + 1
    daemon.scheduled_check("spin")
    assert ran == ["spin", "spin", "spin"], "it runs again after the back-off"
    daemon.scheduled_check("clf")
    assert ran[-1] == "clf", "other models are unaffected"
    store.close()


# --- the real process: `onnxmon serve` with signals ------------------------------------------


@pytest.mark.parametrize("worker", WORKERS)
def test_sigterm_mid_run_lets_the_check_finish_records_it_and_exits_zero(ws: Workspace, worker: str) -> None:
    two_models(ws, timeout="4s", interval="1h")
    ws.extra["daemon"]["worker"] = worker
    ws.write()
    ws.replace_model("spin", modelzoo.hang(iterations=10**9))
    served = Served(ws, free_port())
    time.sleep(1.5)  # both first runs have started; spin runs until its 4 s timeout
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(60) == 0
    served.log.close()
    with Store(ws.settings().store.url) as store:
        latest = {r.model: r for r in store.latest_per_model()}
    assert latest["spin"].verdict == "error"
    assert [r.code for r in latest["spin"].reasons] == ["timeout", "model_changed"]
    assert latest["clf"].verdict == "pass"


def test_sighup_with_a_broken_config_keeps_serving_the_old_one(ws: Workspace) -> None:
    two_models(ws)
    served = Served(ws, free_port())
    try:
        good = ws.config_file.read_text()
        ws.config_file.write_text(good + "\nmodels: [this is: not: valid\n")
        served.process.send_signal(signal.SIGHUP)
        served.wait_until(
            lambda: "onnxmon_config_last_reload_successful 0.0" in served.get("/metrics")[1], "the failed reload"
        )
        status, body = served.get("/api/v1/models")
        assert status == 200
        assert {m["name"] for m in json.loads(body)} == {"clf", "spin"}
        assert served.get("/healthz")[0] == 200
        ws.config_file.write_text(good)
        served.process.send_signal(signal.SIGHUP)
        served.wait_until(
            lambda: "onnxmon_config_last_reload_successful 1.0" in served.get("/metrics")[1], "the good reload"
        )
    finally:
        assert served.stop() == 0


def test_the_daemon_records_an_auto_captured_first_baseline_in_the_history(ws: Workspace) -> None:
    ws.add_model("clf", modelzoo.classifier(), count=2)
    ws.extra["daemon"] = {"auto_capture_baseline": True, "startup_spread": 0}
    settings = ws.settings()
    with Store(settings.store.url) as store:
        store.upgrade()
        daemon = Daemon(settings, store=store)
        first = daemon.run_now("clf")
        assert first.reasons[0].code == "no_baseline"
        (recorded,) = store.baseline_history("clf")
        assert recorded.source == "captured" and recorded.is_active and recorded.active_from is not None
        assert daemon.run_now("clf").verdict is Verdict.PASS
        daemon.stop()
