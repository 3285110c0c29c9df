"""A warm worker's kept baseline metadata, lint report and environment probes, and its one watchdog thread.

What a warm worker keeps between checks must still be seen to change: ``ACTIVE`` and
``baseline.json`` by their stat stamps (an in-place edit with the mtime restored moves the ctime),
the environment's parts as often as each can change under a running process
(``runtime/envwarm.py``), and the run deadline by one long-lived thread that still ends an
overrunning run. Ground truth: a fresh check, a fresh snapshot, files written here.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
from pathlib import Path

import pytest

from monitor.check import run_check
from monitor.config.plan import CheckPlan, plan_for
from monitor.files.stamped import KeptFiles
from monitor.results import Verdict
from monitor.runtime import cpu, envsnap
from monitor.runtime.envwarm import WarmProbes
from monitor.runtime.gpu import cuda_entries
from monitor.runtime.kept import KeptModels
from monitor.runtime.watchdog import Deadline
from tests.serving import two_models
from tests.test_warm_files import FrozenTimes
from tests.workspace import Workspace


@pytest.fixture
def plan(tmp_path: Path) -> CheckPlan:
    ws = Workspace(tmp_path)
    two_models(ws)
    return plan_for(ws.settings(), "clf")


def meta_file(plan: CheckPlan) -> Path:
    (path,) = sorted((plan.baselines_dir / plan.name).rglob("baseline.json"))
    return path


def edit_model_sha_in_place(path: Path) -> None:
    """Change the recorded model sha256 (same length), then put back the mtime: only the ctime moves."""
    before = path.stat()
    data = json.loads(path.read_text())
    sha = data["model_sha256"]
    data["model_sha256"] = ("0" if sha[0] != "0" else "1") + sha[1:]
    path.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_baseline_json_edited_in_place_with_its_mtime_restored_is_seen_at_the_next_warm_check(plan: CheckPlan) -> None:
    kept = KeptModels()
    assert [run_check(plan, models=kept).verdict for _ in range(2)] == [Verdict.PASS] * 2
    edit_model_sha_in_place(meta_file(plan))
    edited = run_check(plan, models=kept)
    assert edited.verdict is Verdict.FAIL and "model_changed" in [r.code for r in edited.reasons], edited.reasons
    assert [r.code for r in edited.reasons] == [r.code for r in run_check(plan).reasons], "as a fresh check says"


def test_baseline_json_is_kept_between_warm_checks_until_the_full_rehash(plan: CheckPlan) -> None:
    # A file system whose timestamps never move: only the full re-read can see the edit. That the two
    # checks in between still pass shows the document is not read again at every check.
    kept = KeptModels(files=KeptFiles(rehash_every=4, stat=FrozenTimes()))
    verdicts = [run_check(plan, models=kept).verdict for _ in range(2)]
    edit_model_sha_in_place(meta_file(plan))
    verdicts += [run_check(plan, models=kept).verdict for _ in range(2)]
    rehashed = run_check(plan, models=kept)
    assert verdicts == [Verdict.PASS] * 4
    assert rehashed.verdict is Verdict.FAIL and "model_changed" in [r.code for r in rehashed.reasons]


def test_an_active_file_naming_another_baseline_is_seen_at_the_next_warm_check(plan: CheckPlan) -> None:
    kept = KeptModels()
    run_check(plan, models=kept), run_check(plan, models=kept)
    active = plan.baselines_dir / plan.name / "ACTIVE"
    temporary = active.with_name("ACTIVE.tmp")
    temporary.write_text("clf-gone\n")
    os.replace(temporary, active)  # as a promotion writes it
    moved = run_check(plan, models=kept)
    assert moved.verdict is Verdict.ERROR and moved.reasons[0].code == "baseline_error", moved.reasons
    assert "clf-gone" in moved.reasons[0].detail


# --- the environment's probes -------------------------------------------------------------------


def proc_tree(root: Path, libraries: list[Path], cpu_model: str = "Test CPU") -> Path:
    (root / "self").mkdir(parents=True, exist_ok=True)
    lines = [f"7f00000{i}000-7f00000{i}fff r-xp 00000000 08:01 {100 + i} {lib}" for i, lib in enumerate(libraries)]
    (root / "self" / "maps").write_text("\n".join(["00400000-00452000 r-xp 00000000 08:01 1 /usr/bin/python3", *lines]))
    (root / "self" / "cgroup").write_text("0::/\n")
    (root / "cpuinfo").write_text(f"model name\t: {cpu_model}\nflags\t\t: fpu avx avx2 fma\n")
    return root


def test_warm_cuda_probe_reads_the_maps_again_only_after_a_session_build_or_a_library_stamp_change(
    tmp_path: Path,
) -> None:
    cudart = tmp_path / "lib" / "libcudart.so.12"
    cudart.parent.mkdir()
    cudart.write_bytes(b"\x7fELF one")
    proc = proc_tree(tmp_path / "proc", [cudart])
    probes = WarmProbes()
    first = probes.cuda(proc, False)
    assert first["cuda.runtime.path"] == (str(cudart), False)
    cudnn = tmp_path / "lib" / "libcudnn.so.9"
    cudnn.write_bytes(b"\x7fELF")
    proc_tree(proc, [cudart, cudnn])  # mapped later, while the kept session runs
    assert probes.cuda(proc, False) == first, "kept: the mapped libraries' stamps did not move"
    probes.session_built()
    rebuilt = probes.cuda(proc, False)
    assert rebuilt["cuda.cudnn.path"] == (str(cudnn), False)
    assert rebuilt == cuda_entries(proc, query_versions=False), "what a fresh probe reads"
    proc_tree(proc, [cudart])
    cudart.write_bytes(b"\x7fELF two")  # a library file rewritten in place: its stamp moves
    assert "cuda.cudnn.path" not in probes.cuda(proc, False)


def test_warm_cpu_probe_keeps_the_cpu_model_and_reads_the_quota_at_every_check(tmp_path: Path) -> None:
    proc = proc_tree(tmp_path / "proc", [], cpu_model="First CPU")
    sys_root = tmp_path / "sys"
    (sys_root / "fs" / "cgroup").mkdir(parents=True)
    (sys_root / "fs" / "cgroup" / "cpu.max").write_text("200000 100000\n")
    probes = WarmProbes(refresh_every=3)
    probes.begin()
    assert probes.cpu(proc, sys_root)["cpu.quota_cores"] == (2.0, True)
    proc_tree(proc, [], cpu_model="Other CPU")
    (sys_root / "fs" / "cgroup" / "cpu.max").write_text("50000 100000\n")  # an in-place resize of the limit
    probes.begin()
    second = probes.cpu(proc, sys_root)
    assert second["cpu.quota_cores"] == (0.5, True) and second["cpu.model"] == ("First CPU", True)
    probes.begin(), probes.begin()  # the 4th capture: everything probed again
    assert probes.cpu(proc, sys_root)["cpu.model"] == ("Other CPU", True)


def test_warm_cpu_probe_finds_the_cgroup_limit_file_once_per_refresh_and_reads_it_every_check(tmp_path: Path) -> None:
    proc = proc_tree(tmp_path / "proc", [])
    (proc / "self" / "cgroup").write_text("0::/pod-a\n")
    cgroup = tmp_path / "sys" / "fs" / "cgroup"
    (cgroup / "pod-a").mkdir(parents=True)
    (cgroup / "pod-b").mkdir()
    (cgroup / "pod-a" / "cpu.max").write_text("100000 100000\n")
    (cgroup / "pod-b" / "cpu.max").write_text("300000 100000\n")
    probes = WarmProbes(refresh_every=3)
    probes.begin()
    assert probes.cpu(proc, tmp_path / "sys")["cpu.quota_cores"] == (1.0, True)
    (proc / "self" / "cgroup").write_text("0::/pod-b\n")  # the process moved to another cgroup
    (cgroup / "pod-a" / "cpu.max").write_text("max 100000\n")  # and the old one was resized
    probes.begin()
    assert probes.cpu(proc, tmp_path / "sys")["cpu.quota_cores"] == (None, True), "the kept file, read afresh"
    probes.begin(), probes.begin()  # the refresh: where the limit lives is found again
    assert probes.cpu(proc, tmp_path / "sys")["cpu.quota_cores"] == (3.0, True)
    assert cpu.cpu_quota_cores(proc, tmp_path / "sys") == 3.0, "what a fresh probe reads"


def test_a_warm_snapshot_has_the_fields_and_fingerprint_of_a_fresh_one() -> None:
    kept: dict[str, object] = {}
    probes = WarmProbes()
    warm = [envsnap.capture(kept=kept, probes=probes, environ={"OMP_NUM_THREADS": "1"}) for _ in range(3)]  # type: ignore[arg-type]
    fresh = envsnap.capture(environ={"OMP_NUM_THREADS": "1"})
    volatile = {"host.load1"}
    assert {k: v for k, v in warm[-1].fields.items() if k not in volatile} == {
        k: v for k, v in fresh.fields.items() if k not in volatile
    }
    assert warm[-1].fingerprint == fresh.fingerprint


# --- the watchdog -------------------------------------------------------------------------------


def watchdog_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "onnxmon-watchdog"]


def test_many_deadlines_share_one_thread_and_a_disarmed_one_never_fires() -> None:
    guards = []
    for _ in range(50):
        with Deadline(0.2) as guard:
            guards.append(guard)
    assert len(watchdog_threads()) == 1
    time.sleep(0.4)
    assert not any(g.fired.is_set() or g.run_options.terminate for g in guards)


def test_an_overrun_deadline_fires_on_time_even_behind_a_later_one() -> None:
    with Deadline(30) as late, Deadline(0.1) as soon:
        began = time.monotonic()
        assert soon.fired.wait(5), "the soonest deadline fired"
        waited = time.monotonic() - began
    assert soon.run_options.terminate and not late.fired.is_set()
    assert 0.09 <= waited < 2.0, waited


def _fires_in_child(queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    with Deadline(0.1) as guard:
        queue.put(guard.fired.wait(5))


@pytest.mark.process
def test_a_forked_child_gets_a_watchdog_of_its_own() -> None:
    with Deadline(0.2):  # the parent's thread exists before the fork
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_fires_in_child, args=(queue,))
        child.start()
        fired = queue.get(timeout=10)
        child.join(10)
    assert fired is True and child.exitcode == 0


# --- the lint report -----------------------------------------------------------------------------


def test_a_lint_cache_file_rewritten_under_a_running_process_is_read_again(tmp_path: Path) -> None:
    from monitor.exportcheck import lint_warnings
    from monitor.files.tensors import sha256_file
    from tests import modelzoo

    model = tmp_path / "clf.onnx"
    modelzoo.save(modelzoo.classifier(), model)
    digest, cache = sha256_file(model), tmp_path / "lint"

    def lint() -> bool:
        report, cached = lint_warnings.cached_lint(
            model, digest, support=None, varied=dict, inputs_key="k", directory=cache
        )
        assert report is not None
        return cached

    assert [lint(), lint(), lint()] == [False, True, True]
    (entry,) = cache.glob("*.json")
    data = json.loads(entry.read_text())
    data["key"]["inputs"] = "another"  # now the file answers another question: lint again
    entry.write_text(json.dumps(data))
    assert lint() is False
