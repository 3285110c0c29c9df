"""Decisions (``models[].decisions``): what an output decides, counted against the baseline's, per sample.

Every count is held against plain ONNX Runtime + numpy on the same inputs (never onnxmon's own
comparison): argmax per row, ``x > value`` per element, labels compared as they are, through fp16
outputs, string labels and ZipMaps; then the config errors (an unknown output, the wrong type or
rank for the kind) and the two-tier rule (``tolerance.numeric: warn``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from monitor import capture
from monitor.check import run_check
from monitor.compare.accumulate import Comparison
from monitor.config import crosscheck
from monitor.config.plan import plan_for
from monitor.errors import ConfigError
from monitor.files import benchsets, signature
from monitor.results import AppliedTolerance, CheckResult, DecisionStats, OutputStats, Verdict
from monitor.store import convert
from tests import modelzoo
from tests.workspace import Workspace

ARGMAX = {"kind": "argmax", "axis": -1}


def stats_of(result: CheckResult) -> dict[str, OutputStats]:
    return {o.name: o for o in result.outputs}


def captured(tmp_path: Path, model: onnx.ModelProto, **fields: Any) -> Workspace:
    ws = Workspace(tmp_path)
    ws.add_model("m", model, count=5, dims={"batch": 40}, **fields)
    capture.capture_baseline(plan_for(ws.settings(), "m"))
    return ws


def plain_outputs(ws: Workspace, model: onnx.ModelProto) -> list[dict[str, Any]]:
    """Plain ORT outputs of ``model`` on the workspace's benchmark samples."""
    bench = benchsets.open_benchset(ws.settings().store.benchsets_dir, "m-bench")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    feeds = [bench.load_sample(i) for i in range(len(bench))]
    return [dict(zip(names, session.run(names, f), strict=True)) for f in feeds]


def numpy_flips(before: list[dict[str, Any]], after: list[dict[str, Any]], decide: Any) -> tuple[int, int, list]:
    """(total, flipped, flipped (sample, row) pairs) of ``decide`` over every sample."""
    total, pairs = 0, []
    for index, (b, a) in enumerate(zip(before, after, strict=True)):
        ours, theirs = decide(a), decide(b)
        total += ours.size
        pairs += [(index, int(row)) for row in np.flatnonzero(ours != theirs)]
    return total, len(pairs), pairs


def rechecked(ws: Workspace, model: onnx.ModelProto) -> CheckResult:
    ws.replace_model("m", model)
    return run_check(plan_for(ws.settings(), "m"))


# --- each kind against numpy ---------------------------------------------------------------------


def test_argmax_and_threshold_flips_equal_numpys_row_by_row(tmp_path: Path) -> None:
    model = modelzoo.classifier()
    decisions = {"logits": ARGMAX, "prob": {"kind": "threshold", "value": 0.3}}
    ws = captured(tmp_path, model, decisions=decisions)
    assert all(o.decisions and o.decisions.flipped == 0 for o in run_check(plan_for(ws.settings(), "m")).outputs)
    changed = modelzoo.perturb_initializer(model, "w2", 0.3)
    before, after = plain_outputs(ws, model), plain_outputs(ws, changed)
    result = stats_of(rechecked(ws, changed))

    total, flipped, pairs = numpy_flips(before, after, lambda o: np.argmax(o["logits"], axis=-1).ravel())
    logits = result["logits"].decisions
    assert logits is not None and (logits.kind, logits.total, logits.flipped) == ("argmax", total, flipped)
    assert list(logits.flips) == pairs and flipped > 0 and total == 5 * 40
    assert "decision_changed" in {r.code for r in result["logits"].reasons}

    total, flipped, pairs = numpy_flips(before, after, lambda o: (o["prob"].astype(np.float64) > 0.3).ravel())
    prob = result["prob"].decisions
    assert prob is not None and (prob.total, prob.flipped, list(prob.flips)) == (total, flipped, pairs[:100])
    assert total == 5 * 40 * 10


def test_a_flip_ratio_within_max_decision_flip_ratio_is_not_a_decision_change(tmp_path: Path) -> None:
    model = modelzoo.classifier()
    ws = captured(
        tmp_path, model, decisions={"logits": ARGMAX}, tolerance={"default": {"max_decision_flip_ratio": 0.5}}
    )
    logits = stats_of(rechecked(ws, modelzoo.perturb_initializer(model, "w2", 0.3)))["logits"]
    assert logits.decisions is not None and 0 < logits.decisions.ratio <= 0.5
    assert {r.code for r in logits.reasons} == {"atol_rtol"}  # the numbers still fail; the decisions do not


def test_an_fp16_output_is_decided_as_produced_against_its_fp32_baseline(tmp_path: Path) -> None:
    from onnxconverter_common import float16

    model = modelzoo.classifier()
    ws = captured(tmp_path, model, decisions={"logits": ARGMAX, "prob": {"kind": "threshold", "value": 0.5}})
    half = float16.convert_float_to_float16(modelzoo.perturb_initializer(model, "w2", 0.05), keep_io_types=False)
    bench = benchsets.open_benchset(ws.settings().store.benchsets_dir, "m-bench")
    session = ort.InferenceSession(half.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = [{"x": bench.load_sample(i)["x"].astype(np.float16)} for i in range(len(bench))]
    after = [dict(zip(["logits", "prob"], session.run(["logits", "prob"], f), strict=True)) for f in feeds]
    assert after[0]["logits"].dtype == np.float16
    before = plain_outputs(ws, model)
    result = stats_of(rechecked(ws, half))
    assert result["logits"].dtype == "float16" and "dtype_changed" in {r.code for r in result["logits"].reasons}
    for name, decide in (
        ("logits", lambda o: np.argmax(o["logits"], axis=-1).ravel()),
        ("prob", lambda o: (o["prob"].astype(np.float64) > 0.5).ravel()),
    ):
        total, flipped, pairs = numpy_flips(before, after, decide)
        got = result[name].decisions
        assert got is not None and (got.total, got.flipped, list(got.flips)) == (total, flipped, pairs[:100]), name


def test_string_labels_int64_labels_and_a_zipmap_table_and_its_keys(tmp_path: Path) -> None:
    model = modelzoo.labelled_classifier()
    decisions = {
        "label": {"kind": "equal"},
        "class_id": {"kind": "equal"},
        "probabilities": ARGMAX,
        "probabilities:keys": {"kind": "equal"},
    }
    ws = captured(tmp_path, model, decisions=decisions)
    changed = modelzoo.labelled_classifier(scale=1.6)
    before, after = plain_outputs(ws, model), plain_outputs(ws, changed)
    result = stats_of(rechecked(ws, changed))

    def table(o: dict[str, Any]) -> np.ndarray:
        keys = sorted({k for row in o["probabilities"] for k in row})
        return np.array([[row[k] for k in keys] for row in o["probabilities"]])

    expected = {
        "label": numpy_flips(before, after, lambda o: np.asarray(o["label"]).ravel()),
        "class_id": numpy_flips(before, after, lambda o: o["class_id"].ravel()),
        "probabilities": numpy_flips(before, after, lambda o: np.argmax(table(o), axis=-1)),
        "probabilities:keys": numpy_flips(
            before, after, lambda o: np.array(sorted({k for r in o["probabilities"] for k in r}))
        ),
    }
    assert expected["label"][1] > 0 and expected["probabilities:keys"][1] == 0
    for name, (total, flipped, pairs) in expected.items():
        got = result[name].decisions
        assert got is not None and (got.total, got.flipped, list(got.flips)) == (total, flipped, pairs[:100]), name
    assert "decision_changed" in {r.code for r in result["label"].reasons}


# --- the config: unknown outputs, wrong types and ranks --------------------------------------------


def problems_of(ws: Workspace) -> list[str]:
    _, found = crosscheck.file_problems(ws.write(), signature.output_names, environ={}, types_of=signature.output_types)
    return found


def test_a_decision_on_an_output_of_the_wrong_type_or_rank_is_a_config_error_naming_both(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("m", modelzoo.labelled_classifier(), decisions={
        "label": ARGMAX,  # strings have no argmax
        "class_id": {"kind": "argmax", "axis": 1},  # rank 1: no axis 1
        "probabilities": {"kind": "equal"},  # float scores are not labels
        "probabilities:keys": {"kind": "threshold", "value": 1},  # int64 keys: numbers, a fine threshold
        "nope": {"kind": "equal"},
    })  # fmt: skip
    found = problems_of(ws)
    assert len(found) == 4, found
    nope, label, class_id, probabilities = found  # unknown outputs first, then what cannot be decided
    assert "models[0].decisions.label" in label and "tensor(string)" in label and "argmax" in label
    assert "decisions.class_id" in class_id and "axis 1" in class_id and "tensor(int64) [batch]" in class_id
    assert "decisions.probabilities" in probabilities and "seq(map(int64,tensor(float)))" in probabilities
    assert "decisions.nope" in nope and "'nope' is not an output" in nope


def test_check_and_capture_refuse_a_misfit_decision_with_exit_2(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("m", modelzoo.classifier(), decisions={"logits": {"kind": "equal"}})
    with pytest.raises(ConfigError, match=r"decisions\.logits.*tensor\(float\)"):
        crosscheck.refuse_unknown_outputs(ws.settings(), ["m"], signature.output_names, signature.output_types)


@pytest.mark.parametrize(
    ("decision", "message"),
    [
        ({"kind": "threshold"}, "needs `value`"),
        ({"kind": "equal", "value": 0.5}, "`value` is for threshold"),
        ({"kind": "threshold", "value": 0.5, "axis": 0}, "`axis` is for argmax"),
        ({"kind": "top1"}, "argmax"),
    ],
)
def test_a_malformed_decision_is_a_schema_error(tmp_path: Path, decision: dict[str, Any], message: str) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("m", modelzoo.classifier(), decisions={"logits": decision})
    with pytest.raises(ConfigError, match=message):
        ws.settings()


def test_numeric_warn_on_a_model_that_decides_nothing_is_a_config_error(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("m", modelzoo.classifier(), tolerance={"default": {"numeric": "warn"}})
    with pytest.raises(ConfigError, match="no `decisions:`"):
        ws.settings()


def test_a_decision_that_does_not_fit_the_produced_array_is_a_config_error_verdict() -> None:
    comparison = Comparison(
        ["y"], ["y"], {"y": AppliedTolerance(atol=0, rtol=0)}, samples=1, elements={"y": 4},
        decisions={"y": _Rule("argmax", axis=2)},
    )  # fmt: skip
    comparison.feed({"y": np.zeros((2, 2), np.float32)}, {"y": np.zeros((2, 2), np.float32)})
    (y,) = comparison.finish()
    assert y.verdict is Verdict.ERROR and y.reasons[0].code == "config_error" and "axis 2" in y.reasons[0].detail
    with pytest.raises(ConfigError, match="not outputs"):
        Comparison(["y"], ["y"], {"y": AppliedTolerance(atol=0, rtol=0)}, samples=1, elements={"y": 4},
                   decisions={"z": _Rule("equal")})  # fmt: skip


class _Rule:
    def __init__(self, kind: str, axis: int = -1, value: float | None = None) -> None:
        self.kind, self.axis, self.value = kind, axis, value


# --- the two-tier rule -----------------------------------------------------------------------------


def tiered(actual: np.ndarray, expected: np.ndarray, numeric: str = "warn") -> tuple[OutputStats, ...]:
    tolerance = AppliedTolerance(atol=1e-6, rtol=0.0, numeric=numeric)
    comparison = Comparison(
        ["logits", "emb"], ["logits", "emb"], {"logits": tolerance, "emb": tolerance}, samples=1,
        elements={"logits": actual.size, "emb": actual.size}, decisions={"logits": _Rule("argmax")},
    )  # fmt: skip
    comparison.feed({"logits": actual, "emb": actual}, {"logits": expected, "emb": expected})
    return comparison.finish()


def test_numeric_warn_makes_drift_that_flips_no_decision_a_warning_and_a_flip_fails_everything() -> None:
    expected = np.array([[0.1, 0.9, 0.0], [0.8, 0.2, 0.0]], np.float32)
    nudged = expected + np.float32(1e-3)  # every element moves, no argmax does
    logits, emb = tiered(nudged, expected)
    assert (logits.verdict, emb.verdict) == (Verdict.PASS, Verdict.PASS)
    assert [w.code for w in logits.warnings] == ["atol_rtol"] and [w.code for w in emb.warnings] == ["atol_rtol"]
    assert logits.reasons == () and logits.decisions == DecisionStats("argmax", 2, 0, ())

    assert [o.verdict for o in tiered(nudged, expected, numeric="fail")] == [Verdict.FAIL, Verdict.FAIL]

    flipped = expected.copy()
    flipped[1] = [0.2, 0.8, 0.0]  # row 1's class changes
    logits, emb = tiered(flipped, expected)
    assert (logits.verdict, emb.verdict) == (Verdict.FAIL, Verdict.FAIL)
    assert {r.code for r in logits.reasons} == {"atol_rtol", "decision_changed"} and logits.warnings == ()
    assert logits.decisions is not None and logits.decisions.flips == ((0, 1),)


def test_numeric_warn_end_to_end_passes_a_quiet_drift_with_its_warnings(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model(
        "m", modelzoo.layernorm_gelu(), count=4, dims={"batch": 16},
        session={"graph_optimization_level": "disable"}, decisions={"y": ARGMAX},
        tolerance={"default": {"atol": 1e-8, "rtol": 1e-7, "numeric": "warn"}},
    )  # fmt: skip
    capture.capture_baseline(plan_for(ws.settings(), "m"))
    ws.set("m", session={"graph_optimization_level": "all"})  # fused kernels: the low bits move
    result = run_check(plan_for(ws.settings(), "m"))
    (y,) = result.outputs
    assert result.verdict is Verdict.PASS, result.all_reasons()
    assert y.decisions is not None and y.decisions.flipped == 0 and [w.code for w in y.warnings] == ["atol_rtol"]
    again = CheckResult.from_dict(result.to_dict())  # across the child-process boundary
    assert again.outputs == result.outputs


def test_decisions_and_warnings_round_trip_through_the_store_row() -> None:
    (logits, _) = tiered(np.array([[0.1, 0.9]], np.float32) + np.float32(1e-3), np.array([[0.1, 0.9]], np.float32))
    assert logits.decisions is not None and logits.warnings
    row = convert.output_row(logits, run_id=1)
    assert convert.output_stats(row) == logits


@pytest.mark.process
def test_check_json_prints_each_outputs_decisions_and_exits_1_on_a_decision_change(tmp_path: Path) -> None:
    from tests.conftest import onnxmon

    model = modelzoo.labelled_classifier()
    ws = captured(tmp_path, model, decisions={"label": {"kind": "equal"}, "probabilities": ARGMAX})
    ws.replace_model("m", modelzoo.labelled_classifier(scale=1.6))
    done = onnxmon("check", "m", "-o", "json", "--no-store", "-c", str(ws.config_file))
    assert done.exit_code == 1, done.output
    (printed,) = json.loads(done.stdout)  # one record per model
    outputs = {o["name"]: o for o in printed["outputs"]}
    assert set(outputs["label"]["decisions"]) == {"kind", "total", "flipped", "ratio", "flips"}
    assert outputs["label"]["decisions"]["kind"] == "equal" and outputs["label"]["decisions"]["flipped"] > 0
    assert (
        outputs["probabilities"]["decisions"]["kind"] == "argmax" and outputs["probabilities:keys"]["decisions"] is None
    )


def _never_yes(weight: np.ndarray) -> onnx.ModelProto:
    """``p = sigmoid(-|x| * weight)``: with positive weights every ``p <= 0.5``, no element decides yes."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [
            helper.make_node("Abs", ["x"], ["magnitude"]),
            helper.make_node("Neg", ["magnitude"], ["negative"]),
            helper.make_node("Mul", ["negative", "w"], ["scaled"]),
            helper.make_node("Sigmoid", ["scaled"], ["p"]),
        ],
        "never_yes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(weight.astype(np.float32), "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_nan_where_the_baseline_decided_is_a_flipped_decision_even_under_numeric_warn(tmp_path: Path) -> None:
    """A NaN decides nothing: ``NaN > 0.5`` is false like the baseline's answer, yet the output is broken."""
    threshold = {"kind": "threshold", "value": 0.5}
    pristine = _never_yes(np.ones(4))
    ws = captured(tmp_path, pristine, decisions={"p": threshold}, tolerance={"default": {"numeric": "warn"}})
    broken = _never_yes(np.array([1.0, 1.0, 1.0, np.nan]))  # column 3 becomes NaN on every row
    result = rechecked(ws, broken)

    def nan_or_yes(out: dict[str, Any]) -> np.ndarray:  # numpy's rule, stated here: a NaN is its own decision
        p = out["p"].astype(np.float64)
        return np.where(np.isnan(p), -1, p > 0.5).ravel()

    before, after = plain_outputs(ws, pristine), plain_outputs(ws, broken)
    assert all(np.isnan(a["p"][:, 3]).all() and (b["p"] <= 0.5).all() for a, b in zip(after, before, strict=True))
    total, flipped, pairs = numpy_flips(before, after, nan_or_yes)
    (p,) = result.outputs
    assert p.decisions is not None and (p.decisions.total, p.decisions.flipped) == (total, flipped)
    assert list(p.decisions.flips) == pairs[: len(p.decisions.flips)] and flipped == total // 4
    assert result.verdict is Verdict.FAIL and "decision_changed" in {r.code for r in result.all_reasons()}


def test_an_argmax_row_with_a_nan_flips_even_when_the_nan_sits_on_the_baselines_class() -> None:
    expected = np.array([[0.1, 0.9, 0.0], [0.8, 0.2, 0.0]], np.float32)
    broken = expected.copy()
    broken[0, 1] = np.nan  # numpy's argmax picks the first NaN: class 1, the baseline's
    logits, _ = tiered(broken, expected)
    assert logits.decisions == DecisionStats("argmax", 2, 1, ((0, 0),))
    assert logits.verdict is Verdict.FAIL and {"decision_changed", "nan_mismatch"} <= {r.code for r in logits.reasons}
    both = tiered(broken, broken)[0]  # a NaN at the same place on both sides agrees
    assert both.decisions == DecisionStats("argmax", 2, 0, ()) and both.verdict is Verdict.PASS
