"""``onnxmon rehearse --python``: an upgrade rehearsed on the upgrade suite's second runtime, through the CLI.

Production runs this environment's ONNX Runtime; the candidate is ``scripts/ort-venv``'s older release
(the same packages otherwise). Two models: ``ln`` (``modelzoo.layernorm_gelu``, bitwise tolerance),
whose LayerNorm kernels changed between the releases, and ``clf`` (a small classifier, default
tolerance), which they compute alike within it. Ground truth is plain ONNX Runtime and numpy run in
the candidate interpreter on the benchmark set's inputs against the baseline's outputs, never
onnxmon's own comparison.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.files import baselines, benchsets
from monitor.store import Store
from tests import modelzoo
from tests.stacks import Stack, child_env, current_stack, older_stack
from tests.workspace import Workspace

pytestmark = pytest.mark.slow

BITWISE = {"atol": 0.0, "rtol": 0.0}
DEFAULT = {"atol": 1e-5, "rtol": 1e-4}


@pytest.fixture(scope="module")
def stacks() -> tuple[Stack, Stack]:
    return current_stack(), older_stack()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, stacks: tuple[Stack, Stack]) -> Workspace:
    current, _ = stacks
    ws = Workspace(tmp_path_factory.mktemp("rehearse"))
    session = {"graph_optimization_level": "all", "intra_op_num_threads": 1}
    ws.add_model(
        "ln",
        modelzoo.layernorm_gelu(),
        count=4,
        tolerance={"default": BITWISE},
        session=session,
        decisions={"y": {"kind": "argmax", "axis": -1}},
    )
    ws.add_model("clf", modelzoo.classifier(), count=4, tolerance={"default": DEFAULT}, session=session)
    ws.write()
    for model in ("ln", "clf"):
        run(current, ws, "baseline", "capture", model, "--quiet")
    run(current, ws, "check", "--no-diagnose", expect=(0,))  # production's run on its own stack
    return ws


def run(stack: Stack, ws: Workspace, *args: str, expect: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(stack.onnxmon), *args, "-c", str(ws.config_file)],
        cwd=ws.root,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode in expect, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


_PLAIN_ORT = """
import json, sys
import numpy as np, onnxruntime as ort
model, data, atol, rtol = sys.argv[1], np.load(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
options = ort.SessionOptions()
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
options.intra_op_num_threads = 1
session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
inputs = [i.name for i in session.get_inputs()]
outputs = [o.name for o in session.get_outputs()]
worst, flips, rows = -1.0, 0, 0
for s in range(int(data["samples"])):
    got = session.run(None, {name: data[f"in/{s}/{name}"] for name in inputs})
    for name, actual in zip(outputs, got):
        b = data[f"out/{s}/{name}"].astype(np.float64)
        over = np.abs(np.asarray(actual).astype(np.float64) - b) - (atol + rtol * np.abs(b))
        worst = max(worst, float(over.max()))
        if name == "y":
            flips += int((np.argmax(actual, axis=-1) != np.argmax(data[f"out/{s}/{name}"], axis=-1)).sum())
            rows += int(np.prod(np.asarray(actual).shape[:-1]))
print(json.dumps({"beyond_tolerance": worst > 0, "version": ort.__version__, "flips": flips, "rows": rows}))
"""


def plain_ort(stack: Stack, ws: Workspace, model: str, tolerance: dict[str, float], tmp: Path) -> dict[str, Any]:
    """Whether plain ONNX Runtime of ``stack`` leaves the tolerance anywhere on the benchmark set (numpy rule)."""
    settings = ws.settings()
    bench = benchsets.open_benchset(settings.store.benchsets_dir, f"{model}-bench")
    active = baselines.active(settings.store.baselines_dir, model)
    assert active is not None
    arrays: dict[str, np.ndarray] = {"samples": np.array(len(bench))}
    for index in range(len(bench)):
        arrays |= {f"in/{index}/{k}": v for k, v in bench.load_sample(index).items()}
        arrays |= {f"out/{index}/{k}": v for k, v in active.sample_outputs(index).items()}
    data = tmp / f"{model}-truth.npz"
    np.savez(data, **arrays)
    done = subprocess.run(
        [str(stack.python), "-c", _PLAIN_ORT, str(ws.root / "models" / f"{model}.onnx"), str(data),
         str(tolerance["atol"]), str(tolerance["rtol"])],
        capture_output=True, text=True, check=True, env=child_env(), timeout=300,
    )  # fmt: skip
    found: dict[str, Any] = json.loads(done.stdout)
    assert found["version"] == stack.ort_version
    return found


@pytest.fixture(scope="module")
def rehearsal(workspace: Workspace, stacks: tuple[Stack, Stack]) -> dict[str, object]:
    current, older = stacks
    with Store(f"sqlite:///{workspace.root / 'onnxmon.db'}") as store:
        before = {r.model: r.id for r in store.latest_per_model()}
        events_before = len(store.events())
    done = run(current, workspace, "rehearse", "--python", str(older.python), "-o", "json", expect=(0, 1))
    with Store(f"sqlite:///{workspace.root / 'onnxmon.db'}") as store:
        after = {r.model: r.id for r in store.latest_per_model()}
        events_after = len(store.events())
        recent = store.recent_states(("ln", "clf"), None)
    return {
        "code": done.returncode,
        "report": json.loads(done.stdout),
        "latest": (before, after),
        "events": (events_before, events_after),
        "recent": recent,
    }


def test_go_and_no_go_are_exactly_where_plain_ort_of_the_candidate_leaves_the_tolerance(
    rehearsal: dict[str, object], workspace: Workspace, stacks: tuple[Stack, Stack], tmp_path: Path
) -> None:
    _, older = stacks
    report = rehearsal["report"]
    assert isinstance(report, dict)
    by_model = {m["model"]: m for m in report["models"]}
    plain = {
        "ln": plain_ort(older, workspace, "ln", BITWISE, tmp_path),
        "clf": plain_ort(older, workspace, "clf", DEFAULT, tmp_path),
    }
    truth = {model: bool(found["beyond_tolerance"]) for model, found in plain.items()}
    assert truth["ln"], "the releases differ on ln's LayerNorm: the scenario needs a real drift"
    assert {m: not by_model[m]["go"] for m in truth} == truth
    assert rehearsal["code"] == (1 if any(truth.values()) else 0)
    assert report["go"] is False
    assert by_model["ln"]["verdict"] == "fail" and "atol_rtol" in by_model["ln"]["reasons"]
    decided = by_model["ln"]["decisions"]["y"]
    assert (decided["kind"], decided["flipped"], decided["total"]) == (
        "argmax",
        plain["ln"]["flips"],
        plain["ln"]["rows"],
    )


def test_every_no_go_names_a_cause_and_the_candidate_names_the_release_change(
    rehearsal: dict[str, object], stacks: tuple[Stack, Stack]
) -> None:
    current, older = stacks
    report = rehearsal["report"]
    assert isinstance(report, dict)
    for model in report["models"]:
        if not model["go"]:
            assert model["likely_cause"] and model["likely_cause"]["cause"], model
    # issue 41: ln's few-ULP change is the release's; no knob of the candidate's replays moves it
    (ln,) = [m for m in report["models"] if m["model"] == "ln"]
    assert (ln["likely_cause"]["cause"], ln["likely_cause"]["basis"]) == ("runtime_version", "evidence"), ln
    assert ln["likely_cause"]["summary"].startswith("no experiment explains this drift; evidence: runtime_version")
    assert "confidence" not in ln["likely_cause"]
    candidate = report["candidate"]
    assert candidate["onnxruntime"] == older.ort_version
    (change,) = [c for c in candidate["environment_changes"] if c["field"] == "onnxruntime.version"]
    assert (change["old"], change["new"]) == (current.ort_version, older.ort_version)
    assert candidate["environment_changes"][0]["field"].endswith("version"), "versions before build strings"


def test_a_rehearsal_leaves_production_history_metrics_and_alerts_untouched(
    rehearsal: dict[str, object], workspace: Workspace, stacks: tuple[Stack, Stack]
) -> None:
    before, after = rehearsal["latest"]  # type: ignore[misc]
    assert before == after, "no candidate run becomes a model's latest run"
    events_before, events_after = rehearsal["events"]  # type: ignore[misc]
    assert events_before == events_after, "no environment_changed or verdict_changed from a candidate"
    recent = rehearsal["recent"]
    assert isinstance(recent, dict)
    assert recent["ln"].runs == 1 and not recent["ln"].failing, "the alert gauges count production's runs only"
    current, _ = stacks
    history = json.loads(run(current, workspace, "history", "ln", "-o", "json").stdout)
    runs = [item for item in history if item["kind"] == "run"]
    assert [r["candidate"] for r in runs] == [True, False], "the candidate run is shown, marked"
    table = run(current, workspace, "history", "ln").stdout
    assert "candidate" in table


def test_a_candidate_that_cannot_run_exits_three_and_measures_nothing(
    workspace: Workspace, stacks: tuple[Stack, Stack], tmp_path: Path
) -> None:
    current, _ = stacks
    not_python = tmp_path / "python"
    not_python.write_text("#!/bin/sh\nexit 7\n")
    not_python.chmod(0o755)
    for python in (str(tmp_path / "missing"), str(not_python), "/bin/true"):
        done = run(current, workspace, "rehearse", "--python", python, expect=(3,))
        assert "--python" in done.stderr and "Traceback" not in done.stderr


def wrapper(tmp_path: Path, name: str, body: str) -> Path:
    script = tmp_path / name
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


def test_a_candidate_without_onnxmons_own_dependencies_or_answering_garbage_exits_three(
    workspace: Workspace, stacks: tuple[Stack, Stack], tmp_path: Path
) -> None:
    """Half-installed (onnxmon and onnxruntime import, typer does not) is 'cannot run', not every model no-go."""
    current, older = stacks
    shadow = tmp_path / "shadow" / "typer"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'typer'\")\n")
    half = wrapper(tmp_path, "half", f'PYTHONPATH={shadow.parent}:$PYTHONPATH exec {older.python} "$@"')
    done = run(current, workspace, "rehearse", "--python", str(half), expect=(3,))
    assert "typer" in done.stderr and "Traceback" not in done.stderr and done.stdout == ""
    for name, body in (("number", "echo 42"), ("object", "echo '{}'"), ("bytes", r"printf '\377\376{'")):
        done = run(current, workspace, "rehearse", "--python", str(wrapper(tmp_path, name, body)), expect=(3,))
        assert "unexpected answer to the probe" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_candidate_whose_check_breaks_is_no_go_and_the_report_says_what_it_said(
    workspace: Workspace, stacks: tuple[Stack, Stack], tmp_path: Path
) -> None:
    current, older = stacks
    body = 'case " $* " in *" check "*) echo "libcudnn.so.9: cannot open shared object file" >&2; exit 1;; esac\n'
    broken = wrapper(tmp_path, "broken", body + f'exec {older.python} "$@"')
    done = run(current, workspace, "rehearse", "clf", "--python", str(broken), "--no-store", expect=(1,))
    assert "NO-GO  clf" in done.stdout and "why: crash: " in done.stdout and "libcudnn.so.9" in done.stdout
    (model,) = json.loads(run(current, workspace, "rehearse", "clf", "--python", str(broken), "--no-store",
                              "-o", "json", expect=(1,)).stdout)["models"]  # fmt: skip
    assert (model["go"], model["verdict"], model["likely_cause"]) == (False, "error", None)
    assert model["why"].startswith("crash: ") and "libcudnn.so.9" in model["why"]


def test_a_rehearsal_of_models_that_all_go_exits_zero(
    workspace: Workspace, stacks: tuple[Stack, Stack], tmp_path: Path
) -> None:
    current, older = stacks
    assert not plain_ort(older, workspace, "clf", DEFAULT, tmp_path)["beyond_tolerance"], "clf must stay within"
    done = run(current, workspace, "rehearse", "clf", "--python", str(older.python), "--no-store", expect=(0, 1))
    assert done.returncode == 0 and "GO: every model matches production" in done.stdout, done.stdout


def test_the_pages_and_the_api_show_the_candidate_beside_production(
    rehearsal: dict[str, object], workspace: Workspace
) -> None:
    from fastapi.testclient import TestClient

    from monitor.api.app import create_app
    from tests.test_metrics import RealDaemon

    with Store(f"sqlite:///{workspace.root / 'onnxmon.db'}") as store:
        client = TestClient(create_app(RealDaemon(workspace.settings(), store)))
        production = client.get("/api/v1/models/ln/runs").json()
        candidates = client.get("/api/v1/models/ln/runs", params={"candidates": "true"}).json()
        assert [r["candidate"] for r in production] == [False]
        assert [r["candidate"] for r in candidates] == [True] and candidates[0]["verdict"] == "fail"
        overview = client.get("/").text
        assert "Rehearsal" in overview and "no-go" in overview
        model_page = client.get("/models/ln").text
        assert "Rehearsals on candidate stacks" in model_page
        assert "candidate stack" in client.get(f"/runs/{candidates[0]['id']}").text
        assert "candidate stack" not in client.get(f"/runs/{production[0]['id']}").text


def test_a_candidate_that_hangs_is_cut_at_the_probe_timeout_with_everything_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import time

    from monitor.rehearse import candidate

    monkeypatch.setattr(candidate, "PROBE_TIMEOUT_S", 2.0)  # the real one is 120 s, for a slow first import
    pid_file = tmp_path / "child.pid"
    hangs = wrapper(tmp_path, "hangs", f"sleep 300 & echo $! > {pid_file}; wait")
    started = time.monotonic()
    with pytest.raises(candidate.CandidateUnusable, match="no answer to the probe within 2 s"):
        candidate.probe(hangs)
    assert time.monotonic() - started < 30
    child = int(pid_file.read_text())
    for _ in range(50):  # killed with its session; gone once reaped
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the hung candidate's child {child} outlived the probe")
