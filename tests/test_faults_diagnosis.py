"""A fail is never held back for its diagnosis (issue 30, B1), on a real ``onnxmon serve``.

With ``daemon.diagnose_on_fail`` the fail used to reach the store, the spool, ``/metrics`` and the log
only once the diagnosis ended (10 to 120 s later): a ``kill -9`` in that window lost it, and SIGTERM
waited for the whole diagnosis. Now the result goes to every sink when it is known, the diagnosis is
attached to the stored run when it lands, and SIGTERM cuts a running diagnosis within
``diagnosis.STOP_S``.

The model is a Loop of MatMuls whose weight was scaled after the baseline: the check takes a fraction
of a second, and the diagnosis replays it in about ten children, long enough to be killed in.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from onnx import numpy_helper

from monitor import capture
from monitor.config.plan import plan_for
from monitor.daemon.diagnosis import STOP_S
from monitor.store import Store, incidents
from tests import modelzoo
from tests.serving import Served, check_children, free_port
from tests.workspace import Workspace

pytestmark = pytest.mark.process

MODEL = "spin"


def drifting(ws: Workspace, *, iterations: int = 20_000, budget: str = "90s") -> None:
    """``spin``: a baseline with the identity weight, then the weight scaled by 1.0001 (a fail, model_changed)."""
    ws.add_model(MODEL, modelzoo.hang(iterations=iterations), count=8, dims={}, timeout="60s",
                 schedule={"interval": "1h"})  # fmt: skip
    ws.extra["daemon"] = {
        "startup_spread": 0,
        "worker": "fresh",  # the check and each experiment are children of the forkserver: the test sees them
        "diagnose_on_fail": True,
        "diagnose_budget": budget,
    }
    store = {"url": "sqlite:///onnxmon.db", "baselines_dir": "baselines", "benchsets_dir": "benchsets"}
    ws.extra["store"] = {**store, "spool_dir": "spool"}
    capture.capture_baseline(plan_for(ws.settings(), MODEL))
    model = modelzoo.hang(iterations=iterations)
    for tensor in model.graph.initializer:
        if tensor.name == "w":
            tensor.CopyFrom(numpy_helper.from_array(np.eye(64, dtype=np.float32) * np.float32(1.0001), "w"))
    ws.replace_model(MODEL, model)
    with Store(f"sqlite:///{ws.root / 'onnxmon.db'}") as store:
        store.upgrade()


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    workspace = Workspace(tmp_path)
    drifting(workspace)
    workspace.write()
    return workspace


class Children:
    """Every check/experiment child of a daemon's forkserver, with when it was first and last seen."""

    def __init__(self, daemon: int) -> None:
        self.daemon = daemon
        self.seen: dict[int, list[float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            now = time.monotonic()
            for pid in check_children(self.daemon):
                self.seen.setdefault(pid, [now, now])[1] = now

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def first(self) -> tuple[int, list[float]] | None:
        """The check's child: the first one seen (experiments only start once it answered)."""
        found = sorted(self.seen.items(), key=lambda item: item[1][0])
        return found[0] if found else None

    def started(self) -> bool:
        return bool(self.seen)

    def experimenting(self) -> bool:
        """A diagnosis experiment is (or was) running: a second child, so the check has finished."""
        return len(self.seen) >= 2


def recorded(ws: Workspace) -> int:
    """Runs of the model in the store plus results waiting in the spool."""
    with Store(f"sqlite:///{ws.root / 'onnxmon.db'}") as store:
        rows = len(store.runs(MODEL, limit=10_000))
    spool = ws.root / "spool"
    queued = len([p for p in spool.iterdir() if p.name.endswith(".json")]) if spool.is_dir() else 0
    return rows + queued


def test_a_kill_9_at_random_points_of_a_diagnosed_fail_loses_no_finished_check(ws: Workspace) -> None:
    rng = random.Random(30)
    finished = unfinished = ambiguous = during_diagnosis = 0
    port = free_port()
    for life in range(8):
        before = recorded(ws)
        served = Served(ws, port, log_name=f"serve-{life}.log")
        children = Children(served.process.pid)
        try:
            served.wait_until(children.started, "the check's child", timeout=60)
            if life % 2:
                time.sleep(rng.uniform(0.0, 6.0))  # anywhere in the check or its diagnosis
            else:  # inside the diagnosis, however long the check took on a loaded machine
                served.wait_until(children.experimenting, "the diagnosis to start", timeout=120)
                time.sleep(rng.uniform(0.0, 1.0))
            killed_at = time.monotonic()
            first = children.first()
            experimenting = children.experimenting()
            served.process.kill()
            served.process.wait(30)
        finally:
            children.stop()
            served.log.close()
        assert first is not None
        check_pid, (_, last_seen) = first
        added = recorded(ws) - before
        if experimenting or last_seen < killed_at - 0.5:  # the check had answered: its result must be kept
            finished += 1
            during_diagnosis += experimenting
            assert added == 1, f"life {life}: the finished check (child {check_pid}) was lost ({added} recorded)"
        elif last_seen >= killed_at - 0.03:  # its child was still running: nothing to keep
            unfinished += 1
            assert added == 0, f"life {life}: {added} results of a check that never finished"
        else:
            ambiguous += 1
            assert added in (0, 1)
    total = recorded(ws)
    counts = (
        f"finished {finished} (in the diagnosis {during_diagnosis}), unfinished {unfinished}, ambiguous {ambiguous}"
    )
    print(f"8 kills: {counts}; recorded {total}")
    assert total >= finished and during_diagnosis >= 3, counts


def test_the_fail_is_in_the_store_and_metrics_while_its_diagnosis_runs_and_the_cause_lands_after(
    ws: Workspace,
) -> None:
    served = Served(ws, free_port())
    children = Children(served.process.pid)
    try:
        served.wait_until(children.experimenting, "the diagnosis to be running", timeout=60)
        assert recorded(ws) == 1, "the fail waits for its diagnosis"
        metrics = served.get("/metrics")[1]
        assert f'onnxmon_last_run_verdict{{model="{MODEL}",verdict="fail"}} 1.0' in metrics
        assert f'onnxmon_diagnosis_info{{cause="none",model="{MODEL}"}} 1.0' in metrics
        landed = f'onnxmon_diagnosis_info{{cause="model_weights_changed",model="{MODEL}"}} 1.0'
        served.wait_until(lambda: landed in served.get("/metrics")[1], "the diagnosis on /metrics", timeout=120)
        with Store(f"sqlite:///{ws.root / 'onnxmon.db'}") as store:
            run = store.runs(MODEL, limit=1)[0]
            document = incidents.diagnosis(store, run.id)
        assert document is not None and document["hypotheses"][0]["cause"] == "model_weights_changed"
        assert document["run_id"] == run.id
    finally:
        children.stop()
        code = served.stop()
    assert code == 0
    log = (ws.root / "serve.log").read_text()
    assert '"event": "diagnosis"' in log and "Traceback" not in log


def test_sigterm_cuts_a_running_diagnosis_within_its_bound_and_keeps_the_fail(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    drifting(ws, iterations=400_000)  # a diagnosis of tens of seconds: SIGTERM must not wait for it
    ws.write()
    served = Served(ws, free_port())
    children = Children(served.process.pid)
    try:
        served.wait_until(children.experimenting, "the diagnosis to be running", timeout=60)
        time.sleep(1.0)
    except BaseException:
        served.process.kill()
        raise
    finally:
        children.stop()
    began = time.monotonic()
    served.process.send_signal(signal.SIGTERM)
    code = served.process.wait(120)
    took = time.monotonic() - began
    print(f"SIGTERM with a diagnosis running: exit after {took:.2f} s")
    served.log.close()
    assert code == 0
    assert took < STOP_S + 3, f"SIGTERM took {took:.1f} s with a diagnosis running (bound {STOP_S} s + shutdown)"
    with Store(f"sqlite:///{ws.root / 'onnxmon.db'}") as opened:
        runs = opened.runs(MODEL, limit=10)
        assert [r.verdict.value for r in runs] == ["fail"]
        assert incidents.diagnosis(opened, runs[0].id) is None  # a cut diagnosis is not stored half-made
    log = (ws.root / "serve.log").read_text()
    assert "diagnosis of spin cut" in log and "Traceback" not in log
