"""What a check worker keeps between checks (``runtime/worker_state.py``), and that it still sees every change.

A worker keeps its session (rebuilt when the model file's digests or the session settings change),
the model file's digests by stat stamp (``files/stamped.py``: ``Digests``) and the environment's
process-constant parts. Everything else is read at every check, so a file changed between two
checks (with its size and mtime put back: the ctime still moves) is seen at the next one. Ground
truth: the numbers of a check by a new worker state, files written here.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from monitor import jsonsafe
from monitor.check import run_check
from monitor.config.plan import CheckPlan, plan_for
from monitor.files import modelfile, stamped
from monitor.results import CheckResult, Verdict
from monitor.runtime import envsnap
from monitor.runtime.worker_state import WorkerState
from tests import modelzoo
from tests.serving import two_models
from tests.workspace import Workspace


@pytest.fixture
def plan(tmp_path: Path) -> CheckPlan:
    ws = Workspace(tmp_path)
    two_models(ws)
    return plan_for(ws.settings(), "clf")


def numbers(result: CheckResult) -> str:
    outputs = [o.to_dict() for o in result.outputs]
    return jsonsafe.dumps([str(result.verdict), sorted(r.code for r in result.reasons), outputs])


def tamper_keeping_size_and_mtime(path: Path, edit: Any = None) -> None:
    """Flip the last byte (or apply ``edit``); put back the size and the mtime (the ctime still moves)."""
    before = path.stat()
    data = bytearray(path.read_bytes())
    if edit is None:
        data[-1] ^= 0x01
    else:
        data = bytearray(edit(bytes(data)))
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)


def settle() -> None:
    """Wait until files written so far are older than ``stamped.SETTLE_NS`` (a ctime cannot be set back)."""
    time.sleep(stamped.SETTLE_NS / 1e9 + 0.05)


def test_a_kept_session_is_built_once_for_an_unchanged_model_and_measures_what_a_new_worker_does(
    plan: CheckPlan,
) -> None:
    worker = WorkerState()
    results = [run_check(plan, worker=worker) for _ in range(20)]
    assert worker.session_builds == 1
    assert results[0].timings["load_s"] > 0 and all(r.timings["load_s"] == 0.0 for r in results[1:])
    assert {numbers(r) for r in results} == {numbers(run_check(plan))}
    assert all(r.verdict is Verdict.PASS for r in results)


def test_a_changed_model_file_rebuilds_the_session_and_is_model_changed_at_the_next_check(plan: CheckPlan) -> None:
    worker = WorkerState()
    run_check(plan, worker=worker), run_check(plan, worker=worker)
    modelzoo.save(modelzoo.classifier(seed=1), plan.model.path)  # other weights at the same path
    swapped = run_check(plan, worker=worker)
    assert worker.session_builds == 2
    assert any(r.code == "model_changed" for r in swapped.reasons), swapped.reasons
    assert numbers(swapped) == numbers(run_check(plan))


def test_a_model_tampered_with_its_size_and_mtime_restored_is_hashed_again(plan: CheckPlan) -> None:
    settle()
    worker = WorkerState()
    run_check(plan, worker=worker)
    computed = worker.digests.computed
    run_check(plan, worker=worker)
    assert worker.digests.computed == computed, "a settled, unchanged model file is not hashed again"

    def rename_producer(data: bytes) -> bytes:  # same length, still a valid model: only the digest moves
        assert b"onnxmon-tests" in data
        return data.replace(b"onnxmon-tests", b"onnxmon-tesTs")

    tamper_keeping_size_and_mtime(plan.model.path, rename_producer)
    changed = run_check(plan, worker=worker)
    assert worker.digests.computed == computed + 1
    assert changed.model_sha256 == modelfile.identify(plan.model.path).sha256
    assert any(r.code == "model_changed" for r in changed.reasons), changed.reasons
    assert worker.session_builds == 2, "the session of another digest is built again"


@pytest.mark.parametrize("which", ["benchset", "baseline"])
def test_a_tensor_file_tampered_between_checks_is_caught_at_the_next_check(plan: CheckPlan, which: str) -> None:
    worker = WorkerState()
    assert run_check(plan, worker=worker).verdict is Verdict.PASS
    root = plan.benchsets_dir if which == "benchset" else plan.baselines_dir
    path = sorted(root.rglob("*.npy" if which == "benchset" else "outputs/*.npy"))[0]
    tamper_keeping_size_and_mtime(path)
    tampered = run_check(plan, worker=worker)
    assert tampered.verdict is Verdict.ERROR and tampered.reasons[0].code == f"{which}_error", tampered.reasons


def test_baseline_json_edited_in_place_with_its_mtime_restored_is_seen_at_the_next_check(plan: CheckPlan) -> None:
    worker = WorkerState()
    assert run_check(plan, worker=worker).verdict is Verdict.PASS
    (meta,) = sorted((plan.baselines_dir / plan.name).rglob("baseline.json"))

    def other_sha(data: bytes) -> bytes:
        doc = json.loads(data)
        sha = doc["model_sha256"]
        doc["model_sha256"] = ("0" if sha[0] != "0" else "1") + sha[1:]
        return json.dumps(doc, indent=2, sort_keys=True).encode()

    before = meta.stat()
    meta.write_bytes(other_sha(meta.read_bytes()))
    os.utime(meta, ns=(before.st_atime_ns, before.st_mtime_ns))
    edited = run_check(plan, worker=worker)
    assert any(r.code == "model_changed" for r in edited.reasons), edited.reasons


def test_an_active_file_naming_another_baseline_is_seen_at_the_next_check(plan: CheckPlan) -> None:
    worker = WorkerState()
    run_check(plan, worker=worker)
    active = plan.baselines_dir / plan.name / "ACTIVE"
    temporary = active.with_name("ACTIVE.tmp")
    temporary.write_text("clf-gone\n")
    os.replace(temporary, active)  # as a promotion writes it
    moved = run_check(plan, worker=worker)
    assert moved.verdict is Verdict.ERROR and moved.reasons[0].code == "baseline_error", moved.reasons
    assert "clf-gone" in moved.reasons[0].detail


def test_a_new_benchset_version_is_seen_by_the_next_check(plan: CheckPlan) -> None:
    worker = WorkerState()
    assert "benchset_note" not in run_check(plan, worker=worker).details
    set_dir = plan.benchsets_dir / plan.benchset.name
    shutil.copytree(set_dir / "v1", set_dir / "v2")
    manifest = set_dir / "v2" / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("version: 1\n", "version: 2\n", 1))
    newer = run_check(plan, worker=worker)
    assert "newer version v2" in newer.details.get("benchset_note", ""), newer.details.keys()
    shutil.rmtree(set_dir / "v2")
    assert "benchset_note" not in run_check(plan, worker=worker).details


# --- the digest table -------------------------------------------------------------------------


def test_a_digest_is_kept_only_for_a_settled_file_and_computed_again_when_its_stamp_moves(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(b"a" * 1000)
    digests = stamped.Digests()
    first = digests.digest(path, modelfile.file_digests)
    assert digests.digest(path, modelfile.file_digests) == first and digests.computed == 2, "fresh: not kept"
    settle()
    digests.digest(path, modelfile.file_digests)
    assert digests.digest(path, modelfile.file_digests) == first and digests.computed == 3, "settled: kept"
    path.write_bytes(b"b" * 1000)  # same size: the mtime and ctime move
    assert digests.digest(path, modelfile.file_digests) == modelfile.file_digests(path) != first
    assert digests.computed == 4
    path.unlink()
    with pytest.raises(OSError):
        digests.digest(path, modelfile.file_digests)


# --- the environment's constant parts ---------------------------------------------------------


def test_the_constant_parts_are_probed_once_and_the_rest_at_every_snapshot() -> None:
    constant: dict[str, Any] = {}
    first = envsnap.capture(constant=constant, nvml=None, environ={"OMP_NUM_THREADS": "1"})
    again = envsnap.capture(constant=constant, nvml=None, environ={"OMP_NUM_THREADS": "2"})
    plain = envsnap.capture(nvml=None, environ={"OMP_NUM_THREADS": "2"})
    assert set(constant) == envsnap.PROCESS_CONSTANT_PARTS
    assert first.fields["env.OMP_NUM_THREADS"].value == "1" and again.fields["env.OMP_NUM_THREADS"].value == "2"
    volatile = {"host.load1"}
    assert {k: v for k, v in again.fields.items() if k not in volatile} == {
        k: v for k, v in plain.fields.items() if k not in volatile
    }
    assert again.fingerprint == plain.fingerprint


@pytest.mark.process
def test_onnxmon_checks_path_asks_a_worker_of_its_own_once(plan: CheckPlan) -> None:
    """``onnxmon check`` (``child.run_isolated`` without a pool): the daemon's worker code, one check, then gone."""
    from monitor.daemon import child
    from tests.test_isolate import pid_alive

    result, captured = child.run_isolated(plan, job=child.measure_only)
    note = result.details["worker"]
    assert result.verdict is Verdict.PASS and captured is None
    assert note["checks"] == 1 and note["session_built"] is True and note["pid"] != os.getpid()
    deadline = time.monotonic() + 5
    while pid_alive(note["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(note["pid"]), "the worker stops after its one check"
    assert numbers(result) == numbers(run_check(plan))
