"""A Triton model repository read as onnxmon model entries: ``onnxmon config from-triton REPO``.

Each model's ``config.pbtxt`` is parsed with protobuf's ``text_format`` into Triton's own ``ModelConfig``
message (``tritonclient``'s ``model_config_pb2``: no hand-written parser). For the ``onnxruntime``
backend (``platform: "onnxruntime_onnx"`` or ``backend: "onnxruntime"``) the entry's local session
replicates what the backend configures (its README's option table):

- ``instance_group`` ``KIND_GPU`` (or ``gpus``): the CUDA provider on the group's first GPU; ``KIND_CPU``: CPU;
- ``optimization.execution_accelerators``: ``tensorrt`` (``precision_mode`` FP16 / INT8 as ``trt_fp16_enable`` /
  ``trt_int8_enable``, ``max_workspace_size_bytes`` as ``trt_max_workspace_size``, every ``trt_*`` key as is)
  before CUDA; ``cuda`` parameters as CUDA provider options; ``openvino`` on the CPU;
- ``optimization.graph.level``: unset or 0 all, -1 basic, 1 extended, 2 disabled;
- ``parameters``: ``intra_op_thread_count``, ``inter_op_thread_count``, ``execution_mode``, the CUDA options
  ``cudnn_conv_algo_search`` (0 EXHAUSTIVE, 1 HEURISTIC, 2 DEFAULT), ``gpu_mem_limit``,
  ``arena_extend_strategy``, ``do_copy_in_default_stream``, and the session / run config keys.

What a local session cannot replicate is named with why it matters for the comparison: dynamic batching
(a request computed inside a batch of others: turned into ``checks.batch_invariance``), the response cache
(an answer not computed: the endpoint's cache probe), ``optimization.cuda`` (the server's CUDA graph / stream
policy), ``enable_mem_arena`` / ``enable_mem_pattern`` (allocator settings onnxmon's session does not take),
several instances (copies with the same settings: one session stands for all).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor import bounded
from monitor.errors import ConfigError
from monitor.files import signature

_CONFIG_LIMIT = 1024 * 1024
_LEVELS = {0: "all", -1: "basic", 1: "extended", 2: "disable"}
_ALGO = {"0": "EXHAUSTIVE", "1": "HEURISTIC", "2": "DEFAULT"}
_ARENA = {"0": "kNextPowerOfTwo", "1": "kSameAsRequested"}
_CUDA_PARAMETERS = {"gpu_mem_limit", "do_copy_in_default_stream", "cudnn_conv_use_max_workspace"}
_SESSION_ENTRIES = {"session.use_device_allocator_for_initializers"}
_RUN_ENTRIES = {"memory.enable_memory_arena_shrinkage"}
_ALLOCATOR = {"enable_mem_arena", "enable_mem_pattern"}


@dataclass
class TritonModel:
    """One ONNX model of the repository: its onnxmon entry, its generated set, what is not replicated."""

    name: str
    model: dict[str, Any]
    benchset: dict[str, Any]
    not_replicated: list[str] = field(default_factory=list)


@dataclass
class Repository:
    models: list[TritonModel]
    skipped: list[str]  # a model of another backend, or without a model file, and why


def read(repo: Path, *, endpoint: dict[str, Any] | None = None) -> Repository:
    """Every model folder of ``repo`` (``NAME/config.pbtxt``); ``endpoint`` (protocol, url) adds each model's."""
    if not repo.is_dir():
        raise ConfigError(f"{repo}: not a directory (a Triton model repository holds one folder per model)")
    found, skipped = [], []
    for folder in sorted(p for p in repo.iterdir() if p.is_dir()):
        config = folder / "config.pbtxt"
        if not config.is_file():
            skipped.append(f"{folder.name}: no config.pbtxt")
            continue
        parsed = parse(config)
        backend = parsed.backend or ("onnxruntime" if parsed.platform == "onnxruntime_onnx" else "")
        if backend != "onnxruntime":
            skipped.append(f"{folder.name}: platform {parsed.platform or parsed.backend!r} is not ONNX Runtime's")
            continue
        model_file = _model_file(folder, parsed.default_model_filename or "model.onnx")
        if model_file is None:
            skipped.append(f"{folder.name}: no version folder holds {parsed.default_model_filename or 'model.onnx'}")
            continue
        found.append(entry(parsed, model_file, endpoint))
    return Repository(found, skipped)


def parse(config: Path) -> Any:
    """``config.pbtxt`` as Triton's ``ModelConfig``; a ``ConfigError`` naming the file and line when malformed."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    text = bounded.read_text(config, limit=_CONFIG_LIMIT)
    message = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as exc:
        raise ConfigError(f"{config}: not a Triton model configuration: {exc}") from None
    return message


def entry(config: Any, model_file: Path, endpoint: dict[str, Any] | None) -> TritonModel:
    """The onnxmon model entry (and generated benchmark set) replicating ``config`` for ``model_file``."""
    name = _name(config.name or model_file.parent.parent.name)
    notes: list[str] = []
    params = {key: value.string_value for key, value in config.parameters.items()}
    session: dict[str, Any] = {"graph_optimization_level": _LEVELS.get(config.optimization.graph.level, "all")}
    if config.optimization.graph.level not in _LEVELS:
        notes.append(f"optimization.graph.level {config.optimization.graph.level} is none the backend knows: all")
    for key, target in (
        ("intra_op_thread_count", "intra_op_num_threads"),
        ("inter_op_thread_count", "inter_op_num_threads"),
    ):
        if key in params:
            session[target] = int(params[key])
    if "execution_mode" in params:
        session["execution_mode"] = "parallel" if params["execution_mode"] == "1" else "sequential"
    entries = {k: v for k, v in params.items() if k in _SESSION_ENTRIES}
    run_entries = {k: v for k, v in params.items() if k in _RUN_ENTRIES}
    if entries:
        session["config_entries"] = entries
    if run_entries:
        session["run_config_entries"] = run_entries
    notes += [
        f"parameters.{k}: an allocator setting onnxmon's session does not take"
        for k in sorted(_ALLOCATOR & set(params))
    ]
    model: dict[str, Any] = {"name": name, "path": str(model_file), "benchset": f"{name}-bench"}
    model["providers"] = _providers(config, params, notes)
    model["session"] = session
    _batching(config, model, notes)
    if config.response_cache.enable:
        notes.append(
            "response_cache: the server may answer from its cache without running the model; a local session"
            " always computes. Set endpoint (with cache_probe) to find cached answers"
        )
    if any(group.count > 1 for group in config.instance_group):
        notes.append("instance_group count > 1: copies with the same settings; one local session stands for all")
    if endpoint:
        model["endpoint"] = {**endpoint, "model": name}
    bench = {"name": f"{name}-bench", "generate": {"model": str(model_file), "count": 8, "dims": _dims(model_file)}}
    return TritonModel(name, model, bench, notes)


def _providers(config: Any, params: dict[str, str], notes: list[str]) -> list[dict[str, Any]]:
    gpu = any(g.kind == 1 or (g.kind == 0 and g.gpus) for g in config.instance_group)  # KIND_GPU, or AUTO with gpus
    gpu_ids = [i for g in config.instance_group for i in g.gpus]
    providers: list[dict[str, Any]] = []
    cuda: dict[str, Any] = {"device_id": gpu_ids[0]} if gpu_ids else {}
    if "cudnn_conv_algo_search" in params:
        cuda["cudnn_conv_algo_search"] = _ALGO.get(params["cudnn_conv_algo_search"], params["cudnn_conv_algo_search"])
    if "arena_extend_strategy" in params:
        cuda["arena_extend_strategy"] = _ARENA.get(params["arena_extend_strategy"], params["arena_extend_strategy"])
    cuda.update({k: v for k, v in params.items() if k in _CUDA_PARAMETERS})
    for accelerator in config.optimization.execution_accelerators.gpu_execution_accelerator:
        options = dict(accelerator.parameters)
        if accelerator.name == "tensorrt":
            providers.append(
                {"name": "TensorrtExecutionProvider", "options": _tensorrt(options, cuda.get("device_id"))}
            )
        elif accelerator.name == "cuda":
            cuda.update(options)
        else:
            notes.append(f"gpu_execution_accelerator {accelerator.name!r}: no ONNX Runtime provider onnxmon can name")
    for accelerator in config.optimization.execution_accelerators.cpu_execution_accelerator:
        if accelerator.name == "openvino":
            providers.append({"name": "OpenVINOExecutionProvider", "options": dict(accelerator.parameters)})
        else:
            notes.append(f"cpu_execution_accelerator {accelerator.name!r}: no ONNX Runtime provider onnxmon can name")
    if gpu or (providers and providers[0]["name"] == "TensorrtExecutionProvider"):
        providers.append(
            {"name": "CUDAExecutionProvider", "options": cuda} if cuda else {"name": "CUDAExecutionProvider"}
        )
    elif cuda:
        notes.append("CUDA options on a model without a GPU instance group: not applied")
    providers.append({"name": "CPUExecutionProvider"})
    if not config.instance_group:
        notes.append(
            "no instance_group: Triton places the model on its GPUs when it has any (KIND_AUTO); replicated on the CPU"
        )
    if config.optimization.HasField("cuda"):
        notes.append(
            "optimization.cuda (CUDA graphs, stream policy): the server's execution policy, not a session option;"
            " its effect shows only in the endpoint's numbers"
        )
    return providers


def _tensorrt(options: dict[str, str], device: Any) -> dict[str, Any]:
    converted: dict[str, Any] = {"device_id": device} if device is not None else {}
    for key, value in options.items():
        if key == "precision_mode":
            converted["trt_fp16_enable"] = value.upper() == "FP16"
            converted["trt_int8_enable"] = value.upper() == "INT8"
        elif key == "max_workspace_size_bytes":
            converted["trt_max_workspace_size"] = int(value)
        elif key.startswith("trt_") or key.startswith("int8_"):
            converted[key if key.startswith("trt_") else f"trt_{key}"] = _typed(value)
    return converted


def _batching(config: Any, model: dict[str, Any], notes: list[str]) -> None:
    if not config.HasField("dynamic_batching"):
        return
    batching = config.dynamic_batching
    preferred = list(batching.preferred_batch_size)
    notes.append(
        f"dynamic_batching (preferred sizes {preferred or 'any'}, max queue delay"
        f" {batching.max_queue_delay_microseconds} us): the server computes a request inside a batch of others;"
        " onnxmon replays one sample at a time. A model that is not batch invariant answers otherwise in a"
        " batch: checks.batch_invariance measures it"
    )
    if config.max_batch_size >= 2:
        model["checks"] = {"batch_invariance": {"batch": min(int(config.max_batch_size), 8)}}


def _model_file(folder: Path, filename: str) -> Path | None:
    versions = sorted((int(p.name), p) for p in folder.iterdir() if p.is_dir() and p.name.isdigit())
    for _, version in reversed(versions):  # Triton's default policy serves the latest version
        if (version / filename).is_file():
            return (version / filename).resolve()
    return None


def _dims(model_file: Path) -> dict[str, int]:
    dims: dict[str, int] = {}
    for spec in signature.model_signature(model_file):
        for axis, dim in enumerate(spec.shape):
            if isinstance(dim, str):
                dims[dim if dim != "?" else f"{spec.name}:{axis}"] = 1
    return dims


def _name(text: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", text).lstrip("._-")
    return cleaned or "model"


def _typed(value: str) -> bool | int | str:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    return int(value) if re.fullmatch(r"-?\d+", value) else value


def as_yaml(repo: Path, read: Repository) -> str:
    """The entries as a config file's text, what each model cannot replicate as comments above it."""
    import yaml

    lines = [f"# From the Triton model repository {repo} (onnxmon config from-triton)."]
    lines += [f"# skipped: {note}" for note in read.skipped]
    for model in read.models:
        lines += [f"# {model.name}: not replicated: {note}" for note in model.not_replicated]
    config = {"benchsets": [m.benchset for m in read.models], "models": [m.model for m in read.models]}
    return "\n".join(lines) + "\n" + yaml.safe_dump(config, sort_keys=False)
