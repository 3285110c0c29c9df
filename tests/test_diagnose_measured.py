"""Issue 41: a diagnosis reports only what it measured, on scales that stay finite under any tolerance.

Real ONNX Runtime sessions on real graphs (``tests/modelzoo.layernorm_gelu``, the corpus forest),
through the engine and the CLI, a real SQLite history and the real run page. The tolerance is
bitwise (``atol: 0, rtol: 0``), as in the project's upgrade scenario, so the check's error ÷
tolerance is infinite for every differing element. Ground truth is plain ``onnxruntime`` and numpy
on the benchmark set's inputs and the baseline's stored outputs, never onnxmon's own comparison.

Three situations:

* nothing any knob does moves the drift (the baseline as another ONNX Runtime release stored it:
  its numbers a few ULP away on most elements): no experiment may be ranked, the line says "no
  experiment explains this drift" and names the evidence (before: four knobs at 50 % as
  "inf → inf (better, still over the line)");
* one knob explains it (the baseline ran unoptimized, production fuses LayerNorm and GELU at level
  ``all``): that knob ranks first with its measured effect, max |error| before → 0;
* a setting already in effect (``intra_op_num_threads: 1``) is never suggested, and a fix that
  changes production says so.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from fastapi.testclient import TestClient

from monitor import capture, jsonsafe
from monitor.api.app import create_app
from monitor.check import run_check
from monitor.cli import main
from monitor.cli.diagnose_cmd import render
from monitor.config.plan import CheckPlan, plan_for
from monitor.config.settings import ModelConfig, ProviderSpec, SessionConfig
from monitor.daemon.diagnosis import isolated
from monitor.diagnose import fixes, knobs
from monitor.diagnose.engine import diagnose
from monitor.diagnose.result import Diagnosis
from monitor.files import baselines, benchsets
from monitor.results import Verdict
from monitor.store import Store
from tests import modelzoo
from tests.diagnose_scenarios import FOREST
from tests.test_metrics import RealDaemon
from tests.workspace import Workspace

pytestmark = pytest.mark.slow

BITWISE = {"default": {"atol": 0.0, "rtol": 0.0}}
PRODUCTION = {"graph_optimization_level": "all", "intra_op_num_threads": 1}
OLD_PERCENT = re.compile(r"\b\d+%")  # "50%": the fixed per-rule weight the old ranking printed
INF = re.compile(r"\binf\b")  # "error ratio inf → inf"
_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    monkeypatch.chdir(tmp_path)
    return Workspace(tmp_path)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def as_other_release(baseline: baselines.Baseline, version: str, *, share: float = 0.7, seed: int = 0) -> None:
    """Rewrite ``baseline`` as another ONNX Runtime release stored it: its version, and ``share`` of its
    float outputs' elements one ULP away (a kernel that rounds differently); checksums updated."""
    rng = np.random.default_rng(seed)
    meta_path = baseline.directory / baselines.META_FILE
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["environment"]["fields"]["onnxruntime.version"]["value"] = version
    for relative in list(meta["files"]):
        if relative.startswith("outputs/"):
            path = baseline.directory / relative
            values = np.load(path, allow_pickle=False)
            moved = np.where(rng.random(values.shape) < share, np.nextafter(values, np.inf), values)
            np.save(path, moved.astype(values.dtype), allow_pickle=False)
            meta["files"][relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    meta_path.write_text(json.dumps(meta), encoding="utf-8")


def plain_max_error(plan: CheckPlan, samples: list[int], **options: Any) -> float:
    """Plain onnxruntime (``options`` as SessionOptions attributes) against the stored baseline: max |a - b|."""
    session_options = ort.SessionOptions()
    session_options.intra_op_num_threads = 1
    for name, value in options.items():
        setattr(session_options, name, value)
    session = ort.InferenceSession(str(plan.model.path), session_options, providers=["CPUExecutionProvider"])
    baseline = baselines.active(plan.baselines_dir, plan.name)
    assert baseline is not None
    bench = benchsets.open_benchset(plan.benchsets_dir, baseline.meta.benchset, baseline.meta.benchset_version)
    worst = 0.0
    for index in samples:
        got = session.run(None, dict(bench.load_sample(index)))
        for output, actual in zip(session.get_outputs(), got, strict=True):
            expected = baseline.sample_outputs(index)[output.name].astype(np.float64)
            worst = max(worst, float(np.abs(actual.astype(np.float64) - expected).max()))
    return worst


def _release_drift(ws: Workspace) -> CheckPlan:
    ws.add_model("ln", modelzoo.layernorm_gelu(), count=4, tolerance=BITWISE, session=PRODUCTION)
    plan = plan_for(ws.settings(), "ln")
    as_other_release(capture.capture_baseline(plan), "1.20.1")
    return plan


def test_a_bitwise_drift_no_knob_moves_ranks_no_experiment_and_says_so(ws: Workspace) -> None:
    plan = _release_drift(ws)
    result = run_check(plan)
    assert result.verdict is Verdict.FAIL and result.outputs[0].error_ratio == float("inf")
    diagnosis = diagnose(plan, result, isolate=isolated, budget_s=120)
    document = jsonsafe.loads(jsonsafe.dumps(diagnosis.to_dict()))
    replayed = next(e for e in document["experiments"] if e["knob"] == "repeat")["samples"]
    # ground truth: plain onnxruntime at every optimization level and execution mode stays off the baseline
    for level in ("disable", "basic", "extended", "all"):
        assert plain_max_error(plan, replayed, graph_optimization_level=_LEVELS[level]) > 0
    assert diagnosis.before is not None
    assert diagnosis.before.max_abs_error == plain_max_error(plan, replayed, graph_optimization_level=_LEVELS["all"])
    for experiment in diagnosis.experiments:
        if experiment.knob == "graph_optimization_level":  # each experiment's measure is plain numpy's figure
            truth = plain_max_error(plan, replayed, graph_optimization_level=_LEVELS[experiment.value])
            assert experiment.measure is not None and experiment.measure.max_abs_error == truth, experiment
    assert all(e.measure is not None for e in diagnosis.experiments), document["experiments"]
    # nothing is ranked by experiment, nothing reads as a probability, nothing says inf → inf
    assert [h for h in document["hypotheses"] if h["basis"] == "experiment"] == [], document["hypotheses"]
    assert all("confidence" not in h for h in document["hypotheses"])
    assert document["hypotheses"][0]["cause"] == "runtime_version"
    assert document["summary"].startswith("no experiment explains this drift; evidence: runtime_version ("), document
    text = render(document)
    assert "inf → inf" not in text and not INF.search(json.dumps(document["hypotheses"])), text
    assert not OLD_PERCENT.search(text), text
    assert "execution_mode: parallel" not in text and "intra_op_num_threads: 1" not in text, text


def test_check_the_run_page_and_the_stored_diagnosis_say_no_experiment_explains_it(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    _release_drift(ws)
    config = str(ws.write())
    code, out = cli(capsys, "check", "ln", "-c", config)
    assert code == 1, out
    (line,) = [line for line in out.splitlines() if line.startswith("ln: ")]
    assert line.startswith("ln: no experiment explains this drift; evidence: runtime_version"), line
    assert not INF.search(line) and not OLD_PERCENT.search(line), line
    with Store(f"sqlite:///{ws.root / 'onnxmon.db'}") as store:
        run_id = store.runs("ln", limit=1)[0].id
        client = TestClient(create_app(RealDaemon(ws.settings(), store)), raise_server_exceptions=False)
        html = client.get(f"/runs/{run_id}").text
        stored = client.get(f"/api/v1/runs/{run_id}/diagnosis").json()
    assert stored["format"] == 2 and stored["summary"] == line.removeprefix("ln: ")
    assert "no experiment explains this drift" in html and "evidence" in html
    assert "inf → inf" not in html and not OLD_PERCENT.search(
        html.split("Diagnosis", 1)[1].split("Note an incident")[0]
    )


def test_the_one_knob_that_explains_a_bitwise_drift_ranks_first_with_its_measured_effect(ws: Workspace) -> None:
    ws.add_model(
        "ln",
        modelzoo.layernorm_gelu(),
        count=4,
        tolerance=BITWISE,
        session={**PRODUCTION, "graph_optimization_level": "disable"},
    )
    capture.capture_baseline(plan_for(ws.settings(), "ln"))
    ws.set("ln", session=PRODUCTION)  # production fuses LayerNorm and GELU: other low bits
    plan = plan_for(ws.settings(), "ln")
    result = run_check(plan)
    assert result.verdict is Verdict.FAIL
    diagnosis = diagnose(plan, result, isolate=isolated, budget_s=120)
    top = diagnosis.top
    assert top is not None and top.cause == "graph_optimization" and top.basis == "experiment", diagnosis.to_dict()
    assert top.effect is not None and top.effect.kind == "restores"
    replayed = next(e for e in diagnosis.experiments if e.knob == "repeat").extra["samples"]
    fused = plain_max_error(plan, replayed, graph_optimization_level=_LEVELS["all"])
    assert fused > 0 and plain_max_error(plan, replayed, graph_optimization_level=_LEVELS["disable"]) == 0
    assert (top.effect.before.max_abs_error, top.effect.after.max_abs_error) == (fused, 0.0)
    assert top.effect.after.mismatch_share == 0.0 < top.effect.before.mismatch_share
    assert top.effect.knob == "session.graph_optimization_level" and top.effect.value == "disable"
    assert top.fix.startswith("set session.graph_optimization_level: disable (changes production:")
    assert top.production is not None and top.production.baseline_had_it is True
    assert dict(top.production.changes) == {"session.graph_optimization_level": ("all", "disable")}
    line = diagnosis.summary()
    assert line.startswith(
        "likely cause: graph_optimization (measured: session.graph_optimization_level=disable"
        f" restores the baseline: max |error| {fused:.3g} → 0"
    ), line
    assert not OLD_PERCENT.search(line)


def test_a_setting_already_in_effect_is_never_suggested(ws: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    """The forest (a tree ensemble, whose rule says "1 thread") already runs one intra-op thread."""
    ws.add_model(
        "forest",
        onnx.load(FOREST),
        count=3,
        dims={"input:0": 64},
        tolerance=BITWISE,
        session={"intra_op_num_threads": 1},
    )
    plan = plan_for(ws.settings(), "forest")
    as_other_release(capture.capture_baseline(plan), "1.20.1")
    config = str(ws.write())
    code, out = cli(capsys, "diagnose", "forest", "-c", config, "--json")
    assert code == 0, out
    document = jsonsafe.loads(out)
    found = Diagnosis.from_dict(document)
    said = [h.fix for h in found.hypotheses] + [found.summary(), render(document)]
    for text in said:
        for name, value in re.findall(r"session\.(\w+): (\w+)", text):
            assert str(getattr(plan.model.session, name)).lower() != value.lower(), (name, value, text)
    assert "intra_op_num_threads" not in " ".join(h.fix for h in found.hypotheses), document["hypotheses"]
    assert any(
        n.startswith("rule tree-ensemble-threads not offered: its fix is already in effect") for n in found.notes
    )
    threads = next(e for e in found.experiments if e.knob == "threads")
    assert dict(threads.changes) == {"session.inter_op_num_threads": ("0", "1")}  # intra is 1 already


def test_a_knobs_fix_names_only_what_it_changes_and_whether_the_baseline_had_it() -> None:
    model = ModelConfig(name="m", path=FOREST, benchset="b", session=SessionConfig(intra_op_num_threads=1))
    found = {(v.knob, v.value): v for v in knobs.variations(model, {}, ["CPUExecutionProvider"])}
    threads = fixes.changes(found[("threads", "intra=1 inter=1")], model)
    assert threads == {"session.inter_op_num_threads": ("0", "1")}
    assert fixes.fix_for("threads", "intra=1 inter=1", threads) == "set session.inter_op_num_threads: 1"
    parallel = fixes.changes(found[("execution_mode", "parallel")], model)
    recorded = {"options": SessionConfig(intra_op_num_threads=1).model_dump(mode="json")}
    assert fixes.baseline_had(parallel, recorded) is False  # both ran sequential: a change of production's own
    assert fixes.baseline_had(threads, {"options": {"inter_op_num_threads": 1}}) is True
    assert fixes.baseline_had(threads, {}) is None  # nothing recorded to compare with
    assert fixes.nondeterminism_fix(SessionConfig(deterministic_compute=True)).count("deterministic") == 0
    trt = ProviderSpec(
        name=knobs.TENSORRT,
        options={"trt_fp16_enable": True, "trt_engine_cache_enable": True, "trt_engine_cache_path": "/cache"},
    )
    on_trt = ModelConfig(name="m", path=FOREST, benchset="b", providers=[trt])
    fp16 = next(v for v in knobs.tensorrt_variations(on_trt) if v.knob == "trt_fp16_enable")
    assert fixes.changes(fp16, on_trt) == {f"{knobs.TENSORRT}.trt_fp16_enable": ("1", "0")}  # not its own caches


def test_a_diagnosis_an_older_onnxmon_stored_still_renders_and_says_where_it_comes_from() -> None:
    older = {
        "model": "forest",
        "run_id": 7,
        "seconds": 1.2,
        "hypotheses": [
            {
                "cause": "runtime_version",
                "confidence": 0.7,
                "evidence": ["onnxruntime.version: '1.20.1' → '1.32.0'"],
                "fix": "pin the baseline's onnxruntime release",
                "source": "evidence",
            },
            {
                "cause": "thread_count",
                "confidence": 0.5,
                "evidence": ["threads=intra=1 inter=1: error ratio inf → inf"],
                "fix": "set session.intra_op_num_threads: 1",
                "source": "experiment",
            },
        ],
        "experiments": [
            {
                "knob": "current",
                "value": "as configured",
                "error_ratio": "Infinity",
                "within_tolerance": False,
                "cause": "unknown",
                "seconds": 0.1,
                "note": "",
            }
        ],
        "similar_incidents": [],
        "notes": ["signature: env_fields=onnxruntime.version"],
    }
    found = Diagnosis.from_dict(older)
    assert found.format == 1 and [h.cause for h in found.hypotheses] == ["runtime_version", "thread_count"]
    assert found.summary().startswith("likely cause: runtime_version (diagnosed by an older onnxmon")
    text = render(older)
    assert "older onnxmon" in text and "current=as configured" in text and not OLD_PERCENT.search(text)
    from monitor.api.web import diagnosis

    shown = diagnosis.view(7, older, [])
    assert (
        shown.older
        and shown.chart is None
        and [h.cause for h in shown.hypotheses] == ["runtime_version", "thread_count"]
    )
