"""``diagnose`` on real models whose numbers really move: the right cause is ranked first.

Each scenario (``tests/diagnose_scenarios.py``) changes one real thing on a committed corpus
model and runs the real check; the diagnosis replays the failing samples in isolated children
(``daemon.diagnosis.isolated``, the daemon's own isolation). The expected cause is the
scenario's construction, never onnxmon's opinion. Plus: the JSON shape the issue fixes, a budget that runs
out, a crashing experiment, a passing run (the knobs and the ranking alone: tests/test_diagnose_knobs.py).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from monitor import capture, jsonsafe
from monitor.check import run_check
from monitor.daemon.diagnosis import isolated
from monitor.diagnose.engine import diagnose
from monitor.results import CAUSE_CODES, AppliedTolerance, CheckResult, OutputMetrics, OutputStats, Reason, Verdict
from tests.diagnose_scenarios import FOREST, SCENARIOS, Scenario
from tests.workspace import Workspace

pytestmark = pytest.mark.slow


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    monkeypatch.chdir(tmp_path)
    return Workspace(tmp_path)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.expected)
def test_the_right_cause_is_ranked_first(scenario: Scenario, in_tmp: Workspace) -> None:
    plan, result = scenario.build(in_tmp)
    assert result.verdict is Verdict.FAIL, result.all_reasons()
    diagnosis = diagnose(plan, result, isolate=isolated, budget_s=120)
    assert diagnosis.top is not None
    assert diagnosis.top.cause == scenario.expected, diagnosis.to_dict()["hypotheses"]
    current = next(e for e in diagnosis.experiments if e.knob == "current")
    assert current.within_tolerance is False and current.error_ratio is not None and current.error_ratio > 1


@pytest.mark.parametrize(
    "scenario", [s for s in SCENARIOS if s.expected in ("thread_count", "graph_optimization")], ids=lambda s: s.expected
)
def test_a_knob_whose_revert_restores_the_baseline_is_the_evidence(scenario: Scenario, in_tmp: Workspace) -> None:
    plan, result = scenario.build(in_tmp)
    diagnosis = diagnose(plan, result, isolate=isolated)
    assert diagnosis.top is not None and diagnosis.top.source == "experiment"
    restoring = [e for e in diagnosis.experiments if e.within_tolerance and e.cause == scenario.expected]
    assert restoring and all(e.error_ratio is not None and e.error_ratio <= 1 for e in restoring)
    # the baseline's own differing setting, replayed alone, is among them
    assert any(e.knob.startswith("session.") for e in restoring)


def test_the_json_has_the_shape_of_the_issue_and_is_strict(in_tmp: Workspace) -> None:
    plan, result = SCENARIOS[0].build(in_tmp)
    document = diagnose(plan, result, isolate=isolated).to_dict()
    jsonsafe.loads(jsonsafe.dumps(document))  # strict RFC 8259
    assert {"format", "summary", "hypotheses", "experiments", "before"} <= set(document)
    for hypothesis in document["hypotheses"]:
        assert {"cause", "basis", "evidence", "fix", "effect", "production_change"} <= set(hypothesis)
        assert hypothesis["cause"] in CAUSE_CODES and hypothesis["basis"] in ("experiment", "measured", "evidence")
        assert "confidence" not in hypothesis  # nothing measured a probability: none is printed
    for experiment in document["experiments"]:
        assert {"knob", "value", "error_ratio", "within_tolerance", "measure", "effect"} <= set(experiment)
    first = document["hypotheses"][0]
    assert first["basis"] == "experiment" and first["effect"]["kind"] == "restores"


def test_the_experiment_ratio_is_the_checks_error_ratio(in_tmp: Workspace) -> None:
    plan, result = SCENARIOS[0].build(in_tmp)
    diagnosis = diagnose(plan, result, isolate=isolated)
    current = next(e for e in diagnosis.experiments if e.knob == "current")
    assert current.error_ratio == pytest.approx(max(o.error_ratio for o in result.outputs))


def test_a_spent_budget_skips_experiments_and_says_which(in_tmp: Workspace) -> None:
    plan, result = SCENARIOS[0].build(in_tmp)
    ticks = iter(range(0, 10_000, 40))  # every reading of the clock is 40 s later
    diagnosis = diagnose(plan, result, isolate=isolated, budget_s=100, clock=lambda: float(next(ticks)))
    assert any("time budget spent; not run:" in note for note in diagnosis.notes)
    assert diagnosis.top is not None  # still an answer, from what ran and the evidence


def _crash_in_child(
    function: Callable[..., Mapping[str, Any]], args: tuple[Any, ...], timeout_s: float
) -> Mapping[str, Any]:
    replayed = args[1] if isinstance(args[1], list) else [args[1]]  # a shared child replays several
    if any(variation.knob == "threads" for variation in replayed):
        return isolated(os.abort, (), timeout_s)  # the child dies by SIGABRT
    return isolated(function, args, timeout_s)


def test_a_crashing_experiment_is_a_note_not_a_crash(in_tmp: Workspace) -> None:
    plan, result = SCENARIOS[0].build(in_tmp)
    diagnosis = diagnose(plan, result, isolate=_crash_in_child)
    threads = next(e for e in diagnosis.experiments if e.knob == "threads")
    assert threads.error_ratio is None and threads.within_tolerance is None and "crash" in threads.note
    assert diagnosis.top is not None and diagnosis.top.cause == "thread_count"  # the other knob still proves it


@pytest.mark.parametrize("scenario", SCENARIOS[:2], ids=lambda s: s.expected)
def test_knobs_sharing_a_child_rank_and_measure_as_a_child_per_knob(scenario: Scenario, in_tmp: Workspace) -> None:
    """The shared child (several knobs replayed in one) against the path it replaced: a child per experiment."""
    plan, result = scenario.build(in_tmp)
    alone = diagnose(plan, result, isolate=isolated, share=False)
    shared = diagnose(plan, result, isolate=isolated)
    assert [(e.knob, e.value, e.error_ratio, e.within_tolerance) for e in shared.experiments] == [
        (e.knob, e.value, e.error_ratio, e.within_tolerance) for e in alone.experiments
    ]
    assert [(h.cause, h.basis, h.effect) for h in shared.hypotheses] == [
        (h.cause, h.basis, h.effect) for h in alone.hypotheses
    ]
    assert len(shared.experiments) > 4 and all(e.error_ratio is not None for e in shared.experiments)


def test_a_failed_run_that_passes_on_replay_says_it_did_not_reproduce(in_tmp: Workspace) -> None:
    _, result = SCENARIOS[0].build(in_tmp)
    in_tmp.set("forest", session={"intra_op_num_threads": 1})  # back as the baseline had it
    from monitor.config.plan import plan_for

    fixed = plan_for(in_tmp.settings(), "forest")
    diagnosis = diagnose(fixed, result, isolate=isolated)
    current = next(e for e in diagnosis.experiments if e.knob == "current")
    assert current.within_tolerance is True
    assert any("did not reproduce" in note and "bitwise equal" in note for note in diagnosis.notes)
    # identical runs are bitwise equal: a deterministic setup is not called nondeterministic
    assert "nondeterminism" not in [h.cause for h in diagnosis.hypotheses]
    assert math.isfinite(diagnosis.seconds)


def test_a_passing_run_ranks_no_cause(in_tmp: Workspace) -> None:
    in_tmp.add_model("forest", onnx.load(FOREST), count=2, dims={"input:0": 8})
    from monitor.config.plan import plan_for

    plan = plan_for(in_tmp.settings(), "forest")
    capture.capture_baseline(plan)
    result = run_check(plan)
    assert result.verdict is Verdict.PASS
    diagnosis = diagnose(plan, result, isolate=isolated)
    assert diagnosis.hypotheses == () and diagnosis.experiments == () and diagnosis.top is None


def test_with_stored_intermediates_the_failure_is_localized_and_its_op_type_is_evidence(in_tmp: Workspace) -> None:
    from monitor.config.plan import plan_for
    from tests import variants
    from tests.diagnose_scenarios import CNN

    in_tmp.add_model("cnn", onnx.load(CNN), count=2, dims={"batch": 2})
    capture.capture_baseline(plan_for(in_tmp.settings(), "cnn"), intermediate_samples=2)
    pristine = in_tmp.root / "pristine.onnx"
    onnx.save(onnx.load(CNN), str(pristine))
    edited = variants.edit_largest_weight(pristine, in_tmp.root / "models" / "cnn.onnx", None, variants.scaled)
    name = edited.split()[1]  # "tensor NAME [shape]"
    readers = {n.name: n.op_type for n in onnx.load(CNN).graph.node if name in n.input}  # ground truth, plain onnx
    assert readers, edited
    plan = plan_for(in_tmp.settings(), "cnn")
    diagnosis = diagnose(plan, run_check(plan), isolate=isolated)
    assert diagnosis.top is not None and diagnosis.top.cause == "model_weights_changed"
    assert diagnosis.localization is not None
    first = diagnosis.localization["first_changed"]
    assert first is not None
    # localize answers on ORT's optimized graph: a fused node names the model nodes it replaced
    named = [first["name"], *first["fused_from"]]
    assert set(named) & set(readers), (first, readers)
    if first["name"] in readers:
        assert first["op_type"] == readers[first["name"]]
    signed = [n.split("op_types=", 1)[1].split(";")[0].split(",") for n in diagnosis.notes if "op_types=" in n]
    assert any(first["op_type"] in ops for ops in signed), diagnosis.notes  # in the incident signature
    assert all(set(first.get("fused_op_types", ())) <= set(ops) for ops in signed)  # with the fused members


@pytest.mark.parametrize("kind", ["fp16", "qdq"])
def test_an_fp16_or_quantized_file_checked_against_its_framework_suspects_the_conversion(
    kind: str, in_tmp: Workspace
) -> None:
    """The verify flow: the file is the reference's own (no model_changed), made in lower precision."""
    from onnxconverter_common import float16
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.calibrate import CalibrationDataReader

    from monitor.config.plan import plan_for
    from tests import modelzoo

    float_model = modelzoo.classifier()
    if kind == "fp16":
        ws_model = float16.convert_float_to_float16(float_model, keep_io_types=True)
    else:
        source = modelzoo.save(float_model, in_tmp.root / "float.onnx")

        class Feeds(CalibrationDataReader):
            def __init__(self) -> None:
                rng = np.random.default_rng(0)
                self.items = iter([{"x": rng.normal(0, 1, (2, 16)).astype(np.float32)} for _ in range(4)])

            def get_next(self) -> dict[str, np.ndarray] | None:
                return next(self.items, None)

        quantize_static(
            str(source),
            str(in_tmp.root / "q.onnx"),
            Feeds(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
        )
        ws_model = onnx.load(str(in_tmp.root / "q.onnx"))
    in_tmp.add_model("m", ws_model)
    plan = plan_for(in_tmp.settings(), "m")
    prob = OutputStats(
        "prob",
        Verdict.FAIL,
        OutputMetrics(),
        AppliedTolerance(atol=1e-5, rtol=1e-4),
        reasons=(Reason("atol_rtol", "3.2e2 x tol"),),
    )
    run = CheckResult(
        "m",
        Verdict.FAIL,
        0.0,
        1.0,
        outputs=(prob,),
        providers_effective=("CPUExecutionProvider",),
        details={"baseline_source": "reference"},
    )
    diagnosis = diagnose(plan, run, isolate=isolated, replay=False)
    causes = [h.cause for h in diagnosis.hypotheses]
    expected = "model_precision_changed" if kind == "fp16" else "model_quantized"
    assert expected in causes, diagnosis.to_dict()["hypotheses"]
    assert diagnosis.top is not None and diagnosis.top.cause == expected
