"""Real checks through kept check workers: the same verdicts and numbers as new ones, every change still seen.

A kept worker keeps its session, the model file's digests and the environment's constant parts: a
swapped model file, a tampered benchmark set, a reload that changes a model's plan and a shutdown
must each be seen, or stop the workers, exactly when a new worker would; its session is built once
while the model file is unchanged (``onnxmon_worker_session_builds_total``).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from monitor.daemon.root import Daemon
from monitor.results import CheckResult, Verdict
from monitor.store import Store
from tests import modelzoo
from tests.serving import Served, check_children, free_port, two_models
from tests.test_isolate import pid_alive
from tests.workspace import Workspace


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    workspace = Workspace(tmp_path)
    two_models(workspace)
    return workspace


@contextmanager
def running(ws: Workspace, worker: str = "warm", **daemon: Any) -> Iterator[Daemon]:
    ws.extra["daemon"].update(worker=worker, **daemon)
    settings = ws.settings()
    with Store(settings.store.url) as store:
        store.upgrade()
        instance = Daemon(settings, store=store, config_path=ws.config_file)
        try:
            yield instance
        finally:
            instance.stop()


def warm(result: CheckResult) -> dict[str, Any]:
    note = result.details.get("worker")
    assert isinstance(note, dict), f"not checked by a worker: {result.details.keys()}"
    return note


def numbers(result: CheckResult) -> list[dict[str, Any]]:
    return [o.to_dict() for o in result.outputs]


def session_builds(daemon: Daemon, model: str) -> float | None:
    return daemon.metrics.registry.get_sample_value("onnxmon_worker_session_builds_total", {"model": model})


@pytest.mark.database
@pytest.mark.process
def test_a_warm_worker_reuses_its_session_and_measures_what_a_fresh_check_measures(ws: Workspace) -> None:
    with running(ws, "fresh") as daemon:
        fresh, again = daemon.run_now("clf"), daemon.run_now("clf")
        assert warm(fresh)["session_built"] is True and warm(again)["session_built"] is True
        assert warm(fresh)["pid"] != warm(again)["pid"] and not daemon.pool.pids(), "fresh: a worker per check"
    with running(ws) as daemon:
        first, second, third = (daemon.run_now("clf") for _ in range(3))
    assert fresh.verdict is first.verdict is second.verdict is third.verdict is Verdict.PASS
    assert warm(first)["session_built"] is True and first.timings["load_s"] > 0
    assert warm(second)["session_built"] is False and second.timings["load_s"] == 0.0
    assert warm(first)["pid"] == warm(third)["pid"] and warm(third)["checks"] == 3
    assert numbers(fresh) == numbers(first) == numbers(third)
    assert fresh.model_sha256 == third.model_sha256 and fresh.details["model"] == third.details["model"]


@pytest.mark.process
def test_the_session_builds_counter_is_1_after_20_checks_of_an_unchanged_model_and_2_after_it_changes(
    ws: Workspace,
) -> None:
    with running(ws) as daemon:
        assert session_builds(daemon, "clf") == 0.0
        results = [daemon.run_now("clf") for _ in range(20)]
        assert all(r.verdict is Verdict.PASS for r in results) and len({warm(r)["pid"] for r in results}) == 1
        assert session_builds(daemon, "clf") == 1.0
        ws.replace_model("clf", modelzoo.classifier(seed=1))
        assert daemon.run_now("clf").attribution == "model_changed"
        assert session_builds(daemon, "clf") == 2.0
        assert daemon.run_now("clf").verdict is Verdict.FAIL and session_builds(daemon, "clf") == 2.0


@pytest.mark.process
def test_a_model_swapped_under_a_warm_worker_is_model_changed_at_its_next_check(ws: Workspace) -> None:
    with running(ws) as daemon:
        assert daemon.run_now("clf").verdict is Verdict.PASS
        ws.replace_model("clf", modelzoo.classifier(seed=1))
        swapped = daemon.run_now("clf")
        assert swapped.verdict is Verdict.FAIL and swapped.attribution == "model_changed"
        assert warm(swapped)["model_hashed"] is True and warm(swapped)["session_built"] is True
        ws.replace_model("clf", modelzoo.classifier(seed=0))
        assert daemon.run_now("clf").verdict is Verdict.PASS, "the original file back: the baseline's numbers"


@pytest.mark.process
def test_a_swap_that_keeps_the_size_and_the_mtime_is_still_seen(ws: Workspace) -> None:
    path = ws.root / "models" / "clf.onnx"
    with running(ws) as daemon:
        assert daemon.run_now("clf").verdict is Verdict.PASS
        before = path.stat()
        ws.replace_model("clf", modelzoo.classifier(seed=1))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = path.stat()
        assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
        swapped = daemon.run_now("clf")
    assert swapped.attribution == "model_changed", "the ctime moved: the file was hashed again"


@pytest.mark.process
def test_a_benchset_tampered_between_warm_checks_is_a_benchset_error(ws: Workspace) -> None:
    with running(ws) as daemon:
        assert daemon.run_now("clf").verdict is Verdict.PASS
        sample = sorted((ws.root / "benchsets").rglob("*.npy"))[0]
        sample.write_bytes(sample.read_bytes()[:-8] + b"\x00" * 8)
        tampered = daemon.run_now("clf")
    assert tampered.verdict is Verdict.ERROR and tampered.reasons[0].code == "benchset_error", tampered.reasons


@pytest.mark.database
@pytest.mark.process
def test_a_reload_stops_the_workers_of_changed_and_removed_models_and_keeps_the_others(ws: Workspace) -> None:
    with running(ws) as daemon:
        daemon.run_now("clf"), daemon.run_now("spin")
        pids = daemon.pool.pids()
        assert set(pids) == {"clf", "spin"}
        ws.set("spin", timeout="4s")
        ws.write()
        assert daemon.reload()
        assert daemon.pool.pids() == {"clf": pids["clf"]}
        assert not pid_alive(pids["spin"]), "the changed model's worker was stopped"
        respawned = daemon.run_now("spin")
        assert respawned.verdict is Verdict.PASS and warm(respawned)["pid"] != pids["spin"]
        del ws.models["spin"], ws.benchsets["spin"]
        ws.write()
        assert daemon.reload()
        assert set(daemon.pool.pids()) == {"clf"} and not pid_alive(warm(respawned)["pid"])
        ws.extra["daemon"]["worker"] = "fresh"
        ws.write()
        assert daemon.reload() and daemon.pool.limit == 0
        assert not pid_alive(pids["clf"]), "switching to fresh checks stops every kept worker"
        assert warm(daemon.run_now("clf"))["session_built"] is True and not daemon.pool.pids()


@pytest.mark.process
def test_stop_returns_with_no_warm_worker_left(ws: Workspace) -> None:
    with running(ws) as daemon:
        daemon.run_now("clf"), daemon.run_now("spin")
        pids = list(daemon.pool.pids().values())
        assert len(pids) == 2
        daemon.stop()
        assert [pid for pid in pids if pid_alive(pid)] == []


@pytest.mark.database
@pytest.mark.process
def test_sigterm_stops_a_warm_daemon_and_leaves_no_child_behind(ws: Workspace) -> None:
    served = Served(ws, free_port())
    try:
        served.wait_until(lambda: len(check_children(served.process.pid)) == 2, "both warm workers", timeout=60)
        workers = check_children(served.process.pid)
    except BaseException:
        served.process.kill()
        raise
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(60) == 0
    served.log.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(pid_alive(pid) for pid in workers):
        time.sleep(0.05)
    assert [pid for pid in workers if pid_alive(pid)] == []
    assert "Traceback" not in (ws.root / "serve.log").read_text()


@pytest.mark.database
@pytest.mark.process
def test_a_benchset_manifest_edited_between_warm_checks_is_read_again(ws: Workspace) -> None:
    with running(ws) as daemon:
        assert daemon.run_now("clf").verdict is Verdict.PASS
        (manifest,) = (ws.root / "benchsets" / "clf-bench").rglob("manifest.yaml")
        text = manifest.read_text()
        first = text.index("sha256: ", text.index("samples:")) + len("sha256: ")
        manifest.write_text(text[:first] + "0" * 64 + text[first + 64 :])
        edited = daemon.run_now("clf")
        assert edited.verdict is Verdict.ERROR and edited.reasons[0].code == "benchset_error", edited.reasons
        manifest.write_text(text)
        assert daemon.run_now("clf").verdict is Verdict.PASS


@pytest.mark.process
@pytest.mark.parametrize("change", [{"warm_workers": 1}, {"worker": "fresh"}])
def test_a_reload_that_resizes_the_pool_never_kills_a_warm_check_in_flight(
    ws: Workspace, change: dict[str, Any]
) -> None:
    """Issue 30, B4: a SIGHUP changing ``daemon.warm_workers`` closed the pool, and its busy worker was
    SIGKILLed 10 s later (``error/crash`` "killed by SIGKILL"). A change applies as workers free up."""
    import threading

    ws.replace_model("spin", modelzoo.hang(iterations=15_000_000))  # one sample: a check of ~20 s or more
    ws.set("spin", timeout="120s")
    with running(ws, warm_workers=2) as daemon:
        daemon.run_now("clf")
        results: list[CheckResult] = []
        thread = threading.Thread(target=lambda: results.append(daemon.run_now("spin")))
        thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "spin" not in daemon.pool.pids():
            time.sleep(0.05)
        pids = daemon.pool.pids()
        ws.extra["daemon"].update(change)
        ws.write()
        reloaded_at = time.monotonic()
        assert daemon.reload()
        assert not pid_alive(pids["clf"]), "the idle worker (the least recently used) stops at once"
        thread.join(180)
        took = time.monotonic() - reloaded_at
        assert results, "the check never returned"
        checked = results[0]
        assert checked.verdict is not Verdict.ERROR, (checked.reasons, f"{took:.1f} s after the reload")
        assert took > 10, f"the check ended {took:.1f} s after the reload: too quick to show the old 10 s kill"
        if "warm_workers" in change:  # the size is 1 now: the busy worker is the one kept
            assert daemon.pool.pids() == {"spin": pids["spin"]}
        else:
            assert not pid_alive(pids["spin"]), "a retired worker stops once its check is done"
        assert daemon.pool.limit == (1 if "warm_workers" in change else 0)
        assert daemon.run_now("clf").verdict is Verdict.PASS
