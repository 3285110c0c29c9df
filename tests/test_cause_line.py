"""One truthful cause line (issue 23): ``check``'s likely cause is ``diagnose``'s, through the CLI.

Real ONNX Runtime sessions on real models (the corpus forest of ``tests/diagnose_scenarios.py``,
``tests/modelzoo`` graphs built with onnx.helper). A reference baseline is written as ``onnxmon
reference torch`` stores one (``source: reference``, its ``reference.json`` with the input check,
the framework's outputs), computed here with numpy from the model's own definition: what an
eval-mode framework gives, or the outputs of inputs fed in another channel order.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from monitor import capture, jsonsafe
from monitor.cli import main
from monitor.config.plan import plan_for
from monitor.files import baselines, benchsets
from monitor.store import Store
from tests import modelzoo
from tests.diagnose_scenarios import SCENARIOS
from tests.workspace import Workspace

pytestmark = pytest.mark.slow


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    monkeypatch.chdir(tmp_path)
    return Workspace(tmp_path)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def diagnosed(capsys: pytest.CaptureFixture[str], config: str, model: str, *extra: str) -> dict:
    code, out = cli(capsys, "diagnose", model, "-c", config, "--json", *extra)
    assert code == 0, out
    return jsonsafe.loads(out)


def cause_line(out: str, model: str) -> str:
    starts = (f"{model}: likely cause", f"{model}: no experiment explains this drift")
    lines = [line for line in out.splitlines() if line.startswith(starts)]
    assert len(lines) == 1, out  # printed once
    return lines[0]


def latest_run(ws: Workspace, model: str) -> int:
    with Store(f"sqlite:///{ws.root / 'onnxmon.db'}") as store:
        return store.runs(model, limit=1)[0].id


def test_checks_likely_cause_has_the_cause_and_measured_effect_diagnose_ranks_first(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    SCENARIOS[0].build(ws)  # forest: baseline with 1 thread, production with 2
    config = str(ws.write())
    code, out = cli(capsys, "check", "forest", "-c", config)
    assert code == 1, out
    line = cause_line(out, "forest")
    document = diagnosed(capsys, config, "forest")
    top = document["hypotheses"][0]
    assert line == f"forest: {document['summary']}", (line, document["summary"])
    assert f"likely cause: {top['cause']} (measured: {top['evidence'][0]})" in line, (line, top)
    assert top["cause"] == "thread_count" and top["effect"]["kind"] == "restores"  # the scenario's truth
    assert not re.search(r"\d+%", line), "no weight: what was measured, not a probability"


def test_without_replays_check_ranks_from_the_evidence_and_prints_no_weight(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    SCENARIOS[0].build(ws)
    code, out = cli(capsys, "check", "forest", "-c", str(ws.write()), "--no-diagnose")
    line = cause_line(out, "forest")
    assert code == 1 and "likely cause (evidence only, not replayed): thread_count (" in line, line
    assert not re.search(r"\d+%", line) and "onnxmon diagnose forest" in line


def _rewrite_outputs(
    baseline: baselines.Baseline, make: Callable[[int, np.ndarray], np.ndarray], **meta_set: object
) -> None:
    """The stored outputs replaced by ``make(sample, stored)``; checksums and ``meta_set`` updated."""
    meta_path = baseline.directory / baselines.META_FILE
    meta = json.loads(meta_path.read_text(encoding="utf-8")) | meta_set
    for relative in list(meta["files"]):
        if relative.startswith("outputs/"):
            path = baseline.directory / relative
            sample = int(relative.split("/s")[1][:4])
            np.save(path, make(sample, np.load(path)), allow_pickle=False)
            meta["files"][relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    meta_path.write_text(json.dumps(meta), encoding="utf-8")


def _as_reference(
    baseline: baselines.Baseline, make: Callable[[int, np.ndarray], np.ndarray], mismatches: list[str]
) -> None:
    """Rewrite ``baseline`` as ``onnxmon reference torch`` stores one: the framework's outputs, its input check."""
    document = {"framework": "torch", "input_check": {"mismatches": [{"description": d} for d in mismatches]}}
    raw = json.dumps(document).encode()
    (baseline.directory / baselines.REFERENCE_DOC).write_bytes(raw)
    meta = json.loads((baseline.directory / baselines.META_FILE).read_text(encoding="utf-8"))
    files = {**meta["files"], baselines.REFERENCE_DOC: hashlib.sha256(raw).hexdigest()}
    _rewrite_outputs(baseline, make, source="reference", files=files)


def _inputs(ws: Workspace, name: str) -> list[dict[str, np.ndarray]]:
    settings = ws.settings()
    bench = benchsets.ensure(settings.benchset(f"{name}-bench"), settings.store.benchsets_dir)
    return [dict(bench.load_sample(i)) for i in range(len(bench))]


def _batchnorm(training: bool, channels: int = 3) -> onnx.ModelProto:
    inits = [
        numpy_helper.from_array(np.full(channels, v, np.float32), n)
        for n, v in (("s", 1.0), ("b", 0.0), ("m", 0.0), ("v", 1.0))
    ]
    outputs = ["y", "rm", "rv"] if training else ["y"]
    node = helper.make_node(
        "BatchNormalization",
        ["x", "s", "b", "m", "v"],
        outputs,
        name="bn",
        **({"training_mode": 1} if training else {}),
    )
    graph = helper.make_graph(
        [node],
        "bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", channels, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", channels, 4, 4])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    return model


def test_a_train_mode_batchnorm_lint_error_is_the_cause_and_the_attribution(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    ws.add_model("bn", _batchnorm(training=True), count=2, dims={"batch": 4})
    baseline = capture.capture_baseline(plan_for(ws.settings(), "bn"))
    inputs = _inputs(ws, "bn")
    # the framework in eval mode: running mean 0, variance 1, scale 1, shift 0 (eps 1e-5)
    _as_reference(baseline, lambda i, _: (inputs[i]["x"] / np.sqrt(1 + 1e-5)).astype(np.float32), [])
    config = str(ws.write())
    code, out = cli(capsys, "check", "bn", "-c", config)
    assert code == 1, out
    assert "lint: error batchnorm_training at bn" in out and "attribution: export" in out, out
    line = cause_line(out, "bn")
    assert "export_training_mode" in line and "no evidence points" not in line, line
    document = diagnosed(capsys, config, "bn")
    assert document["hypotheses"][0]["cause"] == "export_training_mode" and line == f"bn: {document['summary']}"


def test_an_input_mismatch_is_the_cause_and_the_attribution(ws: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    ws.add_model("cnn", modelzoo.small_cnn(channels=3, blocks=1), count=2, dims={"batch": 1})
    plan = plan_for(ws.settings(), "cnn")
    baseline = capture.capture_baseline(plan)
    # the reference consumed the channels in the other order: its outputs are those of flipped inputs
    import onnxruntime as ort

    session = ort.InferenceSession(str(plan.model.path), providers=["CPUExecutionProvider"])
    inputs = _inputs(ws, "cnn")
    flipped = [session.run(None, {k: v[:, ::-1].copy() for k, v in feeds.items()})[0] for feeds in inputs]
    described = "channel order: the reference consumed channels [2, 1, 0] of input 'x' (BGR vs RGB)"
    _as_reference(baseline, lambda i, stored: flipped[i].astype(stored.dtype), [described])
    config = str(ws.write())
    code, out = cli(capsys, "check", "cnn", "-c", config)
    assert code == 1 and "attribution: input_mismatch" in out, out
    line = cause_line(out, "cnn")
    assert "likely cause: input_mismatch (measured: " in line and "BGR vs RGB" in line, line
    document = diagnosed(capsys, config, "cnn")
    assert document["hypotheses"][0]["cause"] == "input_mismatch" and line == f"cnn: {document['summary']}"


def test_diagnose_after_a_passing_check_has_nothing_to_diagnose(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    SCENARIOS[0].build(ws)
    config = str(ws.write())
    assert cli(capsys, "check", "forest", "-c", config)[0] == 1
    failing = latest_run(ws, "forest")
    ws.set("forest", session={"intra_op_num_threads": 1})  # fixed: as the baseline had it
    config = str(ws.write())
    assert cli(capsys, "check", "forest", "-c", config)[0] == 0
    passing = latest_run(ws, "forest")
    code, out = cli(capsys, "diagnose", "forest", "-c", config)
    assert code == 0 and "nothing to diagnose" in out and "nondeterminism" not in out, out
    assert diagnosed(capsys, config, "forest")["hypotheses"] == []
    stored = diagnosed(capsys, config, "forest", "--run", str(passing))
    assert stored["hypotheses"] == [] and stored["experiments"] == []
    # asked for the failing run, it is diagnosed: the failure is deterministic, not nondeterminism
    document = diagnosed(capsys, config, "forest", "--run", str(failing))
    causes = [h["cause"] for h in document["hypotheses"]]
    assert causes and "nondeterminism" not in causes, document["hypotheses"]
    assert any("did not reproduce" in note for note in document["notes"])


def test_a_deterministic_failure_is_never_ranked_as_nondeterminism(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    model = modelzoo.classifier()
    ws.add_model("clf", model)
    capture.capture_baseline(plan_for(ws.settings(), "clf"))
    renamed = onnx.ModelProto()
    renamed.CopyFrom(model)
    renamed.producer_version = "swapped"  # same numbers, another file: fails by model_changed alone
    ws.replace_model("clf", renamed)
    config = str(ws.write())
    code, out = cli(capsys, "check", "clf", "-c", config)
    assert code == 1, out
    document = diagnosed(capsys, config, "clf")
    assert "nondeterminism" not in [h["cause"] for h in document["hypotheses"]], document["hypotheses"]


def test_an_incident_that_is_the_top_evidence_is_named_once(ws: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    ws.add_model("clf", modelzoo.classifier())
    baseline = capture.capture_baseline(plan_for(ws.settings(), "clf"))
    _rewrite_outputs(baseline, lambda _, stored: (stored * 1.01).astype(stored.dtype))  # numbers moved, nothing else
    config = str(ws.write())
    assert cli(capsys, "check", "clf", "-c", config)[0] == 1
    note = ["incident", "note", str(latest_run(ws, "clf")), "--cause", "gpu_throttling", "--text", "hot node"]
    assert cli(capsys, *note, "-c", config)[0] == 0
    code, out = cli(capsys, "check", "clf", "-c", config)
    line = cause_line(out, "clf")
    assert code == 1 and "evidence: gpu_throttling (similar to incident 1" in line, line
    assert line.count("similar to incident 1") == 1, line


@pytest.mark.parametrize("command", ["check", "diagnose"])
def test_a_similar_incidents_text_reaches_the_terminal_inert(
    ws: Workspace, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # before: the one cause line (and diagnose's) printed a noted fix as written: its ESC[2J cleared
    # the on-call engineer's terminal (click strips escapes only when stdout is not a terminal)
    from tests.test_cli_scripting import on_terminal

    ws.add_model("clf", modelzoo.classifier())
    baseline = capture.capture_baseline(plan_for(ws.settings(), "clf"))
    _rewrite_outputs(baseline, lambda _, stored: (stored * 1.01).astype(stored.dtype))
    config = str(ws.write())
    assert cli(capsys, "check", "clf", "-c", config)[0] == 1
    fix = "redeploy\x1b[2J\x1b]0;pwned\x07 now"
    note = ["incident", "note", str(latest_run(ws, "clf")), "--cause", "gpu_throttling", "--text", "t", "--fix", fix]
    assert cli(capsys, *note, "-c", config)[0] == 0
    screen = on_terminal(ws, command, "clf", columns=200, raw=True)
    assert "similar to incident 1" in screen, screen
    assert "\x1b[2J" not in screen and "\x1b]0;" not in screen, repr(screen)
    assert "redeploy\\x1b[2J" in screen, "shown, written out"
