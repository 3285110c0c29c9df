"""The onnxmon configuration: one YAML file plus ``ONNXMON_*`` environment overrides.

``load(path)`` reads the file, applies env overrides (``ONNXMON_STORE__URL=...``;
``__`` nests, a number indexes a list: ``ONNXMON_MODELS__0__REPEATS=3``), validates
everything with pydantic and reports *every* problem at once with its path, e.g.
``models[2].tolerance.outputs.logits.atol: must be >= 0``. Relative paths are resolved
against the directory of the config file, so a config works from any working directory.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    Field,
    ValidationError,
    model_validator,
)

from monitor import bounded
from monitor.config import dburl, envoverride
from monitor.config.schema import (
    BatchInvariance,
    BenchsetConfig,
    Defaults,
    Duration,
    EndpointConfig,
    GenerateSpec,
    GraphOptLevel,
    ModelChecks,
    ModelConfig,
    ModelTolerance,
    ProviderSpec,
    Schedule,
    SessionConfig,
    StoreConfig,
    StrictModel,
    Tolerance,
    TopK,
    parse_duration,
)
from monitor.config.serve_schema import ApiConfig, DaemonConfig, FleetConfig, LoggingConfig
from monitor.errors import ConfigError
from monitor.results import AppliedTolerance

log = logging.getLogger(__name__)

DEFAULT_CONFIG = "onnxmon.yaml"
MAX_CONFIG_BYTES = 8 << 20  # a config with thousands of models is well under a megabyte
ENV_PREFIX = envoverride.ENV_PREFIX

__all__ = [
    "DEFAULT_CONFIG",
    "ENV_PREFIX",
    "ApiConfig",
    "BatchInvariance",
    "BenchsetConfig",
    "DaemonConfig",
    "Defaults",
    "Duration",
    "EndpointConfig",
    "GenerateSpec",
    "GraphOptLevel",
    "LoggingConfig",
    "ModelChecks",
    "ModelConfig",
    "ModelTolerance",
    "ProviderSpec",
    "Schedule",
    "SessionConfig",
    "Settings",
    "StoreConfig",
    "Tolerance",
    "TopK",
    "apply_env_overrides",
    "config_path",
    "format_error",
    "from_mapping",
    "load",
    "parse_duration",
]


class Settings(StrictModel):
    """The whole configuration file."""

    store: StoreConfig = StoreConfig()
    api: ApiConfig = ApiConfig()
    daemon: DaemonConfig = DaemonConfig()
    defaults: Defaults = Defaults()
    logging: LoggingConfig = LoggingConfig()
    fleet: FleetConfig = FleetConfig()
    benchsets: list[BenchsetConfig] = Field(default=[], description="Declared benchmark sets.")
    models: list[ModelConfig] = Field(default=[], description="Models to monitor.")
    source: Path | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _cross_references(self) -> Settings:
        problems = []  # all of them, in one error: a config is fixed in one pass, not one problem per run
        for kind, items in (("model", self.models), ("benchset", self.benchsets)):
            seen: set[str] = set()
            for item in items:
                if item.name in seen:
                    problems.append(f"{kind} name {item.name!r} is used twice")
                seen.add(item.name)
        for model in self.models:
            schedule = self.schedule_for(model)
            timeout = self.timeout_for(model)
            if schedule.interval is not None and timeout >= schedule.interval:
                problems.append(
                    f"model {model.name!r}: timeout {timeout:g}s must be shorter than its schedule interval"
                    f" {schedule.interval:g}s, or runs would pile up"
                )
            elif schedule.cron is not None and timeout >= (gap := schedule.shortest_gap_seconds(under=timeout + 1)):
                problems.append(
                    f"model {model.name!r}: timeout {timeout:g}s must be shorter than the shortest gap between"
                    f" two starts of its schedule cron {schedule.cron!r} ({gap:g}s), or runs would pile up"
                )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def undeclared_benchsets(self) -> list[str]:
        """Problems with models naming a set that is neither declared nor imported under ``benchsets_dir``.

        Checked once the paths are resolved (``from_mapping``): an imported set is found on disk.
        """
        declared = {b.name for b in self.benchsets}
        problems = []
        for model in self.models:
            if model.benchset not in declared and not _imported(self.store.benchsets_dir, model.benchset):
                problems.append(
                    f"model {model.name!r} uses benchset {model.benchset!r}, which is not declared;"
                    f" declared: {sorted(declared)}; nor imported under {self.store.benchsets_dir}"
                    f" (onnxmon benchset import {model.benchset} FILES...)"
                )
        return problems

    def redacted(self) -> dict[str, Any]:
        """The settings as JSON-safe data with secrets masked: for ``config show``, logs and pages."""
        data = self.model_dump(mode="json")
        data["store"]["url"] = dburl.mask_url(self.store.url)
        if data["api"].get("token"):
            data["api"]["token"] = "***"
        return data

    def model(self, name: str) -> ModelConfig:
        for model in self.models:
            if model.name == name:
                return model
        raise ConfigError(f"no model {name!r} in config; models are {[m.name for m in self.models]}")

    def benchset(self, name: str) -> BenchsetConfig:
        """The declared set ``name``, or one made by ``benchset import`` (found under ``benchsets_dir``)."""
        for benchset in self.benchsets:
            if benchset.name == name:
                return benchset
        if _imported(self.store.benchsets_dir, name):
            return BenchsetConfig(name=name, imported=True)
        raise ConfigError(f"no benchset {name!r} in config; benchsets are {[b.name for b in self.benchsets]}")

    def tolerance_for(self, model: ModelConfig, output: str) -> AppliedTolerance:
        """Per-output override over the model default over the global default."""
        merged = model.tolerance.default.over(self.defaults.tolerance)
        if output in model.tolerance.outputs:
            merged = model.tolerance.outputs[output].over(merged)
        return merged.applied()

    def repeats_for(self, model: ModelConfig) -> int:
        return model.repeats if model.repeats is not None else self.defaults.repeats

    def timeout_for(self, model: ModelConfig) -> float:
        return model.timeout if model.timeout is not None else self.defaults.timeout

    def schedule_for(self, model: ModelConfig) -> Schedule:
        return model.schedule if model.schedule is not None else self.defaults.schedule


def config_path(explicit: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The config to read: ``-c`` beats ``ONNXMON_CONFIG`` beats ``./onnxmon.yaml``."""
    env = os.environ if environ is None else environ
    return Path(explicit or env.get("ONNXMON_CONFIG") or DEFAULT_CONFIG)


def load(path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read, override from the environment, validate, and resolve paths; raises ``ConfigError``."""
    env = os.environ if environ is None else environ
    file = config_path(path, env)
    try:
        # Bounded and regular-file-only: `-c /dev/zero` or a FIFO put in its place never hangs a reload.
        text = bounded.read_text(file, limit=MAX_CONFIG_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"config file {file} not found (pass -c PATH or set ONNXMON_CONFIG)") from None
    except OSError as exc:
        raise ConfigError(f"config file {file} cannot be read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {file} is not UTF-8 text (byte {exc.start}): is it the right file?") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{file}:{where} is not valid YAML: {problem}") from None
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: expected a mapping at the top level, got {type(raw).__name__}")
    for line in envoverride.unknown(env, Settings):
        log.warning("%s", line)
    return from_mapping(apply_env_overrides(raw, env), origin=file)


def from_mapping(raw: Mapping[str, Any], origin: Path | None = None) -> Settings:
    """Validate an already-parsed mapping; paths resolve against ``origin``'s directory."""
    try:
        settings = Settings.model_validate(dict(raw))
    except ValidationError as exc:
        where = f"{origin}: " if origin else ""
        problems = "\n".join(f"  {format_error(e)}" for e in exc.errors())
        raise ConfigError(f"{where}{exc.error_count()} problem(s) in config:\n{problems}") from None
    base = origin.resolve().parent if origin else Path.cwd()
    resolved = _resolve_paths(settings, base, origin)
    undeclared = resolved.undeclared_benchsets()
    if undeclared:
        where = f"{origin}: " if origin else ""
        listed = "\n".join(f"  {p}" for p in undeclared)
        raise ConfigError(f"{where}{len(undeclared)} problem(s) in config:\n{listed}")
    return resolved


def _imported(root: Path, name: str) -> bool:
    """True when ``root/name`` holds a version directory (``v1``...): a set made by ``benchset import``."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        return False
    folder = root / name
    return folder.is_dir() and any(p.is_dir() and re.fullmatch(r"v\d+", p.name) for p in folder.iterdir())


def format_error(error: Mapping[str, Any]) -> str:
    """``models[2].tolerance.outputs.logits.atol: must be >= 0`` from a pydantic error."""
    path = ""
    for part in error.get("loc", ()):
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("function-before[_provider_list(), list[ProviderSpec]]",):
            continue
        else:
            path += f".{part}" if path else str(part)
    message = str(error.get("msg", "invalid"))
    message = message.removeprefix("Value error, ")
    message = message.replace("Input should be greater than or equal to", "must be >=")
    message = message.replace("Input should be less than or equal to", "must be <=")
    message = message.replace("Extra inputs are not permitted", "unknown key")
    return f"{path or '(top level)'}: {message}"


def apply_env_overrides(raw: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """Return ``raw`` with every ``ONNXMON_A__B__0__C=value`` applied, typed by the field it sets."""
    return envoverride.apply(raw, environ, Settings)


def _resolve_paths(settings: Settings, base: Path, origin: Path | None) -> Settings:
    def rel(path: Path) -> Path:
        return path if path.is_absolute() else (base / path)

    store = settings.store.model_copy(
        update={
            "url": dburl.from_file(settings.store, rel) if settings.store.url_file else settings.store.url,
            "url_file": rel(settings.store.url_file) if settings.store.url_file else None,
            "baselines_dir": rel(settings.store.baselines_dir),
            "benchsets_dir": rel(settings.store.benchsets_dir),
            "spool_dir": rel(settings.store.spool_dir) if settings.store.spool_dir else None,
        }
    )
    if store.url.startswith("sqlite:///") and not store.url.startswith("sqlite:////"):
        db = store.url.removeprefix("sqlite:///")
        if db and db != ":memory:":
            store = store.model_copy(update={"url": f"sqlite:///{rel(Path(db))}"})
    benchsets = []
    for b in settings.benchsets:
        update: dict[str, Any] = {}
        if b.generate:
            update["generate"] = b.generate.model_copy(update={"model": rel(b.generate.model)})
        if b.npz:
            update["npz"] = [rel(p) for p in b.npz]
        if b.onnx_test_data:
            update["onnx_test_data"] = rel(b.onnx_test_data)
        if b.polygraphy_json:
            update["polygraphy_json"] = rel(b.polygraphy_json)
        benchsets.append(b.model_copy(update=update))
    models = [
        m.model_copy(update={"path": rel(m.path), "endpoint": _endpoint_paths(m.endpoint, rel)})
        for m in settings.models
    ]
    api = settings.api
    if api.token_file is not None:
        api = api.model_copy(update={"token_file": rel(api.token_file)})
    return settings.model_copy(
        update={"store": store, "api": api, "benchsets": benchsets, "models": models, "source": origin}
    )


def _endpoint_paths(endpoint: EndpointConfig | None, rel: Callable[[Path], Path]) -> EndpointConfig | None:
    """``endpoint`` with its ``token_file`` relative to the config file."""
    if endpoint is None or endpoint.token_file is None:
        return endpoint
    return endpoint.model_copy(update={"token_file": rel(endpoint.token_file)})
