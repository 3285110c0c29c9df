"""Frozen quantization parameters: a re-calibrated QDQ build is "quantization parameters changed", apart
from weight changes, in ``diff-model`` and in the check's ``model_changed`` reason.

Corpus models are quantized by ORT's own ``quantize_static`` (MinMax) twice: on their seeded
benchmark set and on the same set scaled by 2 (other calibration data, the same graph). Ground
truth from ``onnx`` and numpy alone: the initializers whose values differ, split into the scales and
zero points of ``QuantizeLinear``/``DequantizeLinear`` and the stored quantized tensors (weights,
biases) read by a ``DequantizeLinear`` whose scale moved. The same file re-saved is not reported.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from monitor import modeldiff
from monitor.check import run_check
from monitor.diagnose import evidence
from monitor.files import benchsets
from tests import quantized
from tests.conftest import Ran
from tests.realmodels import Prepared, prepare

pytestmark = pytest.mark.realmodels

MODELS = ("torch-cnn-legacy", "vietcombank-captcha")


@pytest.fixture(scope="module")
def prepared() -> Iterator[dict[str, Prepared]]:
    yield {}


def _builds(item: Prepared) -> tuple[Path, Path]:
    """Two QDQ builds of the pristine model: calibrated on the set, and on the set scaled by 2."""
    plan = item.plan()
    benchsets.ensure(plan.benchset, plan.benchsets_dir)
    first = quantized.quantize(item.pristine, item.ws.root / "qdq-a.onnx", item.samples())
    second = quantized.quantize(item.pristine, item.ws.root / "qdq-b.onnx", quantized.scaled(item.samples(), 2.0))
    return first, second


def _truth(old: Path, new: Path) -> tuple[dict[str, float], set[str], set[str]]:
    """(scale -> relative change, zero points changed, other initializers changed), from onnx + numpy."""
    a, b = onnx.load(str(old)), onnx.load(str(new))
    before = {t.name: numpy_helper.to_array(t) for t in a.graph.initializer}
    after = {t.name: numpy_helper.to_array(t) for t in b.graph.initializer}
    assert [(n.op_type, list(n.input)) for n in a.graph.node] == [(n.op_type, list(n.input)) for n in b.graph.node]
    changed = {n for n in after if n in before and not np.array_equal(before[n], after[n])}
    qdq = [n for n in b.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    scales = {n.input[1] for n in qdq}
    zeros = {n.input[2] for n in qdq if len(n.input) > 2}
    scale_changes = {
        n: float((after[n].astype(np.float64) - before[n]).flat[0] / abs(float(before[n].flat[0])))
        for n in changed & scales
    }
    return scale_changes, changed & zeros, changed - scales - zeros


@pytest.mark.parametrize("name", MODELS)
def test_a_recalibrated_build_is_quantization_parameters_changed_naming_the_tensors(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    item = prepare(prepared, name, tmp_path_factory)
    first, second = _builds(item)
    scales, zeros, others = _truth(first, second)
    assert scales, "scaling the calibration data by 2 must move some scale (onnx + numpy)"
    diff = modeldiff.diff_models(first, second)
    params = {p.name: p for p in diff.quantization}
    assert {n for n, p in params.items() if p.role == "scale"} == set(scales)
    assert {n for n, p in params.items() if p.role == "zero_point"} == zeros
    assert {n for n, p in params.items() if p.role == "requantized"} == others  # biases under their new scale
    for scale, rel in scales.items():
        assert params[scale].max_rel_change == pytest.approx(rel, rel=1e-12)
    assert diff.same_graph and diff.summary[0].startswith("quantization parameters changed (same graph)")
    largest = max(scales, key=lambda n: abs(scales[n]))
    assert largest in diff.summary[0]
    assert not any("initializer" in line for line in diff.summary), diff.summary  # no weight change on top

    against = modeldiff.diff_against_manifest(modeldiff.manifest(first), modeldiff.load_model(second))
    assert {(p.name, p.role) for p in against.quantization} == {(p.name, p.role) for p in diff.quantization}
    assert against.summary[0] == diff.summary[0]  # the manifest keeps every scale's and zero point's values


@pytest.mark.parametrize("name", MODELS)
def test_the_same_build_resaved_is_not_quantization_parameters_changed(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    item = prepare(prepared, name, tmp_path_factory)
    first, _ = _builds(item)
    model = onnx.load(str(first))
    model.doc_string = "re-saved"
    resaved = item.ws.root / "resaved.onnx"
    onnx.save(model, str(resaved))
    assert first.read_bytes() != resaved.read_bytes()
    assert not modeldiff.diff_models(first, resaved)
    assert not modeldiff.diff_against_manifest(modeldiff.manifest(first), modeldiff.load_model(resaved))


def test_the_checks_model_changed_reason_and_diff_model_name_the_moved_scales(
    prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory, run_cli: Callable[..., Ran]
) -> None:
    name = "torch-cnn-legacy"
    item = prepare(prepared, name, tmp_path_factory)
    first, second = _builds(item)
    scales, _, _ = _truth(first, second)
    largest = max(scales, key=lambda n: abs(scales[n]))
    item.path.write_bytes(first.read_bytes())
    item.baseline = False
    item.captured()
    item.path.write_bytes(second.read_bytes())
    result = run_check(item.plan())
    (reason,) = [r for r in result.reasons if r.code == "model_changed"]
    assert "quantization parameters changed (same graph)" in reason.detail and largest in reason.detail
    listed = {p["name"] for p in result.details["model_diff"]["quantization_params"]}
    assert set(scales) <= listed
    causes = [h.cause for h in evidence.from_run(result)]
    assert causes[0] == "model_requantized" and "model_weights_changed" not in causes, causes

    ran = run_cli("diff-model", first, second, "-o", "json")
    assert ran.exit_code == 1, ran.output
    data = json.loads(ran.stdout)
    assert {p["name"] for p in data["quantization_params"] if p["role"] == "scale"} == set(scales)

    model = onnx.load(str(first))
    model.doc_string = "re-saved"
    onnx.save(model, str(item.path))
    resaved = run_check(item.plan())
    (reason,) = [r for r in resaved.reasons if r.code == "model_changed"]
    assert "quantization parameters" not in reason.detail and "same values, nodes and types" in reason.detail
    assert not [h.cause for h in evidence.from_run(resaved) if h.cause.startswith("model_")], "nothing computed moved"
