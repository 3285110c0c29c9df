"""The controlled variations a diagnosis replays: one knob at a time, each a complete session recipe.

A ``Variation`` is the current production setup (``ModelConfig.providers`` and ``.session``) with
exactly one thing changed, plus the environment variables the child sets before it builds the
session. ``variations()`` lists them in the order the field's isolation playbook runs them:

1. ``baseline_settings``: the baseline's recorded session options and providers, all at once;
   then each setting that differs from the baseline's, alone (``session.<field>``,
   ``provider.<name>.<option>``);
2. the session sweep: graph optimization level (disable / basic / extended / all), one thread,
   ``use_deterministic_compute``, denormals as zero, the other execution mode;
3. the CPU provider as the reference, and the CPU-fallback probe (``session.disable_cpu_ep_fallback=1``
   without the CPU provider: the session cannot be built when any node would land on the CPU), when
   another provider is in use;
4. CUDA (``cudnn_conv_algo_search``, ``use_tf32``, ``NVIDIA_TF32_OVERRIDE=0``,
   ``cudnn_conv_use_max_workspace``) and TensorRT (``NVIDIA_TF32_OVERRIDE=0``, fp16 / int8 off), each
   only when that provider is in use.

Two GPU facts shape the recipes. ``NVIDIA_TF32_OVERRIDE`` is read once, when a process makes its first
CUDA context, and TensorRT has no TF32 option of its own: a variation with ``env`` needs a process that
has made no session yet (``needs_fresh_process``). And a TensorRT engine is built for one precision: a
cached engine would be loaded unchanged, so each TensorRT variation gets its own engine and timing cache
directory below the configured one (or none).

Most variations are options of one session (optimization level, threads, deterministic compute,
execution mode, CPU or CUDA provider options): ONNX Runtime keeps them per session, so several can be
replayed one after another in one child without one moving another's numbers (``may_share_a_child``).
Three kinds may not, and get a child of their own: ``env`` (read once per process, above); a
``session.set_denormal_as_zero`` other than the production one (ONNX Runtime applies the *first*
session's flush-to-zero to the process's main thread, once: ``std::call_once`` in
``InferenceSession``, so a later session with another setting would run with the first one's); and
anything on TensorRT (engine builds, plugin libraries and GPU memory a process keeps).

Each knob names the cause a successful revert points to (``cause``), so ranking needs no table of
its own. Nothing here runs a model: tests check the sessions these recipes build without a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.config.settings import ModelConfig, ProviderSpec, SessionConfig

CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
CPU = "CPUExecutionProvider"
DENORMAL_KEY = "session.set_denormal_as_zero"
OPT_LEVELS = ("disable", "basic", "extended", "all")
CONV_SEARCHES = ("DEFAULT", "HEURISTIC", "EXHAUSTIVE")
FALLBACK_KEY = "session.disable_cpu_ep_fallback"
_TRT_CACHE_PATHS = ("trt_engine_cache_path", "trt_timing_cache_path")
_TRT_CACHE_SWITCHES = ("trt_engine_cache_enable", "trt_timing_cache_enable")
# Options an experiment sets for itself (its own TensorRT caches), never part of a fix.
EXPERIMENT_ONLY = frozenset({*_TRT_CACHE_PATHS, *_TRT_CACHE_SWITCHES})
# Session fields that change memory, never numbers: a baseline recorded without them is not "different".
_NUMERICS_NEUTRAL = frozenset({"run_config_entries"})
# Provider options that change numerics, with ONNX Runtime's defaults (what "unset" means).
PROVIDER_DEFAULTS: Mapping[str, Mapping[str, str]] = {
    CUDA: {"cudnn_conv_algo_search": "EXHAUSTIVE", "use_tf32": "1", "cudnn_conv_use_max_workspace": "1"},
    TENSORRT: {"trt_fp16_enable": "0", "trt_int8_enable": "0"},
}
# Which cause a session field's revert points to.
_FIELD_CAUSE = {
    "graph_optimization_level": "graph_optimization",
    "intra_op_num_threads": "thread_count",
    "inter_op_num_threads": "thread_count",
    "deterministic_compute": "nondeterminism",
}
_OPTION_CAUSE = {
    "cudnn_conv_algo_search": "conv_algorithm",
    "cudnn_conv_use_max_workspace": "conv_algorithm",
    "use_tf32": "tf32",
    "trt_fp16_enable": "model_precision_changed",
    "trt_int8_enable": "model_quantized",
}


@dataclass(frozen=True)
class Variation:
    """One replay recipe: which knob, set to what, and the whole session it makes."""

    knob: str
    value: str
    cause: str  # the cause code a revert that restores the baseline points to
    providers: tuple[ProviderSpec, ...]
    session: SessionConfig
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def needs_fresh_process(self) -> bool:
        """Its environment variables take effect only before the process makes its first CUDA context."""
        return bool(self.env)

    def to_dict(self) -> dict[str, Any]:
        return {
            "knob": self.knob,
            "value": self.value,
            "cause": self.cause,
            "providers": [p.model_dump(mode="json") for p in self.providers],
            "session": self.session.model_dump(mode="json"),
            "env": dict(self.env),
        }


def may_share_a_child(variation: Variation, model: ModelConfig) -> bool:
    """Whether ``variation`` can be replayed in a child that replays others of ``model`` too (module docstring)."""
    if variation.env or any(spec.name == TENSORRT for spec in variation.providers):
        return False
    return variation.session.config_entries.get(DENORMAL_KEY) == model.session.config_entries.get(DENORMAL_KEY)


def current(model: ModelConfig) -> Variation:
    """The production setup itself: the "before" every other variation is measured against."""
    return Variation("current", "as configured", "unknown", tuple(model.providers), model.session)


def variations(model: ModelConfig, baseline_session: Mapping[str, Any], in_use: Sequence[str]) -> list[Variation]:
    """Every variation worth replaying for ``model``, given the baseline's recorded session facts.

    ``in_use`` is the providers the failing run really used (``CheckResult.providers_effective``):
    the CUDA and TensorRT knobs appear only for a provider that ran the model.
    """
    found = [*_baseline_variations(model, baseline_session), *_session_sweep(model)]
    if [p.name for p in model.providers] != [CPU]:
        found.append(_with(model, "provider", CPU, "execution_provider_fallback", providers=(ProviderSpec(name=CPU),)))
        found += fallback_probe(model)
    if CUDA in in_use:
        found += cuda_variations(model)
    if TENSORRT in in_use:
        found += tensorrt_variations(model)
    return _unique(found)


def cuda_variations(model: ModelConfig) -> list[Variation]:
    """The CUDA provider knobs: conv algorithm search, TF32 (option and env override), max workspace."""
    configured = _options(model, CUDA)
    found = []
    for search in CONV_SEARCHES:
        if configured["cudnn_conv_algo_search"] != search:
            found.append(_option(model, CUDA, "cudnn_conv_algo_search", search))
    if configured["use_tf32"] != "0":
        found.append(_option(model, CUDA, "use_tf32", "0"))
    found.append(tf32_override(model))
    flipped = "0" if configured["cudnn_conv_use_max_workspace"] == "1" else "1"
    found.append(_option(model, CUDA, "cudnn_conv_use_max_workspace", flipped))
    return found


def tensorrt_variations(model: ModelConfig) -> list[Variation]:
    """TensorRT without TF32 (the env override, in a fresh process), and with fp16 / int8 off where the
    config turns them on; each with caches of its own, so its engine is built for its own precision."""
    configured = _options(model, TENSORRT)
    found = [tf32_override(model)]
    for key in ("trt_fp16_enable", "trt_int8_enable"):
        if configured[key] != "0":
            variation = _option(model, TENSORRT, key, "0")
            found.append(_with_own_trt_caches(variation, f"{key}-0"))
    return found


def tf32_override(model: ModelConfig) -> Variation:
    """``NVIDIA_TF32_OVERRIDE=0``: TF32 off for cuBLAS, cuDNN and TensorRT alike (it has no option of its own)."""
    variation = _with(model, "env.NVIDIA_TF32_OVERRIDE", "0", "tf32", env={"NVIDIA_TF32_OVERRIDE": "0"})
    return _with_own_trt_caches(variation, "tf32-off")


def fallback_probe(model: ModelConfig) -> list[Variation]:
    """The session with CPU fallback refused: it fails to build when any node would run on the CPU provider.

    ONNX Runtime refuses the option beside an explicit CPU provider, so the CPU provider is left out;
    nothing to probe when no other provider remains. Beware: the CUDA provider hands small shape
    computations to the CPU on purpose, so a model with shape subgraphs fails this probe too.
    """
    providers = tuple(p for p in model.providers if p.name != CPU)
    if not providers:
        return []
    entries = {**model.session.config_entries, FALLBACK_KEY: "1"}
    return [
        _with(
            model,
            "disable_cpu_ep_fallback",
            "1",
            "execution_provider_fallback",
            session={"config_entries": entries},
            providers=providers,
        )
    ]


def _with_own_trt_caches(variation: Variation, name: str) -> Variation:
    """``variation`` with its TensorRT engine and timing caches in ``<configured>/diagnose/<name>``; caches
    switched on without a path (the working directory) are switched off; none configured, none used."""
    specs = []
    for spec in variation.providers:
        if spec.name == TENSORRT:
            options = dict(spec.options)
            for key in _TRT_CACHE_PATHS:
                if options.get(key):
                    options[key] = f"{str(options[key]).rstrip('/')}/diagnose/{name}"
            on = any(_text(options.get(key, "0")) not in ("0", "false", "False") for key in _TRT_CACHE_SWITCHES)
            if on and not any(options.get(key) for key in _TRT_CACHE_PATHS):  # a cache in the working directory
                options.update({key: "0" for key in _TRT_CACHE_SWITCHES})
            spec = ProviderSpec(name=spec.name, options=options)
        specs.append(spec)
    return Variation(variation.knob, variation.value, variation.cause, tuple(specs), variation.session, variation.env)


def _baseline_variations(model: ModelConfig, recorded: Mapping[str, Any]) -> list[Variation]:
    options = recorded.get("options")
    if not isinstance(options, Mapping):
        return []  # an imported baseline, or one made before sessions were recorded
    try:
        theirs = SessionConfig.model_validate(dict(options))
    except ValueError:
        return []
    providers = _recorded_providers(model, recorded)
    theirs = theirs.model_copy(update={k: getattr(model.session, k) for k in _NUMERICS_NEUTRAL})
    found: list[Variation] = []
    if theirs != model.session or [p.model_dump() for p in providers] != [p.model_dump() for p in model.providers]:
        found.append(Variation("baseline_settings", "as recorded", "session_settings_changed", providers, theirs))
    mine = model.session.model_dump()
    for name, value in theirs.model_dump().items():
        if mine[name] != value:
            cause = _FIELD_CAUSE.get(name, "session_settings_changed")
            found.append(_with(model, f"session.{name}", _text(value), cause, session={name: value}))
    for spec in providers:
        ours = _options(model, spec.name)
        for key, value in spec.options.items():
            if ours.get(key) != value:
                found.append(_option(model, spec.name, key, str(value), knob=f"provider.{spec.name}.{key}"))
    return found


def _recorded_providers(model: ModelConfig, recorded: Mapping[str, Any]) -> tuple[ProviderSpec, ...]:
    """The baseline's requested providers with the numerics options it ran with (as ORT reported them)."""
    requested = recorded.get("requested")
    if not isinstance(requested, list) or not requested:
        return tuple(model.providers)
    reported = recorded.get("provider_options") if isinstance(recorded.get("provider_options"), Mapping) else {}
    specs = []
    for name in (str(n) for n in requested):
        theirs = reported.get(name) if isinstance(reported, Mapping) else None
        watched = set(PROVIDER_DEFAULTS.get(name, {})) | set(_configured(model, name))
        kept: dict[str, str | int | float | bool] = {str(k): str(v) for k, v in (theirs or {}).items() if k in watched}
        specs.append(ProviderSpec(name=name, options=kept))
    return tuple(specs)


def _session_sweep(model: ModelConfig) -> list[Variation]:
    session = model.session
    found = [
        _with(
            model, "graph_optimization_level", level, "graph_optimization", session={"graph_optimization_level": level}
        )
        for level in OPT_LEVELS
        if level != session.graph_optimization_level
    ]
    if (session.intra_op_num_threads, session.inter_op_num_threads) != (1, 1):
        found.append(
            _with(
                model,
                "threads",
                "intra=1 inter=1",
                "thread_count",
                session={"intra_op_num_threads": 1, "inter_op_num_threads": 1},
            )
        )
    if not session.deterministic_compute:
        found.append(
            _with(model, "deterministic_compute", "true", "nondeterminism", session={"deterministic_compute": True})
        )
    denormal = "0" if session.config_entries.get(DENORMAL_KEY) == "1" else "1"
    entries = {**session.config_entries, DENORMAL_KEY: denormal}
    found.append(_with(model, "denormal_as_zero", denormal, "cpu_isa", session={"config_entries": entries}))
    other = "parallel" if session.execution_mode == "sequential" else "sequential"
    found.append(_with(model, "execution_mode", other, "session_settings_changed", session={"execution_mode": other}))
    return found


def _option(model: ModelConfig, provider: str, key: str, value: str, *, knob: str | None = None) -> Variation:
    """The current setup with one provider option set (the provider keeps its other options)."""
    specs = tuple(
        ProviderSpec(name=p.name, options={**p.options, key: value}) if p.name == provider else p
        for p in model.providers
    )
    return _with(model, knob or key, value, _OPTION_CAUSE.get(key, "session_settings_changed"), providers=specs)


def _with(
    model: ModelConfig,
    knob: str,
    value: str,
    cause: str,
    *,
    session: Mapping[str, Any] | None = None,
    providers: tuple[ProviderSpec, ...] | None = None,
    env: Mapping[str, str] | None = None,
) -> Variation:
    changed = model.session.model_copy(update=dict(session)) if session else model.session
    return Variation(knob, value, cause, providers or tuple(model.providers), changed, dict(env or {}))


def _configured(model: ModelConfig, provider: str) -> dict[str, str]:
    spec = next((p for p in model.providers if p.name == provider), None)
    return {k: _text(v) for k, v in (spec.options if spec else {}).items()}


def _options(model: ModelConfig, provider: str) -> dict[str, str]:
    """The provider's effective numerics options: ORT's defaults under what the config sets."""
    return {**PROVIDER_DEFAULTS.get(provider, {}), **_configured(model, provider)}


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value) if not isinstance(value, dict) else ",".join(f"{k}={v}" for k, v in value.items())


def _unique(found: list[Variation]) -> list[Variation]:
    seen: set[tuple[str, str]] = set()
    kept = []
    for variation in found:
        if (variation.knob, variation.value) not in seen:
            seen.add((variation.knob, variation.value))
            kept.append(variation)
    return kept
