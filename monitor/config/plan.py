"""One check's plan: everything a check needs from the config, resolved once from a model name.

``plan_for(settings, name)`` looks the model up, joins it with its benchmark set, merges its
tolerances over the global defaults and takes its repeats, timeout, schedule and store paths
(already scoped by ``scope.apply``). Everything downstream (``run_check``, baseline capture,
configured localization and the daemon's check child) takes the ``CheckPlan`` instead of a
name plus the whole ``Settings``, so the model is looked up in one place and a typo fails
before anything runs. The plan is frozen and pickles, so it crosses the daemon's process
boundary to the isolated child unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from monitor.config.settings import BenchsetConfig, ModelConfig, Schedule, Settings
from monitor.errors import ConfigError
from monitor.results import AppliedTolerance

__all__ = ["CheckPlan", "plan_for"]


@dataclass(frozen=True)
class CheckPlan:
    """A model's check, fully resolved: config, benchmark set, tolerances, limits, paths, options."""

    model: ModelConfig
    benchset: BenchsetConfig
    default_tolerance: AppliedTolerance  # model default over the global default
    output_tolerances: Mapping[str, AppliedTolerance]  # per configured output, merged over the default
    repeats: int
    timeout_s: float
    schedule: Schedule
    baselines_dir: Path  # already scoped (pool / node) when the settings were
    benchsets_dir: Path
    auto_capture_baseline: bool  # daemon: capture a first baseline for a model that has none

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def localize_on_fail(self) -> bool:
        return self.model.localize_on_fail

    def tolerance(self, output: str) -> AppliedTolerance:
        """The applied tolerance of one output: its override, else the model's merged default."""
        return self.output_tolerances.get(output, self.default_tolerance)

    def tolerances(self, output_names: Sequence[str]) -> dict[str, AppliedTolerance]:
        """Applied tolerance per model output; a configured output the model lacks is a config error."""
        unknown = sorted(set(self.output_tolerances) - set(output_names))
        if unknown:
            raise ConfigError(
                f"models[{self.model.name}].tolerance.outputs names {unknown}, not outputs of {self.model.path.name};"
                f" outputs are {list(output_names)}"
            )
        return {name: self.tolerance(name) for name in output_names}


# TensorRT builds an engine per model (minutes for a large one) unless it finds it cached: every check
# of a fresh worker, and the first of a warm one, would pay it. The keys a provider sets itself win.
_TENSORRT_CACHES = {
    "trt_engine_cache_enable": True,
    "trt_engine_cache_path": "tensorrt",
    "trt_timing_cache_enable": True,
    "trt_timing_cache_path": "tensorrt",
}


def with_provider_caches(model: ModelConfig, settings: Settings) -> ModelConfig:
    """``model`` with its TensorRT provider's engine and timing caches under ``daemon.provider_cache_dir``."""
    if not any(p.name == "TensorrtExecutionProvider" for p in model.providers):
        return model
    root = settings.daemon.provider_cache_dir or settings.store.benchsets_dir.parent / "provider-cache"
    if not root.is_absolute():
        root = (settings.source.resolve().parent if settings.source else Path.cwd()) / root
    defaults = {k: str(root / v) if isinstance(v, str) else v for k, v in _TENSORRT_CACHES.items()}
    providers = [
        p.model_copy(update={"options": {**defaults, **p.options}}) if p.name == "TensorrtExecutionProvider" else p
        for p in model.providers
    ]
    return model.model_copy(update={"providers": providers})


ARENA_SHRINKAGE = "memory.enable_memory_arena_shrinkage"
_CUDA = "CUDAExecutionProvider"


def with_gpu_memory(model: ModelConfig, settings: Settings) -> ModelConfig:
    """``model`` with the daemon's GPU footprint: the CUDA provider's ``gpu_mem_limit`` and
    ``arena_extend_strategy`` (a provider's own options win), and, with ``daemon.gpu_arena_shrinkage``,
    the run option that gives the arena's unused memory back after each run (``gpu:<device_id>``
    of every CUDA provider; the session drops it when CUDA fell back and has no arena to shrink)."""
    daemon = settings.daemon
    wanted: dict[str, str | int | float | bool] = {}
    if daemon.gpu_memory_limit is not None:
        wanted["gpu_mem_limit"] = daemon.gpu_memory_limit
    if daemon.gpu_arena_extend_strategy is not None:
        wanted["arena_extend_strategy"] = daemon.gpu_arena_extend_strategy
    cuda = [p for p in model.providers if p.name == _CUDA]
    if not cuda or (not wanted and not daemon.gpu_arena_shrinkage):
        return model
    providers = [
        p.model_copy(update={"options": {**wanted, **p.options}}) if p.name == _CUDA else p for p in model.providers
    ]
    session = model.session
    if daemon.gpu_arena_shrinkage and ARENA_SHRINKAGE not in session.run_config_entries:
        devices = sorted({str(p.options.get("device_id", 0)) for p in cuda})
        entries = {**session.run_config_entries, ARENA_SHRINKAGE: ";".join(f"gpu:{d}" for d in devices)}
        session = session.model_copy(update={"run_config_entries": entries})
    return model.model_copy(update={"providers": providers, "session": session})


def plan_for(settings: Settings, name: str) -> CheckPlan:
    """Resolve model ``name`` against ``settings``; ``ConfigError`` naming the known models if unknown."""
    model = with_gpu_memory(with_provider_caches(settings.model(name), settings), settings)
    merged = model.tolerance.default.over(settings.defaults.tolerance)
    return CheckPlan(
        model=model,
        benchset=settings.benchset(model.benchset),
        default_tolerance=merged.applied(),
        output_tolerances={output: settings.tolerance_for(model, output) for output in model.tolerance.outputs},
        repeats=settings.repeats_for(model),
        timeout_s=settings.timeout_for(model),
        schedule=settings.schedule_for(model),
        baselines_dir=settings.store.baselines_dir,
        benchsets_dir=settings.store.benchsets_dir,
        auto_capture_baseline=settings.daemon.auto_capture_baseline,
    )
