"""The runbook's commands, run as on-call would run them, against a real history with a stack change.

Every ``onnxmon ...`` command quoted in docs/runbook.md is executed here (placeholders filled in)
against a workspace whose baseline was captured on an older stack: its recorded environment
snapshot says ONNX Runtime 1.17.0, a first run was recorded from that stack, and a real check on
this machine follows. None of them may be a usage error, and the triage commands must name the
field that changed. A command added to the runbook is run by this test without editing it.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from monitor.results import CheckResult
from monitor.store import Store
from tests import modelzoo, tiers
from tests.conftest import onnxmon
from tests.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
RUNBOOK = (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
OLD_ORT = "1.17.0"


def runbook_commands() -> list[str]:
    """Every distinct ``onnxmon ...`` in backticks, in the order the runbook first quotes it."""
    found = re.findall(r"`(onnxmon [^`]+)`", RUNBOOK)
    return list(dict.fromkeys(c.strip() for c in found))


def older_stack(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The same snapshot with ``onnxruntime.version`` of an older release; its fingerprint recomputed."""
    from monitor.runtime.envsnap import EnvSnapshot

    fields = json.loads(json.dumps(snapshot["fields"]))
    assert fields["onnxruntime.version"]["value"] != OLD_ORT and fields["onnxruntime.version"]["stable"]
    fields["onnxruntime.version"]["value"] = OLD_ORT
    return EnvSnapshot.from_dict({"fields": fields, "captured_at": snapshot["captured_at"]}).to_dict()


@pytest.fixture(scope="module")
@tiers.starts("process")  # its check runs in a worker process
def history(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    ws = Workspace(tmp_path_factory.mktemp("oncall"))
    ws.add_model("clf", modelzoo.classifier())
    ws.add_model("other", modelzoo.classifier(seed=1))  # the runbook's commands must work with several models
    config = str(ws.write())
    assert onnxmon("baseline", "capture", "other", "--promote", "-c", config).exit_code == 0
    captured = onnxmon("baseline", "capture", "clf", "--promote", "-o", "json", "-c", config)
    assert captured.exit_code == 0, captured.output
    baseline_dir = Path(json.loads(captured.stdout)["directory"])
    meta = json.loads((baseline_dir / "baseline.json").read_text())
    old = older_stack(meta["environment"])
    meta["environment"] = old  # the baseline was validated on the older stack
    (baseline_dir / "baseline.json").write_text(json.dumps(meta, indent=2))
    # The run before the upgrade: the same check's numbers, measured (as recorded then) on ORT 1.17.0.
    measured = onnxmon("check", "clf", "--no-store", "-o", "json", "-c", config)
    assert measured.exit_code in (0, 1), measured.output
    (before,) = json.loads(measured.stdout)
    before["environment"] = old
    before["started_at"], before["finished_at"] = 1.0e9, 1.0e9 + 1
    with Store(f"sqlite:///{ws.root / 'onnxmon.db'}") as store:
        store.record_run(CheckResult.from_dict(before))  # same node as the CLI check below (none set)
    after = onnxmon("check", "clf", "-c", config)  # the upgraded stack: this machine, recorded
    assert after.exit_code in (0, 1), after.output
    return {"config": config, "old": old["fingerprint"], "baseline": json.loads(captured.stdout)["id"]}


def test_the_runbook_quotes_the_triage_commands() -> None:
    commands = runbook_commands()
    assert "onnxmon env diff" in commands and "onnxmon env diff FINGERPRINT" in commands
    assert "onnxmon history MODEL" in commands


@pytest.mark.process
def test_every_runbook_command_runs_against_a_history_with_a_stack_change(history: dict[str, str]) -> None:
    shown = onnxmon("history", "clf", "-c", history["config"]).stdout
    assert "environment_changed" in shown and f"onnxruntime.version {OLD_ORT}" in shown
    printed = re.search(rf"\b({history['old'][:16]})\b", shown)
    assert printed, "history prints the old fingerprint"
    # the run id as on-call reads it: the `run` column of the history table (tab-separated when piped)
    rows = [line.split("\t") for line in shown.splitlines()]
    column = rows[0].index("run")
    run_id = next(row[column] for row in rows[1:] if row[column])
    runs = json.loads(onnxmon("history", "clf", "-o", "json", "-c", history["config"]).stdout)
    assert int(run_id) in {item["id"] for item in runs if item["kind"] == "run"}
    noted = onnxmon(
        "incident", "note", run_id, "--cause", "runtime_version", "--text", "t", "-o", "json", "-c", history["config"]
    )
    assert noted.exit_code == 0, noted.output
    values = {
        "RUN_ID": run_id,
        "N": str(json.loads(noted.stdout)["id"]),
        "CODE": "runtime_version",
        "MODEL": "clf",
        "FINGERPRINT": printed.group(1),
        "FILE": history["config"],
        "BASELINE_ID": history["baseline"],
    }
    outputs = {}
    for command in runbook_commands():
        words = shlex.split(command)[1:]
        if words[0] == "serve":
            continue
        argv = [values.get(w, w) for w in words]
        if "-c" not in argv:
            argv += ["-c", history["config"]]
        if argv[:2] == ["baseline", "promote"] and "captured" in outputs:
            argv[2] = json.loads(outputs["captured"])["id"]  # the candidate the previous step recorded
        if argv[:2] == ["baseline", "capture"]:
            argv += ["-o", "json"]
        result = onnxmon(*argv)
        assert result.exit_code != 2, f"`{command}` is a usage error: {result.output}"
        outputs["captured" if argv[:2] == ["baseline", "capture"] else command] = result.stdout
    for triage in ("onnxmon env diff", "onnxmon env diff FINGERPRINT"):
        assert "onnxruntime.version" in outputs[triage] and OLD_ORT in outputs[triage], outputs[triage]
    assert "fingerprint differs" in outputs["onnxmon env diff"]


def test_env_diff_by_every_printed_length_of_the_old_fingerprint(history: dict[str, str]) -> None:
    for digits in (12, 16, 64):
        result = onnxmon("env", "diff", history["old"][:digits], "-o", "json", "-c", history["config"])
        assert result.exit_code == 1, result.output  # a different stack: exit 1, like any difference
        data = json.loads(result.stdout)
        assert data["a"] == history["old"]
        changed = {c["field"]: c for c in data["changes"]}
        assert changed["onnxruntime.version"]["old"] == OLD_ORT and changed["onnxruntime.version"]["stable"]
