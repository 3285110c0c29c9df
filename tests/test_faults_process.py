"""Process, disk and clock faults: a leaking check, a deleted config, a full disk, a clock jump.

Hangs, SIGKILLed children, SIGTERM mid-run and SIGHUP with a broken config are covered in
``test_daemon.py``; segfaults and the memory cap of a bare child in ``test_isolate.py``.
"""

from __future__ import annotations

import errno
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from monitor import capture
from monitor.config.plan import plan_for
from monitor.daemon import scheduler
from monitor.daemon.root import Daemon
from monitor.errors import BaselineError
from monitor.files import baselines, tensors
from monitor.results import Verdict
from monitor.store import Store
from tests import modelzoo
from tests.disks import mounted_tmpfs
from tests.serving import Served, free_port, two_models
from tests.workspace import Workspace

WIDTH = 64


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


def broadcast_max(rows: int) -> onnx.ModelProto:
    """y = max over ``rows`` broadcast copies of x (= x): needs rows*64*4 bytes in one tensor at run time."""
    shape = numpy_helper.from_array(np.array([rows, WIDTH], dtype=np.int64), "rows_shape")
    graph = helper.make_graph(
        [
            helper.make_node("Expand", ["x", "rows_shape"], ["copies"], name="grow"),
            helper.make_node("ReduceMax", ["copies"], ["y"], axes=[0], keepdims=1, name="shrink"),
        ],
        "broadcast_max",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH])],
        [shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", modelzoo.OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.mark.process
@pytest.mark.parametrize("worker", ["fresh", "warm"])
def test_a_check_that_needs_more_memory_than_its_cap_fails_alone_and_the_daemon_carries_on(
    ws: Workspace, worker: str
) -> None:
    ws.add_model("grow", broadcast_max(1), count=1, dims={}, timeout="20s", schedule={"interval": "1h"})
    two_models(ws)
    ws.extra["daemon"].update(memory_limit_mb=2048, worker=worker)
    settings = ws.settings()
    capture.capture_baseline(plan_for(settings, "grow"))
    ws.replace_model("grow", broadcast_max(2**26))  # 16 GiB at run time: a leak, as the cap sees it
    with Store(settings.store.url) as store:
        store.upgrade()
        daemon = Daemon(settings, store=store)
        began = time.monotonic()
        leaked = daemon.run_now("grow")
        took = time.monotonic() - began
        assert leaked.verdict is Verdict.ERROR
        reason, *rest = leaked.reasons
        assert reason.code in {"run_error", "crash"}, reason
        assert [r.code for r in rest] == ["model_changed"], "the file that leaks is not the baseline's"
        assert took < 20, "the cap stopped it, not the timeout"
        assert daemon.run_now("clf").verdict is Verdict.PASS
        assert {r.model: str(r.verdict) for r in store.latest_per_model()} == {"grow": "error", "clf": "pass"}
        daemon.stop()
        print(f"\nMEASURED memory cap: {reason.code} after {took:.2f}s: {reason.detail[:160]}")


@pytest.mark.slow
def test_sighup_after_the_config_file_was_deleted_keeps_the_old_config(ws: Workspace) -> None:
    two_models(ws)
    served = Served(ws, free_port())
    try:
        ws.config_file.unlink()
        served.process.send_signal(signal.SIGHUP)
        served.wait_until(
            lambda: "onnxmon_config_last_reload_successful 0.0" in served.get("/metrics")[1], "the failed reload"
        )
        status, body = served.get("/api/v1/models")
        assert status == 200
        assert {m["name"] for m in json.loads(body)} == {"clf", "spin"}
        assert served.get("/healthz")[0] == 200
    finally:
        assert served.stop() == 0


# --- disk full while writing a baseline ---------------------------------------------------------


@pytest.fixture
def tiny_tmpfs(ws: Workspace) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted as the baselines directory (root only; skipped where mount is refused)."""
    with mounted_tmpfs(ws.root / "baselines") as where:
        yield where


def fill(directory: Path) -> int:
    """Write a file until the file system is full; returns the bytes written."""
    written = 0
    with (directory / "filler").open("wb", buffering=0) as handle:
        try:
            while True:
                written += handle.write(b"\xff" * 4096) or 0
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return written


def assert_previous_baseline_still_in_charge(ws: Workspace, active_before: str | None, count_before: int) -> None:
    settings = ws.settings()
    root = settings.store.baselines_dir
    assert not [p.name for p in (root / "clf").iterdir() if p.name.startswith(".tmp-")], "no half-written baseline"
    assert baselines.active_id(root, "clf") == active_before
    assert len(baselines.list_baselines(root, "clf")) == count_before
    active = baselines.active(root, "clf")
    assert active is not None and active.verify() == []
    from monitor.check import run_check

    assert run_check(plan_for(settings, "clf")).verdict is Verdict.PASS


@pytest.mark.process
def test_a_full_disk_while_capturing_leaves_no_half_written_baseline_and_the_old_one_active(
    ws: Workspace, tiny_tmpfs: Path
) -> None:
    two_models(ws)
    settings = ws.settings()
    active_before = baselines.active_id(settings.store.baselines_dir, "clf")
    filled = fill(tiny_tmpfs)
    with pytest.raises(BaselineError, match="No space left on device") as raised:
        capture.capture_baseline(plan_for(settings, "clf"))
    assert isinstance(raised.value.__cause__, OSError) and raised.value.__cause__.errno == errno.ENOSPC
    (tiny_tmpfs / "filler").unlink()
    assert_previous_baseline_still_in_charge(ws, active_before, 1)
    print(f"\nMEASURED tmpfs 1 MiB, filled with {filled} bytes: {raised.value}")


def test_running_out_of_space_after_some_tensors_leaves_no_half_written_baseline(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same fault injected where no tmpfs can be mounted: the second tensor write fails with ENOSPC."""
    two_models(ws)
    settings = ws.settings()
    active_before = baselines.active_id(settings.store.baselines_dir, "clf")
    save = tensors.save_npy
    calls: list[Path] = []

    def save_until_full(path: Path, array: Any, **kwargs: Any) -> str:
        calls.append(path)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return save(path, array, **kwargs)

    monkeypatch.setattr(tensors, "save_npy", save_until_full)
    with pytest.raises(BaselineError, match="No space left on device") as raised:
        capture.capture_baseline(plan_for(settings, "clf"))
    assert isinstance(raised.value.__cause__, OSError) and raised.value.__cause__.errno == errno.ENOSPC
    monkeypatch.undo()
    assert len(calls) == 2 and calls[0].exists() is False, "the first tensor went with its temporary directory"
    assert_previous_baseline_still_in_charge(ws, active_before, 1)


# --- clock jumps ---------------------------------------------------------------------------------


@pytest.fixture
def ticking(ws: Workspace) -> Iterator[tuple[Any, list[float]]]:
    """A real ``scheduler.build`` scheduler with one 1 s job that records when it ran."""
    ws.add_model("clf", modelzoo.classifier(), timeout="0.5s", schedule={"interval": "1s"})
    ran: list[float] = []
    sched = scheduler.build(ws.settings(), lambda model: ran.append(time.monotonic()), first_run_within=0)
    sched.start()
    try:
        yield sched, ran
    finally:
        sched.shutdown(wait=False)


def runs_between(ran: list[float], start: float, end: float) -> int:
    return sum(start <= t < end for t in ran)


def just_after_a_tick(ran: list[float]) -> None:
    """Sleep until 0.1 s past a fire time of the 1 s job (its second run was on its regular cadence)."""
    assert len(ran) >= 2
    time.sleep((1.1 - (time.monotonic() - ran[1]) % 1) % 1)


@pytest.mark.slow
def test_a_forward_clock_jump_gives_one_catch_up_run_then_the_usual_cadence(
    ticking: tuple[Any, list[float]],
) -> None:
    """Simulated: the job's next fire time is set 10 intervals into the past, which is what
    APScheduler sees after the wall clock steps forward 10 s (NTP step, VM resume)."""
    import datetime as dt

    sched, ran = ticking
    time.sleep(1.2)
    sched.pause()
    job = sched.get_job(scheduler.job_id("clf"))
    job.modify(next_run_time=job.next_run_time - dt.timedelta(seconds=10))  # same phase, 10 intervals back
    just_after_a_tick(ran)
    jumped = time.monotonic()
    sched.resume()
    time.sleep(3.1)
    assert runs_between(ran, jumped, jumped + 0.5) == 1, "ten missed runs coalesce into one"
    assert 2 <= runs_between(ran, jumped + 0.5, jumped + 3.1) <= 4, "then one run a second"


@pytest.mark.slow
def test_a_paused_scheduler_resumes_with_one_run_not_a_burst(ticking: tuple[Any, list[float]]) -> None:
    """Simulated: the scheduler thread does not run for 4.5 intervals (a stopped process, a
    suspended VM), then wakes up with those fire times in the past."""
    sched, ran = ticking
    time.sleep(1.2)
    sched.pause()
    time.sleep(4.5)
    just_after_a_tick(ran)
    woke = time.monotonic()
    sched.resume()
    time.sleep(2.6)
    assert runs_between(ran, woke, woke + 0.5) == 1, "four missed runs coalesce into one"
    assert 2 <= runs_between(ran, woke + 0.5, woke + 2.6) <= 3, "then one run a second"
