"""Scheduling: one job per model with a fixed id, the safe APScheduler defaults, one check per GPU."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from monitor import capture
from monitor.check import run_check
from monitor.config.plan import plan_for
from monitor.config.settings import ModelConfig, ProviderSpec
from monitor.daemon import child, scheduler
from monitor.results import Verdict
from tests import modelzoo
from tests.workspace import Workspace


def model(*providers: ProviderSpec) -> ModelConfig:
    return ModelConfig(name="m", path=Path("m.onnx"), benchset="b", providers=list(providers))


@pytest.mark.parametrize(
    ("providers", "key"),
    [
        ([ProviderSpec(name="CPUExecutionProvider")], None),
        ([ProviderSpec(name="CUDAExecutionProvider"), ProviderSpec(name="CPUExecutionProvider")], "cuda:0"),
        ([ProviderSpec(name="CUDAExecutionProvider", options={"device_id": 1})], "cuda:1"),
        ([ProviderSpec(name="TensorrtExecutionProvider", options={"device_id": 1})], "cuda:1"),
        ([ProviderSpec(name="ROCMExecutionProvider")], "rocm:0"),
    ],
)
def test_the_device_a_model_runs_on_is_its_lock_key(providers: list[ProviderSpec], key: str | None) -> None:
    assert scheduler.device_key(model(*providers)) == key


def test_checks_that_share_a_gpu_never_overlap_but_cpu_checks_do() -> None:
    locks = scheduler.DeviceLocks()
    active: dict[str | None, int] = {"cuda:0": 0, None: 0}
    peak: dict[str | None, int] = {"cuda:0": 0, None: 0}
    guard = threading.Lock()

    def check(key: str | None) -> None:
        with locks.hold(key):
            with guard:
                active[key] += 1
                peak[key] = max(peak[key], active[key])
            time.sleep(0.05)
            with guard:
                active[key] -= 1

    threads = [threading.Thread(target=check, args=(k,)) for k in ["cuda:0"] * 4 + [None] * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert peak["cuda:0"] == 1
    assert peak[None] > 1


def test_every_model_gets_one_job_with_a_fixed_id_and_the_safe_defaults(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("a", modelzoo.classifier(), schedule={"interval": "15m", "jitter": "30s"})
    ws.add_model("b", modelzoo.classifier(), schedule={"cron": "*/5 * * * *"}, timeout="1m")
    sched = scheduler.build(ws.settings(), lambda name: None)
    sched.start(paused=True)  # APScheduler fills in the job defaults when the job is really added
    jobs = {job.id: job for job in sched.get_jobs()}
    sched.shutdown(wait=False)
    assert set(jobs) == {"check:a", "check:b"}
    for job in jobs.values():
        assert job.coalesce is True
        assert job.max_instances == 1
        assert job.misfire_grace_time is None, "a model queued behind another runs late, it is not dropped"
    assert jobs["check:a"].trigger.interval.total_seconds() == 900
    assert jobs["check:a"].trigger.jitter == 30
    assert "minute='*/5'" in str(jobs["check:b"].trigger)


def test_reinstalling_jobs_replaces_them_instead_of_adding_more(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("a", modelzoo.classifier())
    ws.add_model("b", modelzoo.classifier())
    settings = ws.settings()
    sched = scheduler.build(settings, lambda name: None)
    del ws.models["b"], ws.benchsets["b"]
    scheduler.install_jobs(sched, ws.settings(), lambda name: None)
    assert [job.id for job in sched.get_jobs()] == ["check:a"]


def test_sharded_slots_are_the_same_on_every_replica(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("a", modelzoo.classifier(), schedule={"interval": "60s"}, timeout="10s")
    settings = ws.settings()
    m = settings.model("a")
    base = scheduler.EPOCH.timestamp() + 60 * 1000
    # replicas that start the same fire time late, even by most of an interval, claim the same slot
    assert scheduler.slot_of(settings, m, base) == scheduler.slot_of(settings, m, base + 2.5) == 1000
    assert scheduler.slot_of(settings, m, base + 59.9) == 1000
    assert scheduler.slot_of(settings, m, base + 60) == 1001


def test_auto_capture_records_a_first_baseline_and_never_replaces_an_existing_one(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("clf", modelzoo.classifier())
    ws.extra["daemon"] = {"auto_capture_baseline": True}
    settings = ws.settings()
    plan = plan_for(settings, "clf")
    first = child.check_job(plan)
    assert first["result"].verdict is Verdict.ERROR and first["result"].reasons[0].code == "no_baseline"
    captured = first["captured_baseline"]
    assert captured["source"] == "captured" and captured["active"] is True
    assert run_check(plan_for(settings, "clf")).verdict is Verdict.PASS
    second = child.check_job(plan)
    assert second["result"].verdict is Verdict.PASS
    assert "captured_baseline" not in second


def test_auto_capture_is_off_by_default(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("clf", modelzoo.classifier())
    payload = child.check_job(plan_for(ws.settings(), "clf"))
    assert "captured_baseline" not in payload
    capture.capture_baseline(plan_for(ws.settings(), "clf"))
    assert child.check_job(plan_for(ws.settings(), "clf"))["result"].verdict is Verdict.PASS
