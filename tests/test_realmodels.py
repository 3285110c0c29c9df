"""onnxmon over the real-model corpus (issue 12): models as their authors ship them.

Every model of ``tests/corpus/manifest.yaml`` (see ``tests/realmodels.py``) goes through the
same scenarios, and every verdict is held against a ground truth computed with plain ONNX
Runtime and numpy (``realmodels.ground_truth``), not with onnxmon's comparison:

- **baseline**: a benchset generated from its signature and the manifest's hints, verified,
  and a baseline captured from it;
- **unchanged**: five re-runs on the same stack, never an alarm;
- **session settings**: graph optimization level disable/basic/extended and 1 or 3 intra-op
  threads instead of the baseline's defaults. The model file is the same, so the check must
  pass exactly when plain ORT says every output stayed within tolerance, and otherwise fail
  on the outputs that moved, with a numeric reason;
- **model-file variants**: the largest float weight scaled by (1 + 1e-3), one element of it
  moved by one ULP, fp16 conversions (onnxconverter-common, ``keep_io_types`` True and False),
  int8 dynamic and static QDQ quantization (onnxruntime.quantization). Each is a ``fail``
  attributed ``model_changed``, and each output's verdict agrees with the ground truth: a drift
  fails with a numeric reason, an fp32 output that became fp16 fails with ``dtype_changed``, an
  output that stayed within tolerance passes. Where the converter cannot make a model ONNX
  Runtime loads, the model must be listed with the reason in ``tests/corpus/scenarios.yaml``;
- **external data** edited, and the **model file swapped** for an unrelated model: reported as
  ``model_changed`` naming the file, whatever else could or could not be measured.

With ``ONNXMON_SCENARIO_LOG`` set, every case appends what onnxmon said to that file;
``scripts/scenario-table`` runs this module that way and writes the table in docs/realmodels.md.
Without the fetched cache the fetched models skip; with ``realmodels`` in ``ONNXMON_REQUIRE``
(as in CI) they fail instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import onnxruntime as ort
import pytest

from monitor.check import run_check
from monitor.files import baselines, benchsets
from monitor.results import CheckResult, Verdict
from tests import variants
from tests.realmodels import (
    CORPUS,
    MODELS,
    NUMERIC_REASONS,
    Prepared,
    Truth,
    codes,
    explain,
    ground_truth,
    not_applicable,
    prepare,
    record,
    record_not_applicable,
)

pytestmark = pytest.mark.realmodels

SETTINGS: dict[str, dict[str, Any]] = {
    "opt-disable": {"graph_optimization_level": "disable"},
    "opt-basic": {"graph_optimization_level": "basic"},
    "opt-extended": {"graph_optimization_level": "extended"},
    "threads-1": {"intra_op_num_threads": 1},
    "threads-3": {"intra_op_num_threads": 3},
}


def _scaled(item: Prepared) -> str:
    return variants.edit_largest_weight(item.pristine, item.path, item.model.external_data, variants.scaled)


def _ulp(item: Prepared) -> str:
    return variants.edit_largest_weight(item.pristine, item.path, item.model.external_data, variants.one_ulp)


def _fp16(keep_io_types: bool) -> Callable[[Prepared], str]:
    def make(item: Prepared) -> str:
        blocked = variants.fp16(item.pristine, item.path, keep_io_types=keep_io_types)
        return f"fp16 keep_io_types={keep_io_types}, kept in fp32: {blocked or 'nothing'}"

    return make


def _int8(static: bool) -> Callable[[Prepared], str]:
    def make(item: Prepared) -> str:
        variants.quantize(item.pristine, item.path, static=static, samples=item.samples())
        return "int8 static QDQ" if static else "int8 dynamic"

    return make


VARIANTS: dict[str, Callable[[Prepared], str]] = {
    "weight-x1.001": _scaled,
    "weight-1ulp": _ulp,
    "fp16-keep-io": _fp16(True),
    "fp16": _fp16(False),
    "int8-dynamic": _int8(False),
    "int8-qdq": _int8(True),
}


@pytest.fixture(scope="module")
def prepared() -> Iterator[dict[str, Prepared]]:
    yield {}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_baselines(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    item = prepare(prepared, name, tmp_path_factory)
    bench = benchsets.ensure(item.plan().benchset, item.plan().benchsets_dir)
    assert benchsets.verify(bench) == []
    item.captured()
    outputs = [o.name for o in ort.InferenceSession(str(item.path)).get_outputs()]
    baseline = baselines.active(item.plan().baselines_dir, name)
    assert baseline is not None and baseline.meta.sample_count == len(bench)
    assert set(outputs) <= set(baseline.meta.outputs)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_five_unchanged_reruns_never_alarm(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    item = prepare(prepared, name, tmp_path_factory).captured()
    for _ in range(5):
        result = run_check(item.plan())
        assert result.verdict is Verdict.PASS, explain(result)
    truth = ground_truth(item)  # plain ORT on the same file, same settings: what "unchanged" means here
    assert not any(t.fails for t in truth.values()), truth
    record(name, "unchanged x5", truth, result)


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_session_settings_pass_exactly_when_plain_onnxruntime_stays_in_tolerance(
    name: str, setting: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    item = prepare(prepared, name, tmp_path_factory).captured()
    try:
        item.ws.models[name]["session"] = SETTINGS[setting]
        result = run_check(item.plan())
        truth = ground_truth(item, options=SETTINGS[setting])
    finally:
        item.restore()
    record(name, setting, truth, result)
    assert "model_changed" not in codes(result), explain(result)
    want = Verdict.FAIL if any(t.fails for t in truth.values()) else Verdict.PASS
    assert result.verdict is want, f"{setting}: plain ORT says {truth}; onnxmon {explain(result)}"
    agrees_per_output(result, truth, setting)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_variant_is_model_changed_and_each_output_agrees_with_plain_onnxruntime(
    name: str, variant: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    item = prepare(prepared, name, tmp_path_factory).captured()
    excused = not_applicable(variant).get(name)
    try:
        try:
            what = VARIANTS[variant](item)
        except variants.NotApplicable as exc:
            assert excused, f"{variant} of {name}: {exc}; list it under {variant} in {CORPUS / 'scenarios.yaml'}"
            record_not_applicable(name, variant, excused)
            return
        assert not excused, f"{variant} of {name} now works; remove it from {CORPUS / 'scenarios.yaml'}"
        result = run_check(item.plan())
        truth = ground_truth(item)
    finally:
        item.restore()
    record(name, variant, truth, result)
    assert result.verdict is Verdict.FAIL, explain(result)
    assert result.attribution == "model_changed", explain(result)
    agrees_per_output(result, truth, what)
    described = result.details.get("model_diff", {})
    assert described.get("summary"), f"{what}: no static model diff: {described}"
    if variant.startswith("weight") and what.startswith("tensor ") and "(a Constant)" not in what:
        edited = what.split(" ")[1]
        changed = next(r.detail for r in result.reasons if r.code == "model_changed")
        assert edited in changed, f"the model_changed reason does not name the edited {edited}: {changed}"


@pytest.mark.parametrize("name", sorted(n for n, m in MODELS.items() if m.external_data))
def test_an_edited_external_data_file_is_model_changed(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    item = prepare(prepared, name, tmp_path_factory).captured()
    data_name = item.model.external_data
    assert data_name is not None
    data = item.path.parent / data_name
    try:
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0x01  # one low mantissa bit of one weight: the .onnx is unchanged
        data.write_bytes(bytes(raw))
        result = run_check(item.plan())
    finally:
        item.restore()
    record(name, "external-data-edit", None, result)
    assert result.verdict is Verdict.FAIL and result.attribution == "model_changed", explain(result)
    assert any(r.code == "model_changed" and data_name in r.detail for r in result.reasons), explain(result)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_swapped_model_file_is_model_changed(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    item = prepare(prepared, name, tmp_path_factory).captured()
    other = "sk-forest-regressor" if name != "sk-forest-regressor" else "sk-logreg-nozipmap"
    try:
        item.path.write_bytes((CORPUS / MODELS[other].relative).read_bytes())
        result = run_check(item.plan())
    finally:
        item.restore()
    record(name, "file-swap", None, result)
    assert result.verdict is not Verdict.PASS, explain(result)
    assert any(r.code == "model_changed" and item.path.name in r.detail for r in result.reasons), explain(result)


def agrees_per_output(result: CheckResult, truth: dict[str, Truth], what: str) -> None:
    """Each output onnxmon judged agrees with plain ORT: fails with the right reasons exactly when it moved."""
    judged = {o.name: o for o in result.outputs}
    for output, moved in truth.items():
        stats = judged.get(output)
        assert stats is not None, f"{output} not judged; {explain(result)}"
        reasons = {r.code for r in stats.reasons}
        if not moved.fails:
            assert stats.verdict is Verdict.PASS, f"{output} ({what}): plain ORT says {moved}; {explain(result)}"
            continue
        assert stats.verdict is Verdict.FAIL, f"{output} ({what}): plain ORT says {moved}; {explain(result)}"
        if moved.moved == "drift":
            assert reasons & NUMERIC_REASONS, f"{output} ({what}) drifted but no numeric reason: {explain(result)}"
        if moved.dtype_changed:
            assert "dtype_changed" in reasons, f"{output} ({what}) became another float type: {explain(result)}"
