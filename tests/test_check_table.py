"""``onnxmon check``'s table shows the verdict (issue 41): a model's own row, apart from its outputs' rows.

A check-level failure (a provider that fell back, a model file that changed under ``numeric: warn``)
fails the model while every output passes. The table must say ``fail`` on the model's row with the
check-level reason there, and never put that reason in an output's ``reasons`` cell as if it were
that output's. Real ONNX Runtime sessions through the real CLI (tab-separated, as when piped).
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from monitor import capture
from monitor.cli import main
from monitor.cli.check_cmd import MODEL_ROW
from monitor.config.plan import plan_for
from tests import modelzoo
from tests.workspace import Workspace

pytestmark = pytest.mark.process  # `check` runs each model in an isolated child


def table(capsys: pytest.CaptureFixture[str], ws: Workspace) -> tuple[int, list[dict[str, str]]]:
    """``onnxmon check`` piped: its exit code and the rows of its table, each keyed by the header."""
    code = main(["check", "-c", str(ws.write()), "--no-store", "--no-diagnose"])
    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split("\t")
    assert header[:3] == ["model", "output", "verdict"], lines
    rows = [dict(zip(header, line.split("\t"), strict=True)) for line in lines[1:] if "\t" in line]
    return code, rows


def model_row(rows: list[dict[str, str]], model: str) -> dict[str, str]:
    (row,) = [r for r in rows if r["output"] == MODEL_ROW and r["model"] == model]
    return row


def test_a_provider_fallback_prints_a_failing_model_row_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    ws = Workspace(tmp_path)
    ws.add_model("clf", modelzoo.classifier())
    capture.capture_baseline(plan_for(ws.settings(), "clf"))
    ws.set("clf", providers=["CUDAExecutionProvider", "CPUExecutionProvider"])  # none here: ORT falls back
    code, rows = table(capsys, ws)
    assert code == 1
    row = model_row(rows, "clf")
    assert row["verdict"] == "fail" and "provider_fallback" in row["reasons"], rows
    outputs = [r for r in rows if r["output"] not in (MODEL_ROW, "")]
    assert {r["output"] for r in outputs} == {"logits", "prob"}
    assert all(r["verdict"] == "pass" for r in outputs), "the numbers match: each output passes on its own"
    assert not any("provider_fallback" in r["reasons"] for r in outputs), "not an output's reason"


def test_a_model_change_under_numeric_warn_fails_on_the_model_row_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    ws = Workspace(tmp_path)
    model = modelzoo.layernorm_gelu()
    ws.add_model(
        "m",
        model,
        count=2,
        dims={"batch": 4},
        decisions={"y": {"kind": "argmax", "axis": -1}},
        tolerance={"default": {"numeric": "warn"}},
    )
    capture.capture_baseline(plan_for(ws.settings(), "m"))
    renamed = onnx.ModelProto()
    renamed.CopyFrom(model)
    renamed.producer_version = "swapped"  # the same numbers from a different file
    ws.replace_model("m", renamed)
    code, rows = table(capsys, ws)
    assert code == 1
    row = model_row(rows, "m")
    assert row["verdict"] == "fail" and "model_changed" in row["reasons"], rows
    (y,) = [r for r in rows if r["output"] == "y"]
    assert y["verdict"] == "pass" and "model_changed" not in y["reasons"], rows


def test_a_passing_model_has_a_passing_model_row_and_its_outputs_below(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    ws = Workspace(tmp_path)
    ws.add_model("clf", modelzoo.classifier())
    capture.capture_baseline(plan_for(ws.settings(), "clf"))
    code, rows = table(capsys, ws)
    assert code == 0
    assert [(r["model"], r["output"], r["verdict"]) for r in rows] == [
        ("clf", MODEL_ROW, "pass"),
        ("", "logits", "pass"),
        ("", "prob", "pass"),
    ]
