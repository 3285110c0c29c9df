"""The sections that shape ``onnxmon serve``: ``daemon:``, ``api:``, ``logging:`` and ``fleet:``.

How the daemon runs checks (its workers, back-off, diagnosis, the check workers and their GPU
memory), its HTTP server, and how it logs. Each class is one YAML section, validated by pydantic
with unknown keys refused; ``monitor.config.settings`` assembles them into ``Settings``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from monitor.config.fields import MAX_BACKOFF, MAX_MEMORY_MB, MAX_RETENTION, MAX_SHORT, Duration, StrictModel


class ApiConfig(StrictModel):
    """The daemon's HTTP server. Mutating calls need the bearer token (``token`` or ``token_file``)."""

    host: str = Field(default="127.0.0.1", description="Listen address (0.0.0.0 in a pod).")
    port: int = Field(default=8080, ge=1, le=65535, description="Listen port.")
    token: str | None = Field(default=None, repr=False, description="Bearer token for mutating calls.")
    token_file: Path | None = Field(default=None, description="File holding the token (a mounted secret).")
    access_log: bool = Field(
        default=False, description="Log one line per HTTP request (off: probes and scrapes are noise)."
    )


LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class LoggingConfig(StrictModel):
    """How `onnxmon serve` logs, read at start; `--log-format` / `--log-level` given on the command line win."""

    format: Literal["text", "json"] = Field(
        default="text",
        description="text, or json: one JSON object per line with a check's fields at the top level"
        " (ONNXMON_LOGGING__FORMAT=json where only the environment can be set).",
    )
    level: Literal["debug", "info", "warning", "error", "critical"] = Field(
        default="info", description="The lowest level logged (debug also shows Alembic's migration lines)."
    )

    @field_validator("format", "level", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class DaemonConfig(StrictModel):
    """How ``onnxmon serve`` runs checks and shares work with other replicas."""

    mode: Literal["single", "daemonset", "sharded"] = Field(
        default="single", description="single process, one pod per GPU node, or replicas sharing the models."
    )
    baseline_scope: Literal["shared", "pool", "node"] = Field(
        default="shared", description="Baselines shared by all nodes, per GPU model (pool), or per node."
    )
    pool: str | None = Field(
        default=None, description="Pool name for baseline_scope 'pool' (default: the GPU model, else 'cpu')."
    )
    auto_capture_baseline: bool = Field(
        default=False, description="Capture a first baseline for a model that has none (never replaces one)."
    )
    max_backoff: Duration = Field(
        default=3600.0,
        le=MAX_BACKOFF,
        description=(
            "Longest wait between runs of a model whose runs keep failing to run (2, 4, ... intervals;"
            " over at once when its model file, baseline or config entry changes)."
        ),
    )
    workers: int = Field(default=4, ge=1, le=64, description="Checks that may run at once (GPU checks serialize).")
    startup_spread: Duration = Field(
        default=10.0,
        le=MAX_SHORT,
        description="First runs after a start are spread over this long (not in sharded mode).",
    )
    memory_limit_mb: int | None = Field(
        default=None, ge=64, le=MAX_MEMORY_MB, description="Address-space cap of each check child."
    )
    diagnose_on_fail: bool = Field(
        default=False,
        description="On a fail, diagnose it (replay the failing samples one knob at a time, rank the causes)"
        " once the fail is recorded, and attach the diagnosis to the stored run; SIGTERM cuts a running"
        " diagnosis within 5 s.",
    )
    diagnose_budget: Duration = Field(
        default=120.0, gt=0, le=MAX_SHORT, description="Longest time one diagnosis may take, all experiments together."
    )
    worker: Literal["fresh", "warm"] = Field(
        default="warm",
        description="Every check runs in an isolated check worker. warm: one per model is kept between checks with"
        " its ONNX Runtime session (stopped after a timeout, a crash, 3/4 of memory_limit_mb or a config change);"
        " fresh: a new worker, and session, per check.",
    )
    warm_workers: int = Field(
        default=32,
        ge=1,
        le=1024,
        description="Most check workers kept at once, each holding one model's session. A full pool makes room"
        " only by stopping a worker idle for 10 minutes; otherwise the check runs in a worker of its own.",
    )
    provider_cache_dir: Path | None = Field(
        default=None,
        description="TensorRT engine and timing caches (trt_engine_cache_path, trt_timing_cache_path) of every"
        " TensorrtExecutionProvider that sets none itself; default: provider-cache beside store.benchsets_dir"
        " (the chart's data volume). Relative to the config file.",
    )
    gpu_memory_limit: int | None = Field(
        default=None,
        ge=2**24,
        le=2**50,
        description="Bytes the CUDA provider's memory arena may hold, per session (one per warm worker): its"
        " gpu_mem_limit, for every CUDAExecutionProvider that sets none itself. The CUDA context and the"
        " cuDNN/cuBLAS workspaces come on top; a run that needs more fails with an out-of-memory error.",
    )
    gpu_arena_extend_strategy: Literal["kNextPowerOfTwo", "kSameAsRequested"] | None = Field(
        default=None,
        description="How the CUDA provider's arena grows (its arena_extend_strategy) where the provider sets none:"
        " kSameAsRequested takes only what a run asks for, kNextPowerOfTwo (ONNX Runtime's default) doubles.",
    )
    gpu_arena_shrinkage: bool = Field(
        default=False,
        description="Give the CUDA arena's unused memory back after every inference run (run option"
        " memory.enable_memory_arena_shrinkage for each CUDA device in use): between checks a warm worker"
        " then keeps its session and weights but not its activations, at the cost of allocating them again.",
    )

    @model_validator(mode="before")
    @classmethod
    def _removed_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "rehash_every" in data:
            raise ValueError("rehash_every was removed (a model file is hashed again when its stat moves): delete it")
        return data


class FleetConfig(StrictModel):
    """The fleet vote (``onnxmon fleet``, docs/fleet.md): nodes of one stack compared by their output digests."""

    vote: bool = Field(
        default=True, description="After each check, the daemon votes for its own node from the shared store."
    )
    min_nodes: int = Field(default=3, ge=2, le=100_000, description="Nodes a group needs before its vote counts.")
    majority: float = Field(
        default=0.5, ge=0.5, lt=1.0, description="Share of a group's nodes the winning digest must exceed."
    )
    max_age: Duration = Field(
        default=86400.0,
        le=MAX_RETENTION,  # further back than year 1 is no datetime: the vote would raise on every read
        description="Runs older than this take no part in the vote (a node gone from the fleet).",
    )
    rerun: bool = Field(
        default=True, description="Re-run an outvoted node's differing samples in a fresh session to attribute it."
    )
