"""Calibration coverage of QDQ corpus models: ``onnxmon coverage`` and ``checks.calibration_coverage``.

Each model is quantized by ORT's own ``quantize_static`` (MinMax) on its seeded benchmark set (the
corpus has no calibration inputs of its own; the set is generated with seed 0, so the same every
time). Over that set no tensor clips more than the threshold and the check adds no reason; over
the same samples scaled by 4 (beyond the calibrated range; a baseline captured on them, as when the
set is refreshed from production traffic) the check fails with ``calibration_out_of_range`` alone.
Every clipped count and codes-used count is held against plain ORT and numpy (``tests/quantized.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from monitor import capture
from monitor.check import run_check
from monitor.files import benchsets
from tests import quantized
from tests.conftest import Ran
from tests.realmodels import Prepared, prepare

pytestmark = pytest.mark.realmodels

MODELS = ("torch-cnn-legacy", "vietcombank-captcha")
# Over a set of 4 samples a logit tensor holds 80 values: the simulated quantization upstream moves a
# calibration extreme past its range now and then (3 of 80 on vietcombank-captcha's digit_0 logits).
THRESHOLD = 0.05


@pytest.fixture(scope="module")
def prepared() -> Iterator[dict[str, Prepared]]:
    yield {}


def _qdq(item: Prepared) -> Prepared:
    """The workspace's model replaced by its QDQ build, calibrated on the benchmark set; a scaled set declared."""
    name = item.model.name
    plan = item.plan()
    benchsets.ensure(plan.benchset, plan.benchsets_dir)  # drawn from the float model's signature
    samples = item.samples()
    quantized.quantize(item.pristine, item.path, samples)
    folder = item.ws.root / "scaled"
    folder.mkdir(exist_ok=True)
    for index, sample in enumerate(quantized.scaled(samples, 4.0)):
        np.savez(folder / f"{index:03d}.npz", **sample)
    item.ws.benchsets["scaled"] = {"name": f"{name}-scaled", "npz": [str(folder / "*.npz")]}
    item.ws.models[name]["benchset"] = f"{name}-bench"
    item.ws.models[name]["checks"] = {"calibration_coverage": {"max_clipped_share": THRESHOLD}}
    return item


@pytest.mark.parametrize("name", MODELS)
def test_the_calibration_set_is_covered_and_a_scaled_one_is_not(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    item = _qdq(prepare(prepared, name, tmp_path_factory))
    item.captured()
    result = run_check(item.plan())
    document = result.details["calibration_coverage"]
    assert "calibration_out_of_range" not in {r.code for r in result.reasons}, result.reasons
    truth = quantized.clipped_by_numpy(item.path, item.samples())
    tensors = {t["tensor"]: t for t in document["tensors"]}
    assert set(tensors) == set(truth)
    for tensor, want in truth.items():
        got = tensors[tensor]
        assert (got["values"], got["clipped"], got["codes_used"]) == (
            want["values"],
            want["clipped"],
            len(want["used"]),
        ), tensor
        assert got["clipped"] / got["values"] <= THRESHOLD

    item.ws.models[name]["benchset"] = f"{name}-scaled"  # production traffic moved: a baseline on it
    capture.capture_baseline(item.plan(), promote=True)
    shifted = run_check(item.plan())
    reasons = [r for r in shifted.reasons if r.code == "calibration_out_of_range"]
    assert reasons and shifted.verdict.value == "fail", shifted.reasons
    assert {r.code for r in shifted.reasons} == {"calibration_out_of_range"}, "the outputs match their baseline"
    scaled_truth = quantized.clipped_by_numpy(item.path, quantized.scaled(item.samples(), 4.0))
    over = {t for t, w in scaled_truth.items() if w["clipped"] / w["values"] > THRESHOLD}
    assert over, "scaling by 4 must push some tensor out of its range (plain ORT + numpy)"
    worst = max(over, key=lambda t: scaled_truth[t]["clipped"] / scaled_truth[t]["values"])
    assert worst in reasons[0].detail and f"{len(over)} of {len(truth)}" in reasons[0].detail


def test_coverage_command_lists_tensors_worst_first_and_exits_1_beyond_the_range(
    prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory, run_cli: Callable[..., Ran]
) -> None:
    name = "torch-cnn-legacy"
    item = _qdq(prepare(prepared, name, tmp_path_factory))
    config = item.ws.write()
    ran = run_cli("coverage", name, "-c", config, "-o", "json")
    assert ran.exit_code == 0, ran.output
    data = json.loads(ran.stdout)
    assert data["out_of_range"] == [] and data["samples"] == 4
    ran = run_cli("coverage", name, "-c", config, "--benchset", f"{name}-scaled", "-o", "json")
    assert ran.exit_code == 1, ran.output
    data = json.loads(ran.stdout)
    shares = [t["clipped_share"] for t in data["tensors"]]
    assert shares == sorted(shares, reverse=True) and shares[0] > THRESHOLD
    truth = quantized.clipped_by_numpy(item.path, quantized.scaled(item.samples(), 4.0))
    first = data["tensors"][0]
    assert first["clipped"] == truth[first["tensor"]]["clipped"]
    assert set(data["out_of_range"]) == {t for t, w in truth.items() if w["clipped"] / w["values"] > THRESHOLD}
    table = run_cli("coverage", name, "-c", config, "--benchset", f"{name}-scaled")
    assert table.exit_code == 1 and data["tensors"][0]["tensor"] in table.stdout


def test_a_float_model_has_nothing_to_cover(
    prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory, run_cli: Callable[..., Ran]
) -> None:
    item = prepare(prepared, "torch-cnn-dynamo", tmp_path_factory)
    ran = run_cli("coverage", "torch-cnn-dynamo", "-c", item.ws.write())
    assert ran.exit_code == 3 and "no QuantizeLinear" in ran.stderr, ran.output
