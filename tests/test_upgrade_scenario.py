"""A real ONNX Runtime upgrade, end to end, through the command line and one SQLite store.

Two virtual environments share one workspace (config, model, benchmark set, baselines,
``onnxmon.db``): this test's own, with the current ONNX Runtime, and one built by
``scripts/ort-venv`` with an older release and everything else pinned alike. The baseline
is captured and checked under one release, then checked under the other, as a fleet sees an
upgrade (and a rollback). The tolerance is bitwise (``atol: 0, rtol: 0``), so the model's
real low-bit changes between releases fail the check; ``tests/modelzoo.layernorm_gelu``
differs in ~70% of its elements by at most a few ULP between 1.20.1 and 1.32.0, at every
graph optimization level (the LayerNorm and reduction kernels changed), so the difference
is the release's, not a fusion's.

What must be true afterwards: the failing run is attributed to ``env_changed`` and carries
the environment diff against its baseline; the history holds an ``environment_changed``
event whose diff names the ONNX Runtime versions, old and new, before the verdict flip.

The suite is ``upgrade``: building the second environment needs PyPI (about 20 s once; it
is cached in ``.cache/ort-<version>/``). Without a network it skips, unless CI lists
``upgrade`` in ``ONNXMON_REQUIRE``.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from monitor.cli.history_cmd import describe
from monitor.store import EventRecord, Store
from tests import modelzoo
from tests.stacks import OLDER_ORT, REPO, Stack, child_env, current_stack, older_stack
from tests.workspace import Workspace

pytestmark = pytest.mark.slow

MODEL = "ln"
BITWISE = {"atol": 0.0, "rtol": 0.0}


@dataclass(frozen=True)
class Scenario:
    """What the command line left behind after: capture and check on ``before``, check on ``after``."""

    before: Stack
    after: Stack
    first_check: dict[str, Any]
    second_check: dict[str, Any]
    second_exit_code: int
    history: list[dict[str, Any]]
    events: list[EventRecord]


def _onnxmon(stack: Stack, workspace: Path, *args: str, expect: Sequence[int] = (0,)) -> tuple[str, int]:
    """Run ``stack``'s ``onnxmon ARGS -c onnxmon.yaml`` in ``workspace``: its stdout and exit code."""
    command = [str(stack.onnxmon), *args, "-c", str(workspace / "onnxmon.yaml")]
    done = subprocess.run(command, cwd=workspace, env=child_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode in expect, (
        f"{' '.join(command)} (onnxruntime {stack.ort_version}) exited {done.returncode}:\n{done.stdout}{done.stderr}"
    )
    return done.stdout, done.returncode


def _check(stack: Stack, workspace: Path, expect: Sequence[int]) -> tuple[dict[str, Any], int]:
    """``onnxmon check MODEL --json``, recorded in the store: the one result and the exit code."""
    stdout, code = _onnxmon(stack, workspace, "check", MODEL, "--json", expect=expect)
    (result,) = json.loads(stdout)
    return result, code


@pytest.fixture(scope="module")
def current() -> Stack:
    return current_stack()


@pytest.fixture(scope="module")
def older() -> Stack:
    return older_stack(OLDER_ORT)


def _play(root: Path, before: Stack, after: Stack, reader: Stack) -> Scenario:
    """Capture and check under ``before``; switch to ``after``; check again; read the history with ``reader``."""
    workspace = Workspace(root)
    workspace.add_model(
        MODEL,
        modelzoo.layernorm_gelu(),
        count=4,
        tolerance={"default": BITWISE},
        session={"graph_optimization_level": "all", "intra_op_num_threads": 1},
    )
    workspace.write()
    _onnxmon(before, root, "baseline", "capture", MODEL, "--quiet")
    first, _ = _check(before, root, expect=(0,))
    second, code = _check(after, root, expect=(0, 1))
    history = json.loads(_onnxmon(reader, root, "history", MODEL, "--json")[0])
    with Store(f"sqlite:///{root / 'onnxmon.db'}") as store:
        events = store.events(model=MODEL)
    return Scenario(before, after, first, second, code, history, events)


@pytest.fixture(scope="module", params=["upgrade", "rollback"])
def scenario(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, current: Stack, older: Stack
) -> Scenario:
    """``upgrade``: baseline under the older release, then the current one; ``rollback``: the reverse."""
    before, after = (older, current) if request.param == "upgrade" else (current, older)
    return _play(tmp_path_factory.mktemp(request.param), before, after, reader=current)


def _ort_change(diff: Sequence[Mapping[str, Any]]) -> tuple[Any, Any] | None:
    """(old, new) of the ONNX Runtime version in a diff, under either spelling of the field.

    The check's ``env_diff`` uses envsnap field names (``onnxruntime.version``); the event's
    diff flattens the stored snapshot (``fields.onnxruntime.version.value``).
    """
    for entry in diff:
        if entry.get("field") in ("onnxruntime.version", "fields.onnxruntime.version.value"):
            return entry.get("old"), entry.get("new")
    return None


def test_the_second_environment_really_runs_the_older_release(current: Stack, older: Stack) -> None:
    probe = "import onnxruntime, monitor; print(onnxruntime.__version__, monitor.__file__)"
    version, module = subprocess.run(
        [str(older.python), "-c", probe], capture_output=True, text=True, check=True, env=child_env()
    ).stdout.split()
    assert version == OLDER_ORT != current.ort_version
    assert Path(module).is_relative_to(REPO)


def test_a_check_on_the_release_that_captured_the_baseline_is_bitwise_identical(scenario: Scenario) -> None:
    assert scenario.first_check["verdict"] == "pass"
    assert scenario.first_check["attribution"] is None
    (output,) = scenario.first_check["outputs"]
    assert output["metrics"]["max_abs_error"] == 0.0


def test_the_check_on_the_other_release_fails_and_is_attributed_to_the_environment(scenario: Scenario) -> None:
    result = scenario.second_check
    assert (scenario.second_exit_code, result["verdict"], result["attribution"]) == (1, "fail", "env_changed")
    (output,) = result["outputs"]
    assert [r["code"] for r in output["reasons"]] == ["atol_rtol"]
    # a quiet change: a few ULP, invisible under the default tolerance (atol 1e-5), caught bitwise
    assert 0.0 < output["metrics"]["max_abs_error"] < 1e-5


def test_the_failing_run_carries_the_env_diff_naming_both_releases(scenario: Scenario) -> None:
    diff = scenario.second_check["details"]["env_diff"]
    assert _ort_change(diff) == (scenario.before.ort_version, scenario.after.ort_version)
    assert next(d for d in diff if d["field"] == "onnxruntime.version")["stable"] is True


def test_the_history_shows_the_environment_change_before_the_failing_run(scenario: Scenario) -> None:
    oldest_first = list(reversed(scenario.history))
    kinds = [item["kind"] for item in oldest_first if item["kind"] not in ("baseline_captured", "baseline_promoted")]
    assert kinds == ["run", "environment_changed", "verdict_changed", "run"]
    first_run, change, flip, failing_run = (item for item in oldest_first if item["kind"] in set(kinds))
    assert (first_run["verdict"], failing_run["verdict"], failing_run["attribution"]) == ("pass", "fail", "env_changed")
    assert _ort_change(change["detail"]["diff"]) == (scenario.before.ort_version, scenario.after.ort_version)
    assert change["new"] == failing_run["environment_fingerprint"] != first_run["environment_fingerprint"]
    assert (flip["old"], flip["new"]) == ("pass", "fail")
    assert flip["run_id"] == change["run_id"] == failing_run["id"]


def test_the_store_records_one_environment_change_with_the_onnxruntime_versions(scenario: Scenario) -> None:
    (event,) = [e for e in scenario.events if e.kind == "environment_changed"]
    assert _ort_change(event.detail["diff"]) == (scenario.before.ort_version, scenario.after.ort_version)


def test_the_history_line_of_the_environment_change_names_the_onnxruntime_versions(scenario: Scenario) -> None:
    (event,) = [e for e in scenario.events if e.kind == "environment_changed"]
    line = describe(event)
    assert f"onnxruntime {scenario.before.ort_version} -> {scenario.after.ort_version}" in line or (
        f"onnxruntime.version {scenario.before.ort_version} -> {scenario.after.ort_version}" in line
    )


def test_the_diagnosis_of_the_failing_run_ranks_no_experiment_and_names_the_release(scenario: Scenario) -> None:
    """Issue 41: under the bitwise tolerance every knob's error ÷ tolerance is inf, and no knob moves the
    release's few-ULP change; a diagnosis that ranked knobs on "inf → inf" invented causes."""
    document = scenario.second_check["details"]["diagnosis"]
    ranked = [(h["cause"], h["basis"]) for h in document["hypotheses"]]
    assert ranked[0] == ("runtime_version", "evidence"), ranked
    assert all(basis != "experiment" for _, basis in ranked), ranked
    assert document["summary"].startswith("no experiment explains this drift; evidence: runtime_version ("), document
    assert f"'{scenario.before.ort_version}' → '{scenario.after.ort_version}'" in document["summary"]
    measured = [e for e in document["experiments"] if e["knob"] not in ("current", "repeat")]
    assert measured and all(e["measure"] is not None and e["effect"] == "none" for e in measured), measured
    assert not re.search(r"\binf\b", json.dumps(document["hypotheses"])), document["hypotheses"]
