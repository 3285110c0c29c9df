"""The knobs a diagnosis varies and how its experiments rank: the sessions they build, no model run.

Each variation is checked through the provider and session options ONNX Runtime builds from it
(``provider_arguments``, ``session_options``), so no GPU is needed for the CUDA and TensorRT knobs;
the ranking is fed experiments whose measures are written here. ``tests/test_diagnose.py`` runs the
diagnosis end to end on real models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnxruntime as ort

from monitor.config.settings import ModelConfig, ProviderSpec, SessionConfig
from monitor.diagnose import knobs, rank
from monitor.diagnose.measure import Measure
from monitor.diagnose.result import Experiment, Hypothesis
from monitor.runtime.session import provider_arguments, session_options
from tests.diagnose_scenarios import FOREST


def test_a_knob_that_cannot_share_a_child_gets_its_own() -> None:
    model = ModelConfig(name="m", path=FOREST, benchset="b")
    found = {(v.knob, v.value): v for v in knobs.variations(model, {}, ["CPUExecutionProvider"])}
    assert not knobs.may_share_a_child(found[("denormal_as_zero", "1")], model)  # the first session's, per process
    assert knobs.may_share_a_child(found[("threads", "intra=1 inter=1")], model)
    assert knobs.may_share_a_child(found[("graph_optimization_level", "basic")], model)
    assert not knobs.may_share_a_child(knobs.tf32_override(model), model)  # read at the first CUDA context


def test_a_revert_that_restores_outranks_an_environment_change() -> None:
    drift, restored = Measure(3e-6, 12, 0.6), Measure(0.0, 0, 0.0)
    before = Experiment("current", "as configured", "unknown", 150.0, False, measure=drift)
    threads = Experiment("threads", "intra=1 inter=1", "thread_count", 0.0, True, measure=restored, effect="restores")
    partly = Experiment(
        "execution_mode",
        "parallel",
        "session_settings_changed",
        9.0,
        False,
        measure=Measure(1e-7, 1, 0.5),
        effect="reduces",
    )
    version = Hypothesis("runtime_version", 0.7, ("onnxruntime.version: '1.17.3' → '1.20.0'",), "pin it", "evidence")
    found = rank.from_experiments([before, threads, partly], drift, reproduced=True)
    ranked = rank.merge([*found, version])
    assert [(h.cause, h.basis) for h in ranked] == [
        ("thread_count", "experiment"),
        ("runtime_version", "evidence"),
        ("session_settings_changed", "experiment"),  # reduced, not restored: after the evidence
    ]
    assert ranked[0].evidence[0].startswith("threads=intra=1 inter=1 restores the baseline: max |error| 3e-06 → 0")


# --- the CUDA and TensorRT knobs: the sessions they build, no GPU needed -----------------------------


def _cuda_model(**options: Any) -> ModelConfig:
    cuda = ProviderSpec(name="CUDAExecutionProvider", options=options)
    return ModelConfig(
        name="m", path=Path("m.onnx"), benchset="b", providers=[cuda, ProviderSpec(name="CPUExecutionProvider")]
    )


def _built(variation: knobs.Variation) -> tuple[dict[str, dict[str, str]], ort.SessionOptions]:
    names, options = provider_arguments(variation.providers)
    return dict(zip(names, options, strict=True)), session_options(variation.session)


def test_cuda_knobs_appear_only_when_cuda_is_in_use() -> None:
    model = _cuda_model()
    on_cpu = {v.knob for v in knobs.variations(model, {}, ["CPUExecutionProvider"])}
    assert not on_cpu & {"cudnn_conv_algo_search", "use_tf32", "env.NVIDIA_TF32_OVERRIDE"}
    on_gpu = {v.knob for v in knobs.variations(model, {}, ["CUDAExecutionProvider", "CPUExecutionProvider"])}
    assert {"cudnn_conv_algo_search", "use_tf32", "env.NVIDIA_TF32_OVERRIDE", "cudnn_conv_use_max_workspace"} <= on_gpu


def test_cuda_variations_build_the_provider_options_and_environment_they_name() -> None:
    model = _cuda_model(device_id=0)
    found = {(v.knob, v.value): v for v in knobs.cuda_variations(model)}
    # ORT's default search is EXHAUSTIVE: only the two others are tried
    assert {value for knob, value in found if knob == "cudnn_conv_algo_search"} == {"DEFAULT", "HEURISTIC"}
    providers, options = _built(found[("cudnn_conv_algo_search", "HEURISTIC")])
    assert providers["CUDAExecutionProvider"] == {"device_id": "0", "cudnn_conv_algo_search": "HEURISTIC"}
    assert providers["CPUExecutionProvider"] == {}
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    providers, _ = _built(found[("use_tf32", "0")])
    assert providers["CUDAExecutionProvider"]["use_tf32"] == "0"
    override = found[("env.NVIDIA_TF32_OVERRIDE", "0")]
    assert dict(override.env) == {"NVIDIA_TF32_OVERRIDE": "0"} and override.cause == "tf32"
    assert _built(override)[0]["CUDAExecutionProvider"] == {"device_id": "0"}  # the env alone, options untouched
    providers, _ = _built(found[("cudnn_conv_use_max_workspace", "0")])
    assert providers["CUDAExecutionProvider"]["cudnn_conv_use_max_workspace"] == "0"
    assert found[("cudnn_conv_algo_search", "DEFAULT")].cause == "conv_algorithm"


def test_a_configured_search_is_replaced_not_duplicated() -> None:
    model = _cuda_model(cudnn_conv_algo_search="DEFAULT", use_tf32=False)
    found = {(v.knob, v.value) for v in knobs.cuda_variations(model)}
    assert ("cudnn_conv_algo_search", "DEFAULT") not in found and ("cudnn_conv_algo_search", "EXHAUSTIVE") in found
    assert not any(knob == "use_tf32" for knob, _ in found)  # already off


def test_tensorrt_reduced_precision_is_turned_off_one_at_a_time() -> None:
    trt = ProviderSpec(name="TensorrtExecutionProvider", options={"trt_fp16_enable": True, "trt_int8_enable": True})
    model = ModelConfig(name="m", path=Path("m.onnx"), benchset="b", providers=[trt])
    found = {v.knob: v for v in knobs.variations(model, {}, ["TensorrtExecutionProvider"])}
    fp16 = _built(found["trt_fp16_enable"])[0]["TensorrtExecutionProvider"]
    assert fp16 == {"trt_fp16_enable": "0", "trt_int8_enable": "1"}
    int8 = _built(found["trt_int8_enable"])[0]["TensorrtExecutionProvider"]
    assert int8 == {"trt_fp16_enable": "1", "trt_int8_enable": "0"}
    assert "trt_fp16_enable" not in {v.knob for v in knobs.variations(model, {}, ["CPUExecutionProvider"])}


def test_session_sweep_builds_real_session_options() -> None:
    model = ModelConfig(name="m", path=Path("m.onnx"), benchset="b", session=SessionConfig(intra_op_num_threads=4))
    found = {(v.knob, v.value): v for v in knobs.variations(model, {}, ["CPUExecutionProvider"])}
    levels = {value for knob, value in found if knob == "graph_optimization_level"}
    assert levels == {"disable", "basic", "extended"}
    disabled = session_options(found[("graph_optimization_level", "disable")].session)
    assert disabled.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    single = session_options(found[("threads", "intra=1 inter=1")].session)
    assert (single.intra_op_num_threads, single.inter_op_num_threads) == (1, 1)
    assert session_options(found[("deterministic_compute", "true")].session).use_deterministic_compute is True
    denormal = found[("denormal_as_zero", "1")].session.config_entries
    assert denormal == {"session.set_denormal_as_zero": "1"}
    parallel = session_options(found[("execution_mode", "parallel")].session)
    assert parallel.execution_mode == ort.ExecutionMode.ORT_PARALLEL


def test_the_baselines_recorded_settings_are_replayed_whole_and_one_by_one() -> None:
    model = ModelConfig(name="m", path=Path("m.onnx"), benchset="b", session=SessionConfig(intra_op_num_threads=2))
    recorded = {
        "requested": ["CPUExecutionProvider"],
        "provider_options": {"CPUExecutionProvider": {}},
        "options": SessionConfig(intra_op_num_threads=1, graph_optimization_level="basic").model_dump(mode="json"),
    }
    found = {(v.knob, v.value): v for v in knobs.variations(model, recorded, ["CPUExecutionProvider"])}
    whole = found[("baseline_settings", "as recorded")].session
    assert (whole.intra_op_num_threads, whole.graph_optimization_level) == (1, "basic")
    alone = found[("session.intra_op_num_threads", "1")]
    assert alone.session.intra_op_num_threads == 1 and alone.session.graph_optimization_level == "all"
    assert alone.cause == "thread_count"
    assert found[("session.graph_optimization_level", "basic")].cause == "graph_optimization"
