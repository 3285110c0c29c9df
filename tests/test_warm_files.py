"""A warm worker keeps the benchmark set and the baseline in memory, and still sees every change.

``runtime.kept.KeptModels`` reads the set's and the baseline's tensors through
``files.stamped.KeptFiles``: a steady-state check reads nothing from disk, a file whose stat stamp
moved is read and verified again at the very next check, and every ``rehash_every`` checks
everything is read and hashed in full, even when no stamp moved (a file system whose timestamps do
not move is stood in by an injected ``stat``). Ground truth: the numbers of a fresh check.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor import capture, jsonsafe
from monitor.check import run_check
from monitor.config.plan import CheckPlan, plan_for
from monitor.files.stamped import KeptFiles
from monitor.results import CheckResult, Verdict
from monitor.runtime import envsnap
from monitor.runtime.kept import KeptModels
from tests.serving import two_models
from tests.workspace import Workspace


@pytest.fixture
def plan(tmp_path: Path) -> CheckPlan:
    ws = Workspace(tmp_path)
    two_models(ws)
    return plan_for(ws.settings(), "clf")


def numbers(result: CheckResult) -> str:
    outputs = [(o.name, str(o.verdict), o.metrics.to_dict()) for o in result.outputs]
    return jsonsafe.dumps([str(result.verdict), sorted(r.code for r in result.reasons), outputs])


def note(result: CheckResult) -> dict[str, Any]:
    warm = result.details.get("warm")
    assert isinstance(warm, dict), result.details.keys()
    return warm


def benchset_file(plan: CheckPlan) -> Path:
    return sorted(plan.benchsets_dir.rglob("*.npy"))[0]


def baseline_file(plan: CheckPlan) -> Path:
    return sorted(plan.baselines_dir.rglob("outputs/*.npy"))[0]


def tamper_keeping_size_and_mtime(path: Path) -> None:
    """Flip the last byte of the array data; put back the size and the mtime (the ctime still moves)."""
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)


class FrozenTimes:
    """``os.stat`` of a file system whose timestamps never move: the first mtime and ctime seen, forever."""

    def __init__(self) -> None:
        self.first: dict[str, tuple[int, int]] = {}

    def __call__(self, path: Path) -> os.stat_result:
        st = os.stat(path)
        mtime, ctime = self.first.setdefault(str(path), (st.st_mtime_ns, st.st_ctime_ns))
        fields = list(st)
        fields[8], fields[9] = mtime // 10**9, ctime // 10**9  # st_mtime, st_ctime (whole seconds)
        return os.stat_result(fields, {"st_mtime_ns": mtime, "st_ctime_ns": ctime})


def test_a_steady_state_warm_check_reads_no_file_and_measures_what_a_fresh_check_measures(plan: CheckPlan) -> None:
    kept = KeptModels()
    first, second, third = (run_check(plan, models=kept) for _ in range(3))
    fresh = run_check(plan)
    assert first.verdict is Verdict.PASS
    assert note(first)["files_full_check"] is True and note(first)["files_read"] > 0
    assert note(second)["files_read"] == note(third)["files_read"] == 0, "everything came from memory"
    assert note(third)["files_kept_bytes"] > 0
    assert numbers(first) == numbers(second) == numbers(third) == numbers(fresh)


@pytest.mark.parametrize(("where", "code"), [(benchset_file, "benchset_error"), (baseline_file, "baseline_error")])
def test_a_file_tampered_with_its_size_and_mtime_restored_is_caught_at_the_next_check(
    plan: CheckPlan, where: Any, code: str
) -> None:
    kept = KeptModels()
    assert run_check(plan, models=kept).verdict is Verdict.PASS
    assert run_check(plan, models=kept).verdict is Verdict.PASS
    tamper_keeping_size_and_mtime(where(plan))
    tampered = run_check(plan, models=kept)
    assert tampered.verdict is Verdict.ERROR and tampered.reasons[0].code == code, tampered.reasons
    assert "sha256" in tampered.reasons[0].detail


@pytest.mark.parametrize(("where", "code"), [(benchset_file, "benchset_error"), (baseline_file, "baseline_error")])
def test_a_tampered_file_that_no_stamp_can_see_is_caught_at_the_next_full_rehash(
    plan: CheckPlan, where: Any, code: str
) -> None:
    kept = KeptModels(files=KeptFiles(rehash_every=4, stat=FrozenTimes()))
    verdicts = [run_check(plan, models=kept).verdict for _ in range(2)]
    tamper_keeping_size_and_mtime(where(plan))
    for _ in range(2):  # checks 3 and 4: the stamp looks unchanged, the kept (verified) arrays are used
        result = run_check(plan, models=kept)
        verdicts.append(result.verdict)
        assert note(result)["files_full_check"] is False
    rehashed = run_check(plan, models=kept)  # check 5: the full re-read every 4 checks
    assert verdicts == [Verdict.PASS] * 4 and kept.kept_files.full_check
    assert rehashed.verdict is Verdict.ERROR and rehashed.reasons[0].code == code, rehashed.reasons


def test_a_new_file_at_a_kept_path_is_read_again_and_a_file_gone_is_an_error(plan: CheckPlan) -> None:
    kept = KeptModels()
    run_check(plan, models=kept), run_check(plan, models=kept)
    path = baseline_file(plan)
    data = path.read_bytes()
    path.unlink()
    gone = run_check(plan, models=kept)
    assert gone.verdict is Verdict.ERROR and gone.reasons[0].code == "baseline_error", gone.reasons
    path.write_bytes(data)  # the same bytes again, as a new inode: read, verified, passes
    back = run_check(plan, models=kept)
    assert back.verdict is Verdict.PASS and note(back)["files_read"] >= 1


def test_a_symlink_swapped_in_for_a_kept_file_is_refused_at_the_next_check(plan: CheckPlan, tmp_path: Path) -> None:
    kept = KeptModels()
    run_check(plan, models=kept), run_check(plan, models=kept)
    path = benchset_file(plan)
    outside = tmp_path / "outside.npy"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)
    refused = run_check(plan, models=kept)
    assert refused.verdict is Verdict.ERROR and refused.reasons[0].code == "benchset_error"
    assert "outside" in refused.reasons[0].detail


def test_arrays_beyond_the_byte_budget_are_read_and_verified_at_every_check(plan: CheckPlan) -> None:
    kept = KeptModels(budget_bytes=0)
    run_check(plan, models=kept)
    steady = run_check(plan, models=kept)
    assert note(steady)["files_read"] > 0 and note(steady)["files_kept_bytes"] == 0
    assert numbers(steady) == numbers(run_check(plan))


def test_kept_arrays_are_read_only(plan: CheckPlan) -> None:
    files = KeptFiles()
    files.begin_check()
    path = benchset_file(plan)
    expected = np.load(path, allow_pickle=False)
    from monitor.files import tensors

    sha = tensors.sha256_file(path)
    array = files.load_npy(path, expect_sha256=sha)
    assert np.array_equal(array, expected) and files.load_npy(path, expect_sha256=sha) is array
    with pytest.raises(ValueError, match="read-only"):
        array[...] = 0


def test_a_warm_snapshot_probes_the_process_constant_parts_once_and_the_rest_each_time() -> None:
    kept: dict[str, Any] = {}
    first = envsnap.capture(kept=kept, nvml=None, environ={"OMP_NUM_THREADS": "1"})
    again = envsnap.capture(kept=kept, nvml=None, environ={"OMP_NUM_THREADS": "2"})
    plain = envsnap.capture(nvml=None, environ={"OMP_NUM_THREADS": "2"})
    assert set(kept) == envsnap.PROCESS_CONSTANT_PARTS
    assert first.fields["env.OMP_NUM_THREADS"].value == "1" and again.fields["env.OMP_NUM_THREADS"].value == "2"
    assert again.fingerprint == plain.fingerprint, "the same snapshot a fresh check takes"


def test_a_kept_benchset_manifest_that_goes_or_changes_is_seen_at_the_next_check(plan: CheckPlan) -> None:
    kept = KeptModels()
    run_check(plan, models=kept), run_check(plan, models=kept)
    manifest = sorted(plan.benchsets_dir.rglob("manifest.yaml"))[0]
    text = manifest.read_text()
    manifest.write_text(text.replace("sha256: ", "sha256: 0", 1))  # a checksum no file can match
    broken = run_check(plan, models=kept)
    assert broken.verdict is Verdict.ERROR and broken.reasons[0].code == "benchset_error", broken.reasons
    manifest.unlink()
    gone = run_check(plan, models=kept)
    assert gone.verdict is Verdict.ERROR and gone.reasons[0].code in {"benchset_error", "baseline_error"}
    manifest.write_text(text)
    assert run_check(plan, models=kept).verdict is Verdict.PASS


class CountingStat:
    """``os.stat``, counting the calls per path."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def __call__(self, path: Path) -> os.stat_result:
        self.calls[str(path)] = self.calls.get(str(path), 0) + 1
        return os.stat(path)


def test_a_steady_state_check_stats_each_kept_file_once(plan: CheckPlan) -> None:
    counting = CountingStat()
    kept = KeptModels(files=KeptFiles(stat=counting))
    run_check(plan, models=kept), run_check(plan, models=kept)
    counting.calls.clear()
    steady = run_check(plan, models=kept)
    assert note(steady)["files_read"] == 0
    outputs = {str(p) for p in (plan.baselines_dir / plan.model.name).rglob("outputs/*.npy")}
    assert outputs and outputs <= set(counting.calls), "every baseline output's stamp is checked"
    assert any(p.startswith(str(plan.benchsets_dir)) and p.endswith(".npy") for p in counting.calls)
    assert max(counting.calls.values()) == 1, {p: n for p, n in counting.calls.items() if n > 1}
    assert numbers(steady) == numbers(run_check(plan))


def test_a_kept_sample_is_not_reused_after_baseline_json_changes_what_its_files_must_hash_to(plan: CheckPlan) -> None:
    """A sample's outputs are kept as one bundle; a new ``baseline.json`` (a new owner) builds it again.

    The output files themselves are untouched, so only the owner rule can see the change: a bundle
    answered on the files' stamps alone would pass a check whose baseline no longer vouches for them.
    """
    import json

    kept = KeptModels()
    run_check(plan, models=kept), run_check(plan, models=kept)
    meta_path = next((plan.baselines_dir / plan.model.name).rglob("baseline.json"))
    meta = json.loads(meta_path.read_text())
    output = sorted(name for name in meta["files"] if name.startswith("outputs/"))[0]
    meta["files"][output] = "0" * 64
    meta_path.write_text(json.dumps(meta))
    result = run_check(plan, models=kept)
    assert result.verdict is Verdict.ERROR and result.reasons[0].code == "baseline_error", result.reasons
    assert "sha256" in result.reasons[0].detail


def test_a_sample_bundle_is_answered_while_its_files_and_owner_are_unchanged() -> None:
    """``KeptFiles.bundle``: one build per owner and stamps; a moved stamp or a new owner builds again."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "a.npy"
        np.save(path, np.arange(4, dtype=np.float32))
        from monitor.files import tensors

        sha = tensors.sha256_file(path)
        files, builds = KeptFiles(), []
        owner = object()

        def build() -> dict[str, np.ndarray]:
            builds.append(1)
            return {"a": files.load_npy(path, expect_sha256=sha)}

        for _ in range(3):
            files.begin_check()
            got = files.bundle(("k",), owner, build)
            assert np.array_equal(got["a"], np.arange(4)) and len(builds) == 1
        got["b"] = got["a"]  # the caller's dict is its own
        files.begin_check()
        assert set(files.bundle(("k",), owner, build)) == {"a"} and len(builds) == 1
        files.begin_check()
        files.bundle(("k",), object(), build)
        assert len(builds) == 2, "another owner: built again"
        os.utime(path, ns=(1, 1))
        files.begin_check()
        files.bundle(("k",), owner, build)
        assert len(builds) == 3, "a moved stamp: built again"
        unverified = KeptFiles()
        for _ in range(2):
            unverified.begin_check()
            unverified.bundle(("k",), owner, lambda: {"a": unverified.load_npy(path)})
        assert unverified.read == 1, "an array that is not kept (no checksum) is read at every check"


def test_a_new_benchset_version_is_seen_by_the_next_warm_check(plan: CheckPlan) -> None:
    """A set's list of versions is kept on its directory's stamp: a version added is listed at once."""
    import shutil

    kept = KeptModels()
    run_check(plan, models=kept), run_check(plan, models=kept)
    steady = run_check(plan, models=kept)
    assert "benchset_note" not in steady.details
    set_dir = plan.benchsets_dir / plan.benchset.name
    shutil.copytree(set_dir / "v1", set_dir / "v2")
    manifest = set_dir / "v2" / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("version: 1\n", "version: 2\n", 1))
    newer = run_check(plan, models=kept)
    assert "newer version v2" in newer.details.get("benchset_note", ""), newer.details.keys()
    assert numbers(newer) == numbers(run_check(plan))
    shutil.rmtree(set_dir / "v2")
    assert "benchset_note" not in run_check(plan, models=kept).details


def test_nothing_parsed_from_a_file_changed_within_a_clock_tick_is_kept(tmp_path: Path) -> None:
    """A change in the same clock tick as the last one leaves mtime and ctime as they were, so a value
    parsed from a file that changed that recently is parsed again at the next check."""
    import time

    path = tmp_path / "manifest.yaml"
    path.write_text("a")
    calls: list[int] = []

    def parse() -> str:
        calls.append(1)
        return path.read_text()

    recent = time.time_ns() + 10**10  # frozen, and never more than a clock tick in the past

    def just_changed(p: Path) -> os.stat_result:  # a file whose stamp never moves but changed "just now"
        st = os.stat(p)
        return os.stat_result(list(st), {"st_mtime_ns": recent, "st_ctime_ns": recent})

    for stat, parses in ((just_changed, 2), (os.stat, 1)):
        calls.clear()
        files = KeptFiles(stat=stat)
        time.sleep(0.05)  # the real file last changed well over a clock tick ago
        for _ in range(2):
            files.begin_check()
            assert files.parsed(path, parse) == "a"
        assert len(calls) == parses, stat


def test_a_steady_state_comparison_is_reused_only_against_the_same_kept_baseline_arrays(plan: CheckPlan) -> None:
    """``compare/memo.py`` at the check: the last check's stats while the outputs keep their bits and the
    baseline its kept arrays; a promoted baseline (same numbers, new files) or a full re-read compares anew."""
    kept = KeptModels(rehash_every=5)
    fresh = numbers(run_check(plan))
    results = [run_check(plan, models=kept) for _ in range(3)]
    assert [note(r)["comparison_reused"] for r in results] == [False, True, True]
    capture.capture_baseline(plan, promote=True)
    results += [run_check(plan, models=kept) for _ in range(3)]  # check 6 is the full re-read of rehash_every=5
    assert [note(r)["comparison_reused"] for r in results[3:]] == [False, True, False]
    assert {numbers(r) for r in results} == {fresh}
    assert "comparison_reused" not in (run_check(plan).details.get("warm") or {}), "a fresh check says nothing"
