"""``onnxmon config from-triton``: a Triton model repository read into config entries whose local sessions
use what each ``config.pbtxt`` configures, read back from the ONNX Runtime session itself.

The ``config.pbtxt`` files follow Triton's documented examples (the onnxruntime backend's README: a TensorRT
FP16 accelerator, the graph level, thread parameters; the model configuration guide: instance groups,
dynamic batching, the response cache).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnxruntime as ort
import pytest

from monitor.config import settings
from monitor.runtime.session import Session, provider_arguments
from tests.conftest import Ran

MODEL = Path(__file__).resolve().parent / "corpus" / "torch" / "cnn_legacy.onnx"

CONFIGS = {
    # The backend README's TensorRT example, on a GPU instance group of two copies.
    "densenet_trt": """
name: "densenet_trt"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "image" data_type: TYPE_FP32 dims: [ -1, 3, 32, 32 ] } ]
output [ { name: "probs" data_type: TYPE_FP32 dims: [ -1, 10 ] } ]
instance_group [ { count: 2 kind: KIND_GPU gpus: [ 1 ] } ]
optimization { execution_accelerators {
  gpu_execution_accelerator : [ {
    name : "tensorrt"
    parameters { key: "precision_mode" value: "FP16" }
    parameters { key: "max_workspace_size_bytes" value: "1073741824" }
    parameters { key: "trt_engine_cache_enable" value: "1" }
  } ]
}}
""",
    # CPU, extended graph level (level 1), the README's thread and execution-mode parameters.
    "classifier_cpu": """
name: "classifier_cpu"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "image" data_type: TYPE_FP32 dims: [ -1, 3, 32, 32 ] } ]
output [ { name: "probs" data_type: TYPE_FP32 dims: [ -1, 10 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
optimization { graph : { level : 1 } }
parameters { key: "intra_op_thread_count" value: { string_value: "2" } }
parameters { key: "inter_op_thread_count" value: { string_value: "1" } }
parameters { key: "execution_mode" value: { string_value: "0" } }
parameters { key: "enable_mem_arena" value: { string_value: "1" } }
""",
    # Dynamic batching and the response cache (model configuration guide), basic graph level (-1), CUDA options.
    "batched_cuda": """
name: "batched_cuda"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "image" data_type: TYPE_FP32 dims: [ 3, 32, 32 ] } ]
output [ { name: "probs" data_type: TYPE_FP32 dims: [ 10 ] } ]
instance_group [ { count: 1 kind: KIND_GPU } ]
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
response_cache { enable: true }
optimization {
  graph : { level : -1 }
  execution_accelerators { gpu_execution_accelerator : [ {
    name : "cuda"
    parameters { key: "cudnn_conv_use_max_workspace" value: "0" }
  } ] }
}
parameters { key: "cudnn_conv_algo_search" value: { string_value: "1" } }
parameters { key: "gpu_mem_limit" value: { string_value: "4294967200" } }
""",
    # Another backend: skipped, and said so.
    "resnet_plan": """
name: "resnet_plan"
platform: "tensorrt_plan"
max_batch_size: 8
""",
}


def repository(root: Path) -> Path:
    for name, text in CONFIGS.items():
        folder = root / "repo" / name
        (folder / "1").mkdir(parents=True)
        (folder / "config.pbtxt").write_text(text, encoding="utf-8")
        shutil.copy(MODEL, folder / "1" / ("model.plan" if name == "resnet_plan" else "model.onnx"))
    return root / "repo"


@pytest.fixture
def written(tmp_path: Path, run_cli: Callable[..., Ran]) -> tuple[Path, dict[str, Any]]:
    ran = run_cli("config", "from-triton", repository(tmp_path), "--endpoint-url", "127.0.0.1:8001")
    assert ran.exit_code == 0, ran.stderr
    config = tmp_path / "onnxmon.yaml"
    config.write_text(ran.stdout, encoding="utf-8")
    as_json = run_cli("config", "from-triton", tmp_path / "repo", "-o", "json")
    import json

    return config, json.loads(as_json.stdout)


def test_config_validate_accepts_what_from_triton_writes(
    written: tuple[Path, Any], run_cli: Callable[..., Ran]
) -> None:
    config, _ = written
    ran = run_cli("config", "validate", "-c", config)
    assert ran.exit_code == 0, ran.stdout + ran.stderr
    text = config.read_text()
    assert "# skipped: resnet_plan" in text
    assert "# batched_cuda: not replicated: dynamic_batching" in text
    assert "# batched_cuda: not replicated: response_cache" in text
    assert "# classifier_cpu: not replicated: parameters.enable_mem_arena" in text


def test_the_cpu_session_uses_the_graph_level_and_threads_of_its_config_pbtxt(written: tuple[Path, Any]) -> None:
    loaded = settings.load(written[0], environ={})
    model = loaded.model("classifier_cpu")
    session = Session(model.path, model.providers, model.session)
    options = session._session.get_session_options()  # what ONNX Runtime holds, not what onnxmon asked
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    assert options.intra_op_num_threads == 2
    assert options.inter_op_num_threads == 1
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert session.info.effective == ("CPUExecutionProvider",)


def test_the_gpu_sessions_ask_for_tensorrt_fp16_and_cuda_as_triton_configures(written: tuple[Path, Any]) -> None:
    loaded = settings.load(written[0], environ={})
    trt = loaded.model("densenet_trt")
    session = Session(trt.path, trt.providers, trt.session)
    names, options = provider_arguments(trt.providers)
    assert (
        list(session.info.requested)
        == names
        == ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    assert options[0]["trt_fp16_enable"] == "1" and options[0]["trt_int8_enable"] == "0"
    assert options[0]["trt_max_workspace_size"] == "1073741824"
    assert options[0]["device_id"] == options[1]["device_id"] == "1"
    if "TensorrtExecutionProvider" in session.info.effective:  # a GPU machine: the options as ORT holds them
        assert session._session.get_provider_options()["TensorrtExecutionProvider"]["trt_fp16_enable"] == "1"
    else:  # this machine has no TensorRT: the check would say so, as a fallback
        assert "TensorrtExecutionProvider" in session.info.fallback
    assert session._session.get_session_options().graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL

    batched = loaded.model("batched_cuda")
    session = Session(batched.path, batched.providers, batched.session)
    assert (
        session._session.get_session_options().graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    )
    cuda = provider_arguments(batched.providers)[1][0]
    assert cuda["cudnn_conv_algo_search"] == "HEURISTIC"
    assert cuda["gpu_mem_limit"] == "4294967200"
    assert batched.checks.batch_invariance is not None and batched.checks.batch_invariance.batch == 8
    assert batched.endpoint is not None and batched.endpoint.url == "127.0.0.1:8001"


def test_a_malformed_config_pbtxt_is_a_config_error_naming_the_file(
    tmp_path: Path, run_cli: Callable[..., Ran]
) -> None:
    folder = tmp_path / "repo" / "broken"
    folder.mkdir(parents=True)
    (folder / "config.pbtxt").write_text('name: "broken"\nplatform: "onnxruntime_onnx"\nmax_batch_size: eight\n')
    ran = run_cli("config", "from-triton", tmp_path / "repo")
    assert ran.exit_code == 2
    assert str(folder / "config.pbtxt") in ran.stderr
    assert "3:" in ran.stderr  # the line
