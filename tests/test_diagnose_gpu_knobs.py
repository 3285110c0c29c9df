"""The GPU knobs of a diagnosis, checked through the provider and session options they build (no GPU needed).

TF32 under TensorRT needs the env override in a fresh process and an engine of its own; the CPU-fallback
probe must leave the CPU provider out (ORT refuses the option beside it); the cuDNN search and workspace
knobs set the CUDA provider's options; memory-only settings never count as a numerics difference.
"""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest

from monitor.config.plan import plan_for
from monitor.config.settings import ModelConfig, ProviderSpec, SessionConfig
from monitor.diagnose import knobs
from monitor.errors import ModelError
from monitor.runtime.session import Session, provider_arguments, session_options
from tests import modelzoo
from tests.workspace import Workspace

CUDA, TRT, CPU = "CUDAExecutionProvider", "TensorrtExecutionProvider", "CPUExecutionProvider"


def built(variation: knobs.Variation) -> tuple[dict[str, dict[str, str]], ort.SessionOptions]:
    names, options = provider_arguments(variation.providers)
    return dict(zip(names, options, strict=True)), session_options(variation.session)


def by_knob(model: ModelConfig, in_use: list[str]) -> dict[tuple[str, str], knobs.Variation]:
    return {(v.knob, v.value): v for v in knobs.variations(model, {}, in_use)}


def trt_plan(tmp_path: Path) -> ModelConfig:
    ws = Workspace(tmp_path)
    ws.add_model("m", modelzoo.classifier(), providers=[{"name": TRT, "options": {"trt_fp16_enable": True}}, CUDA, CPU])
    return plan_for(ws.settings(), "m").model


def test_tf32_under_tensorrt_is_the_env_override_with_an_engine_of_its_own(tmp_path: Path) -> None:
    model = trt_plan(tmp_path)
    found = by_knob(model, [TRT, CUDA, CPU])
    override = found[("env.NVIDIA_TF32_OVERRIDE", "0")]
    assert override.cause == "tf32" and dict(override.env) == {"NVIDIA_TF32_OVERRIDE": "0"}
    assert override.needs_fresh_process, "the override is read once, at the process's first CUDA context"
    providers, _ = built(override)
    cache = str(tmp_path / "provider-cache" / "tensorrt")
    assert providers[TRT]["trt_engine_cache_path"] == f"{cache}/diagnose/tf32-off"
    assert providers[TRT]["trt_timing_cache_path"] == f"{cache}/diagnose/tf32-off"
    assert providers[TRT]["trt_fp16_enable"] == "1", "only TF32 changes"
    fp16 = built(found[("trt_fp16_enable", "0")])[0][TRT]
    assert fp16["trt_fp16_enable"] == "0" and fp16["trt_engine_cache_path"] == f"{cache}/diagnose/trt_fp16_enable-0"
    assert not found[("trt_fp16_enable", "0")].needs_fresh_process


def test_tf32_under_tensorrt_alone_still_gets_the_override() -> None:
    model = ModelConfig(name="m", path=Path("m.onnx"), benchset="b", providers=[ProviderSpec(name=TRT)])
    found = by_knob(model, [TRT])
    assert ("env.NVIDIA_TF32_OVERRIDE", "0") in found
    assert built(found[("env.NVIDIA_TF32_OVERRIDE", "0")])[0][TRT] == {}, "no cache configured: none used"


def test_a_cache_switched_on_without_a_path_is_switched_off_for_the_experiment() -> None:
    trt = ProviderSpec(name=TRT, options={"trt_engine_cache_enable": True})
    model = ModelConfig(name="m", path=Path("m.onnx"), benchset="b", providers=[trt])
    options = built(knobs.tf32_override(model))[0][TRT]
    assert options == {"trt_engine_cache_enable": "0", "trt_timing_cache_enable": "0"}


def test_the_cpu_fallback_probe_refuses_fallback_without_the_cpu_provider() -> None:
    model = ModelConfig(
        name="m", path=Path("m.onnx"), benchset="b", providers=[ProviderSpec(name=CUDA), ProviderSpec(name=CPU)]
    )
    probe = by_knob(model, [CUDA, CPU])[("disable_cpu_ep_fallback", "1")]
    providers, options = built(probe)
    assert list(providers) == [CUDA], "ORT refuses the option beside an explicit CPU provider"
    assert options.get_session_config_entry(knobs.FALLBACK_KEY) == "1"
    assert probe.cause == "execution_provider_fallback"
    cpu_only = ModelConfig(name="m", path=Path("m.onnx"), benchset="b")
    assert ("disable_cpu_ep_fallback", "1") not in by_knob(cpu_only, [CPU])


def test_the_probe_catches_a_cuda_provider_that_would_run_on_the_cpu(tmp_path: Path) -> None:
    """On this CPU-only machine every node would land on the CPU: the probe's session cannot be built."""
    if CUDA in ort.get_available_providers():
        pytest.skip("CUDA is available here: scripts/gpu-acceptance probes a CPU-only op instead")
    path = modelzoo.save(modelzoo.classifier(), tmp_path / "m.onnx")
    model = ModelConfig(name="m", path=path, benchset="b", providers=[ProviderSpec(name=CUDA), ProviderSpec(name=CPU)])
    probe = knobs.fallback_probe(model)[0]
    with pytest.raises(ModelError):
        Session(path, probe.providers, probe.session)
    assert Session(path, model.providers, model.session).info.fallback == (CUDA,), "without the probe: a log line"


@pytest.mark.parametrize("configured", ["EXHAUSTIVE", "HEURISTIC", "DEFAULT"])
def test_the_conv_search_tries_the_two_other_modes(configured: str) -> None:
    cuda = ProviderSpec(name=CUDA, options={"cudnn_conv_algo_search": configured})
    model = ModelConfig(name="m", path=Path("m.onnx"), benchset="b", providers=[cuda])
    found = by_knob(model, [CUDA])
    tried = {value for knob, value in found if knob == "cudnn_conv_algo_search"}
    assert tried == set(knobs.CONV_SEARCHES) - {configured}
    for value in tried:
        assert built(found[("cudnn_conv_algo_search", value)])[0][CUDA] == {"cudnn_conv_algo_search": value}
    workspace = built(found[("cudnn_conv_use_max_workspace", "0")])[0][CUDA]
    assert (
        workspace["cudnn_conv_use_max_workspace"] == "0"
        and found[("cudnn_conv_use_max_workspace", "0")].cause == "conv_algorithm"
    )


def test_a_baseline_recorded_before_arena_shrinkage_is_not_a_settings_difference() -> None:
    shrink = SessionConfig(run_config_entries={"memory.enable_memory_arena_shrinkage": "gpu:0"})
    model = ModelConfig(name="m", path=Path("m.onnx"), benchset="b", session=shrink)
    recorded = {"requested": [CPU], "provider_options": {CPU: {}}, "options": SessionConfig().model_dump(mode="json")}
    knobs_found = {v.knob for v in knobs.variations(model, recorded, [CPU])}
    assert "baseline_settings" not in knobs_found and "session.run_config_entries" not in knobs_found
