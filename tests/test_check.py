"""The check engine end to end: real ONNX Runtime sessions, real files, real drift scenarios."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnxruntime.quantization import QuantType, quantize_dynamic

from monitor import capture
from monitor.check import run_check
from monitor.config.plan import plan_for
from monitor.files import baselines
from monitor.results import CheckResult, Verdict
from tests import modelzoo
from tests.workspace import Workspace


def codes(result: CheckResult) -> set[str]:
    return {r.code for r in result.all_reasons()}


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


def captured(ws: Workspace, name: str = "clf") -> None:
    capture.capture_baseline(plan_for(ws.settings(), name))


def test_an_unchanged_setup_passes_twenty_reruns_in_a_row(ws: Workspace) -> None:
    ws.add_model("clf", modelzoo.classifier(), repeats=2)
    captured(ws)
    settings = ws.settings()
    results = [run_check(plan_for(settings, "clf")) for _ in range(20)]
    assert [r.verdict for r in results] == [Verdict.PASS] * 20
    assert all(o.metrics.bitwise_equal for r in results for o in r.outputs)
    assert all(o.metrics.nondeterminism_max_abs == 0.0 for r in results for o in r.outputs)


def test_changed_graph_optimization_level_is_reported_as_drift(ws: Workspace) -> None:
    # At level "all" ORT fuses the written-out LayerNorm and GELU into kernels that round
    # differently: a change of ~1e-7 that a tight tolerance must see.
    ws.add_model(
        "mlp",
        modelzoo.layernorm_gelu(),
        count=8,
        dims={"batch": 16},
        session={"graph_optimization_level": "disable"},
        tolerance={"default": {"atol": 1e-8, "rtol": 1e-7}},
    )
    captured(ws, "mlp")
    assert run_check(plan_for(ws.settings(), "mlp")).verdict is Verdict.PASS
    ws.set("mlp", session={"graph_optimization_level": "all"})
    result = run_check(plan_for(ws.settings(), "mlp"))
    assert result.verdict is Verdict.FAIL
    assert "atol_rtol" in codes(result)
    assert result.attribution == "numeric"


def test_fp16_conversion_is_reported_as_drift(ws: Workspace) -> None:
    from onnxconverter_common import float16

    model = modelzoo.deep_mlp(layers=10)
    ws.add_model("mlp", model)
    captured(ws, "mlp")
    ws.replace_model("mlp", float16.convert_float_to_float16(model, keep_io_types=True))
    result = run_check(plan_for(ws.settings(), "mlp"))
    assert result.verdict is Verdict.FAIL
    assert {"atol_rtol", "model_changed"} <= codes(result)
    assert result.attribution == "model_changed"
    (y,) = result.outputs
    assert 1e-5 < y.metrics.max_abs_error < 1e-1, "fp16 rounding, not garbage"


def test_an_fp16_output_against_an_fp32_baseline_is_measured_and_fails_with_dtype_changed(ws: Workspace) -> None:
    # An fp16 conversion with keep_io_types=False changes the output's dtype: the values are
    # still compared (in float64) and the dtype change is a failure of its own.
    ws.add_model("scale", modelzoo.scale(1.5), tolerance={"default": {"atol": 1e-2, "rtol": 1e-2}})
    captured(ws, "scale")
    ws.replace_model("scale", modelzoo.scale(1.5, output_dtype=onnx.TensorProto.FLOAT16))
    result = run_check(plan_for(ws.settings(), "scale"))
    assert result.verdict is Verdict.FAIL
    (y,) = result.outputs
    assert y.verdict is Verdict.FAIL
    assert y.dtype == "float16"
    assert y.reasons[0].code == "dtype_changed"
    assert "float16" in y.reasons[0].detail and "float32" in y.reasons[0].detail
    assert y.metrics.element_count > 0 and y.is_measured
    assert y.metrics.max_abs_error > 0.0 and y.metrics.max_ulp is not None
    assert y.metrics.snr_db > 40.0, "fp16 rounding, not garbage"


def test_int8_dynamic_quantization_is_reported_as_drift(ws: Workspace, tmp_path: Path) -> None:
    model_path = ws.add_model("clf", modelzoo.classifier())
    captured(ws)
    quantized = tmp_path / "q.onnx"
    quantize_dynamic(str(model_path), str(quantized), weight_type=QuantType.QInt8)
    ws.replace_model("clf", onnx.load(str(quantized)))
    result = run_check(plan_for(ws.settings(), "clf"))
    assert result.verdict is Verdict.FAIL
    assert "atol_rtol" in codes(result)


def test_a_tiny_weight_change_hidden_by_the_softmax_is_caught_by_snr(ws: Workspace) -> None:
    # w2[0, 5] changed by 1e-3 relative moves the probabilities by < 5e-6: inside atol/rtol, so
    # the element-wise rule alone passes. The error energy is still ~1e-11 of the signal
    # (SNR ~114 dB), far above fp32 re-association noise (~140 dB), so snr_min_db=120 sees it.
    model = modelzoo.classifier(seed=3)
    ws.add_model(
        "clf", model, count=8, tolerance={"outputs": {"prob": {"atol": 1e-5, "rtol": 1e-4, "snr_min_db": 120.0}}}
    )
    captured(ws)
    ws.replace_model("clf", modelzoo.perturb_initializer(model, "w2", 1e-3, index=5))
    result = run_check(plan_for(ws.settings(), "clf"))
    prob = next(o for o in result.outputs if o.name == "prob")
    assert prob.metrics.mismatch_count == 0, "the element-wise rule alone passes"
    assert not prob.metrics.bitwise_equal
    assert prob.verdict is Verdict.FAIL
    assert {r.code for r in prob.reasons} == {"snr"}


def test_a_swapped_model_file_fails_with_a_hash_reason_even_if_outputs_agree(ws: Workspace) -> None:
    model = modelzoo.classifier()
    ws.add_model("clf", model)
    captured(ws)
    renamed = onnx.ModelProto()
    renamed.CopyFrom(model)
    renamed.producer_version = "swapped"  # same numbers, different file
    ws.replace_model("clf", renamed)
    result = run_check(plan_for(ws.settings(), "clf"))
    assert result.verdict is Verdict.FAIL
    assert codes(result) == {"model_changed"}
    assert result.attribution == "model_changed"


def test_asking_for_cuda_on_a_machine_without_it_is_a_provider_fallback_failure(ws: Workspace) -> None:
    ws.add_model("clf", modelzoo.classifier())
    captured(ws)
    ws.set("clf", providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    result = run_check(plan_for(ws.settings(), "clf"))
    assert result.verdict is Verdict.FAIL
    assert "provider_fallback" in codes(result)
    assert result.providers_effective == ("CPUExecutionProvider",)
    assert result.attribution == "env_changed"


def test_a_model_without_a_baseline_is_an_error_that_says_how_to_fix_it(ws: Workspace) -> None:
    ws.add_model("clf", modelzoo.classifier())
    result = run_check(plan_for(ws.settings(), "clf"))
    assert result.verdict is Verdict.ERROR
    assert "onnxmon baseline capture clf" in result.reasons[0].detail


def test_a_missing_model_file_is_an_error_and_other_models_are_unaffected(ws: Workspace) -> None:
    ws.add_model("a", modelzoo.classifier(seed=1))
    path_b = ws.add_model("b", modelzoo.classifier(seed=2))
    captured(ws, "a")
    captured(ws, "b")
    path_b.unlink()
    settings = ws.settings()
    broken, healthy = run_check(plan_for(settings, "b")), run_check(plan_for(settings, "a"))
    assert broken.verdict is Verdict.ERROR
    assert broken.reasons[0].code == "model_error"
    assert str(path_b) in broken.reasons[0].detail
    assert healthy.verdict is Verdict.PASS


def test_a_corrupt_onnx_file_is_an_error_naming_the_file(ws: Workspace) -> None:
    path = ws.add_model("clf", modelzoo.classifier())
    captured(ws)
    path.write_bytes(b"\x08\x07garbage-not-a-protobuf" * 10)
    result = run_check(plan_for(ws.settings(), "clf"))
    assert result.verdict is Verdict.ERROR
    assert result.reasons[0].code == "model_error"
    assert str(path) in result.reasons[0].detail


def test_a_baseline_tensor_whose_checksum_no_longer_matches_is_an_error(ws: Workspace) -> None:
    ws.add_model("clf", modelzoo.classifier())
    captured(ws)
    baseline = baselines.active(ws.settings().store.baselines_dir, "clf")
    assert baseline is not None
    victim = sorted((baseline.directory / "outputs").iterdir())[0]
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    result = run_check(plan_for(ws.settings(), "clf"))
    assert result.verdict is Verdict.ERROR
    assert result.reasons[0].code == "baseline_error"
    assert victim.name in result.reasons[0].detail


def test_an_output_name_in_the_config_that_the_model_lacks_is_a_config_error(ws: Workspace) -> None:
    ws.add_model("clf", modelzoo.classifier())
    captured(ws)
    ws.set("clf", tolerance={"outputs": {"logitz": {"atol": 1e-3}}})
    result = run_check(plan_for(ws.settings(), "clf"))
    assert result.verdict is Verdict.ERROR
    assert result.reasons[0].code == "config_error"
    assert "'logitz'" in result.reasons[0].detail and "logits" in result.reasons[0].detail


def test_an_output_whose_shape_changed_is_an_error_not_a_crash(ws: Workspace) -> None:
    ws.add_model("clf", modelzoo.classifier(classes=10))
    captured(ws)
    ws.replace_model("clf", modelzoo.classifier(classes=12))
    result = run_check(plan_for(ws.settings(), "clf"))
    assert result.verdict is Verdict.ERROR
    assert "shape_changed" in codes(result)


def test_an_imported_baseline_from_reference_outputs_is_compared_like_a_captured_one(
    ws: Workspace, tmp_path: Path
) -> None:
    ws.add_model("clf", modelzoo.classifier(), count=3)
    settings = ws.settings()
    reference = capture.capture_baseline(plan_for(settings, "clf"), reference=True)
    files = []
    for index in range(3):
        path = tmp_path / f"ref{index}.npz"
        np.savez(path, **reference.sample_outputs(index))
        files.append(path)
    imported = capture.import_baseline(plan_for(settings, "clf"), files, promote=True)
    assert imported.meta.source == "imported"
    assert run_check(plan_for(settings, "clf")).baseline_id == imported.id
    assert run_check(plan_for(settings, "clf")).verdict is Verdict.PASS


def test_results_round_trip_through_their_dict_form(ws: Workspace) -> None:
    ws.add_model("clf", modelzoo.classifier())
    captured(ws)
    result = run_check(plan_for(ws.settings(), "clf"))
    assert CheckResult.from_dict(result.to_dict()) == result


@pytest.mark.process
def test_a_failing_run_says_why_at_the_top_of_its_json_naming_each_output(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    """``reasons`` are the check's own (a changed model, a fallback); a numeric failure lives on its output.
    ``all_reasons`` holds both, so a failing run's JSON says why at the top level, never ``[]``."""
    import json

    from monitor import cli

    tight = {"default": {"atol": 1e-8, "rtol": 1e-7}}
    level = {"graph_optimization_level": "disable"}
    ws.add_model("mlp", modelzoo.layernorm_gelu(), count=8, dims={"batch": 16}, session=level, tolerance=tight)
    captured(ws, "mlp")
    ws.set("mlp", session={"graph_optimization_level": "all"})  # fused kernels round differently
    config = str(ws.write())
    capsys.readouterr()
    code = cli.main(["check", "mlp", "--json", "--no-store", "-c", config])
    (result,) = json.loads(capsys.readouterr().out)
    assert code == 1 and result["verdict"] == "fail"
    assert result["reasons"] == []  # numeric only: nothing at the check level
    assert result["all_reasons"], "a failing run says why at the top level"
    assert {r["output"] for r in result["all_reasons"]} <= {o["name"] for o in result["outputs"]}
    assert {r["code"] for r in result["all_reasons"]} == {r["code"] for o in result["outputs"] for r in o["reasons"]}
