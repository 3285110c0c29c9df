"""What a fix would set in production: the changes a knob made, the fix's words, and whether the baseline had it.

A knob's fix is written from what its variation really changed against production's config
(``changes``), so it never names a setting that is already in effect: the ``threads`` knob of a
config with ``intra_op_num_threads: 1`` changes ``inter_op_num_threads`` only, and its fix says
so. Every such fix changes production, and says so (``measure.ProductionChange``): back to how
the baseline was captured (its recorded session options and provider options), or to a setting
the baseline did not have (``execution_mode: parallel`` when both ran sequential: a change of its
own to weigh, where re-capturing the baseline is the other way out).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from monitor.config.settings import ModelConfig, SessionConfig
from monitor.diagnose.knobs import CUDA, EXPERIMENT_ONLY, PROVIDER_DEFAULTS, Variation
from monitor.diagnose.measure import ProductionChange

UNSET = "unset"
_ENTRY = "session.config_entries"


def changes(variation: Variation, model: ModelConfig) -> dict[str, tuple[str, str]]:
    """What ``variation`` sets that production's config does not: field → (production now, the variation)."""
    found: dict[str, tuple[str, str]] = {}
    mine, theirs = model.session.model_dump(mode="json"), variation.session.model_dump(mode="json")
    for name, value in theirs.items():
        if name == "config_entries":
            for key in sorted(set(value) | set(mine[name])):
                old, new = mine[name].get(key, UNSET), value.get(key, UNSET)
                if old != new:
                    found[f"{_ENTRY}.{key}"] = (str(old), str(new))
        elif name != "run_config_entries" and mine[name] != value:
            found[f"session.{name}"] = (_text(mine[name]), _text(value))
    ours, replayed = [p.name for p in model.providers], [p.name for p in variation.providers]
    if ours != replayed:
        found["providers"] = (", ".join(ours), ", ".join(replayed))
    else:
        for spec in variation.providers:
            now = _options(model, spec.name)
            then = {**PROVIDER_DEFAULTS.get(spec.name, {}), **{k: _option(v) for k, v in spec.options.items()}}
            for key in sorted((set(now) | set(then)) - EXPERIMENT_ONLY):  # its own TensorRT caches: not a fix
                if now.get(key, UNSET) != then.get(key, UNSET):
                    found[f"{spec.name}.{key}"] = (now.get(key, UNSET), then.get(key, UNSET))
    for name, value in variation.env.items():
        if os.environ.get(name, UNSET) != value:
            found[f"env.{name}"] = (os.environ.get(name, UNSET), value)
    return found


def baseline_had(found: Mapping[str, tuple[str, str]], recorded: Mapping[str, Any]) -> bool | None:
    """Whether every change sets what the baseline was captured with; None when the baseline recorded no settings."""
    options = recorded.get("options") if isinstance(recorded.get("options"), Mapping) else None
    reported = recorded.get("provider_options") if isinstance(recorded.get("provider_options"), Mapping) else {}
    if options is None or not found:
        return None
    for name, (_, new) in found.items():
        if name.startswith(f"{_ENTRY}."):
            entries = options.get("config_entries") if isinstance(options.get("config_entries"), Mapping) else {}
            theirs: Any = entries.get(name.removeprefix(f"{_ENTRY}."), UNSET)
        elif name.startswith("session."):
            theirs = options.get(name.removeprefix("session."))
        elif name == "providers":
            requested = recorded.get("requested")
            theirs = ", ".join(map(str, requested)) if isinstance(requested, list) else None
        elif name.startswith("env."):
            return None  # the baseline records the variables it saw in its environment snapshot, not here
        else:
            provider, key = name.split(".", 1)
            given = reported.get(provider) if isinstance(reported, Mapping) else None
            merged = {**PROVIDER_DEFAULTS.get(provider, {}), **(given if isinstance(given, Mapping) else {})}
            theirs = _option(merged.get(key, UNSET))
        if theirs is None or _text(theirs) != new:
            return False
    return True


def fix_for(experiment_knob: str, value: str, found: Mapping[str, tuple[str, str]]) -> str:
    """What to set for a knob whose revert restored (or moved) the baseline: only what it changed."""
    if experiment_knob == "provider":
        return (
            "the baseline matches the CPU provider: make the configured provider load, or use a baseline captured on it"
        )
    if experiment_knob == "disable_cpu_ep_fallback":
        return "make every node run on the configured provider (its libraries, the device), or accept CPU nodes"
    if not found:
        return f"set {experiment_knob}: {value}"
    said = []
    for name, (_, new) in found.items():
        if name.startswith(f"{_ENTRY}."):
            said.append(f"add session.config_entries {name.removeprefix(f'{_ENTRY}.')}: '{new}'")
        elif name.startswith("env."):
            said.append(f"run with {name.removeprefix('env.')}={new} in the environment")
        elif name.startswith("session."):
            said.append(f"set {name}: {new}")
        else:
            provider, key = name.split(".", 1)
            said.append(f"set the {provider} option {key}: {new}")
    lead = "use the settings the baseline was captured with: " if experiment_knob == "baseline_settings" else ""
    return lead + "; ".join(said)


def with_change(fix: str, change: ProductionChange | None) -> str:
    """The fix, marked with what it changes in production."""
    return f"{fix} ({change.describe()})" if change is not None and change.changes else fix


def nondeterminism_fix(
    session: SessionConfig | None, in_use: Sequence[str] = (), options: Mapping[str, Any] | None = None
) -> str:
    """What to try for runs that disagree, without a setting that is already in effect."""
    said = []
    if session is None or not session.deterministic_compute:
        said.append("set session.deterministic_compute: true")
    search = str((options or {}).get("cudnn_conv_algo_search", PROVIDER_DEFAULTS[CUDA]["cudnn_conv_algo_search"]))
    if CUDA in in_use and search != "DEFAULT":
        said.append("for CUDA cudnn_conv_algo_search: DEFAULT")
    said.append("`onnxmon localize MODEL --against self` names the first node that differs between runs")
    return "; ".join(said)


def _options(model: ModelConfig, provider: str) -> dict[str, str]:
    spec = next((p for p in model.providers if p.name == provider), None)
    configured = {k: _option(v) for k, v in (spec.options if spec else {}).items()}
    return {**PROVIDER_DEFAULTS.get(provider, {}), **configured}


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _option(value: object) -> str:
    """A provider option as ONNX Runtime takes it (booleans as ``1`` / ``0``, as ``knobs`` writes them)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)
