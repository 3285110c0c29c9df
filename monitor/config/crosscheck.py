"""Cross-checks of a loaded config against the files it names: every problem, with its field path.

The schema (pydantic) says whether each value is well-formed; these say whether the values fit
the world: a model file that does not exist, a field naming an output the model does not have (a
typo in ``tolerance.outputs.<name>`` would silently never apply). Each is cheap (a stat, the
model's output names read without its weights) and certain.

Fields that name outputs are listed in one place, ``output_references``: pairs of (field path,
output name). A new field that names outputs (``decisions:``, when it comes) adds its pairs there,
and ``config validate``, ``check`` and ``capture`` check it with the rest.

The config layer sits below ``files/``, so the reader of a model's output names is handed in
(``OutputsOf``: ``files.signature.output_names``), as ``scope.apply`` is handed the GPU name.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from monitor import bounded
from monitor.config import decisions, settings
from monitor.config.settings import BenchsetConfig, GenerateSpec, ModelConfig, Settings
from monitor.errors import ConfigError, MonitorError

OutputsOf = Callable[[Path], Sequence[str]]  # the model's output names; MonitorError when unreadable
# Why capture would refuse a generated set (files.benchset_generate.spec_problems): one line each.
GenerateCheck = Callable[[GenerateSpec], Sequence[str]]


def output_references(model: ModelConfig, where: str) -> list[tuple[str, str]]:
    """(field path, output name) for every field of ``model`` that names one of its outputs."""
    tolerances = [(f"{where}.tolerance.outputs.{name}", name) for name in model.tolerance.outputs]
    return tolerances + decisions.references(model.decisions, where)


def unknown_outputs(references: Iterable[tuple[str, str]], outputs: Sequence[str], model_file: str) -> list[str]:
    """One problem per reference naming an output that ``outputs`` does not hold.

    ``name:part`` is the companion tensor of a non-tensor output ``name`` (``runtime/nontensor.py``:
    ``labels:keys``), so its prefix is what must be an output.
    """
    known = set(outputs)
    return [
        f"{path}: {name!r} is not an output of {model_file}; outputs are {list(outputs)}"
        for path, name in references
        if name not in known and name.split(":", 1)[0] not in known
    ]


def model_problems(
    model: ModelConfig, where: str, outputs_of: OutputsOf, types_of: decisions.TypesOf | None = None
) -> list[str]:
    """What is wrong between ``model``'s config and its file: missing, unreadable, unknown outputs.

    With ``types_of`` (``files.signature.output_types``), also decisions its outputs cannot decide."""
    if not model.path.exists():
        return [f"{where}.path: model file {model.path} does not exist"]
    if not model.path.is_file():
        return [f"{where}.path: {model.path} is not a file"]
    try:
        outputs = outputs_of(model.path)
    except MonitorError as exc:
        return [f"{where}.path: {exc}"]
    return unknown_outputs(output_references(model, where), outputs, model.path.name) + _misfits(model, where, types_of)


def _misfits(model: ModelConfig, where: str, types_of: decisions.TypesOf | None) -> list[str]:
    """Decisions the model's outputs cannot take (an unknown output is ``unknown_outputs``' to report)."""
    if types_of is None or not model.decisions:
        return []
    try:
        types = types_of(model.path)
    except MonitorError:
        return []
    known = {name: d for name, d in model.decisions.items() if name in types}
    return decisions.problems(known, where, types, model.path.name)


def problems(
    settings: Settings,
    outputs_of: OutputsOf,
    types_of: decisions.TypesOf | None = None,
    generate_check: GenerateCheck | None = None,
) -> list[str]:
    """Every cross-check problem of ``settings`` (paths already resolved), in config order.

    With ``generate_check``, also every generated benchmark set that capture would refuse (an
    unnamed dynamic dim without a size, a range naming no input, a model it cannot read)."""
    found: list[str] = []
    for index, benchset in enumerate(settings.benchsets):
        found += benchset_problems(benchset, f"benchsets[{index}]", generate_check)
    for index, model in enumerate(settings.models):
        found += model_problems(model, f"models[{index}]", outputs_of, types_of)
    return found


def benchset_problems(benchset: BenchsetConfig, where: str, generate_check: GenerateCheck | None) -> list[str]:
    """Why materializing ``benchset`` would be refused, as ``generate_check`` says (generated sets only)."""
    if generate_check is None or benchset.generate is None:
        return []
    return [f"{where}.generate: {problem}" for problem in generate_check(benchset.generate)]


def refuse_unknown_outputs(
    settings: Settings, names: Iterable[str], outputs_of: OutputsOf, types_of: decisions.TypesOf | None = None
) -> None:
    """``ConfigError``-style refusal (exit 2) when a named model's fields name outputs it lacks.

    For ``check`` and ``capture``: a model whose file is missing or unreadable is not refused here
    (its check says so, as an error result, and the other models still run).
    """
    wanted = set(names)
    found: list[str] = []
    for index, model in enumerate(settings.models):
        if model.name not in wanted or not model.path.is_file():
            continue
        try:
            outputs = outputs_of(model.path)
        except MonitorError:
            continue
        found += unknown_outputs(output_references(model, f"models[{index}]"), outputs, model.path.name)
        found += _misfits(model, f"models[{index}]", types_of)
    if found:
        where = f"{settings.source}: " if settings.source else ""
        listed = "\n".join(f"  {p}" for p in found)
        raise ConfigError(f"{where}{len(found)} problem(s) in config:\n{listed}")


def file_problems(
    path: str | os.PathLike[str] | None,
    outputs_of: OutputsOf,
    environ: Mapping[str, str] | None = None,
    *,
    files: bool = True,
    types_of: decisions.TypesOf | None = None,
    generate_check: GenerateCheck | None = None,
) -> tuple[Path, list[str]]:
    """Every problem of the config file at ``path``, in one list (``config validate``).

    The schema's errors with their paths and the cross-references between sections; then, on a
    config that loads, the files it names (``problems``); on one that does not, the same checks of
    each model entry read from the raw YAML (a missing file, an unknown output and a bad value
    elsewhere are reported together).
    ``files=False`` leaves the files out (a config rendered away from its models).
    """
    env = os.environ if environ is None else environ
    file = settings.config_path(path, env)
    try:
        loaded = settings.load(file, env)
    except ConfigError as exc:
        raw = _raw(file, env)
        if raw is None:
            return file, [str(exc)]
        schema = _schema_problems(raw, file)
        found = _raw_model_problems(raw, file, outputs_of, types_of, reported=schema) if files else []
        found += _raw_benchset_problems(raw, file, generate_check) if files else []
        return file, [*schema, *found] or [str(exc)]
    return file, problems(loaded, outputs_of, types_of, generate_check) if files else []


def _raw(file: Path, environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The parsed YAML with ``ONNXMON_*`` overrides; None when it cannot even be read or parsed."""
    try:
        raw = yaml.safe_load(bounded.read_text(file, limit=settings.MAX_CONFIG_BYTES))  # as load() reads it
        return settings.apply_env_overrides(raw, environ) if isinstance(raw, dict) else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ConfigError):
        return None


def _schema_problems(raw: Mapping[str, Any], file: Path) -> list[str]:
    try:
        settings.Settings.model_validate(dict(raw))
    except ValidationError as exc:
        return [settings.format_error(e) for e in exc.errors()]
    try:
        settings.from_mapping(raw, origin=file)
    except ConfigError as exc:  # undeclared benchsets (one per line after the count), a store URL file
        return [line.strip() for line in str(exc).splitlines()[1:]] or [str(exc)]
    return []


def _raw_model_problems(
    raw: Mapping[str, Any],
    file: Path,
    outputs_of: OutputsOf,
    types_of: decisions.TypesOf | None,
    *,
    reported: Sequence[str],
) -> list[str]:
    """The files' problems of a config that did not load, read model by model from the raw YAML.

    Names used twice (unless the schema's own check, in ``reported``, said so already), and for each
    model: a model entry that is valid on its own gets every check of ``model_problems`` (missing
    file, outputs it lacks, decisions it cannot take), so a typo in ``tolerance.outputs`` is reported
    beside a bad value elsewhere; any other entry, whether its model file exists.
    """
    base = file.resolve().parent
    found = []
    for kind in ("models", "benchsets"):
        named = [i.get("name") for i in raw.get(kind) or [] if isinstance(i, Mapping)]
        twice = sorted({n for n in named if named.count(n) > 1}, key=str)
        found += [
            f"{kind}: name {n!r} is used twice"
            for n in twice
            if not any(f"{kind[:-1]} name {n!r} is used twice" in line for line in reported)
        ]
    for index, model in enumerate(raw.get("models") or []):
        where = f"models[{index}]"
        try:
            valid = ModelConfig.model_validate(model)
        except ValidationError:
            valid = None
        if valid is not None:
            path = valid.path if valid.path.is_absolute() else base / valid.path
            found += model_problems(valid.model_copy(update={"path": path}), where, outputs_of, types_of)
            continue
        given = model.get("path") if isinstance(model, Mapping) else None
        if isinstance(given, str) and given:
            path = Path(given) if Path(given).is_absolute() else base / given
            if not path.exists():
                found.append(f"{where}.path: model file {path} does not exist")
    return found


def _raw_benchset_problems(raw: Mapping[str, Any], file: Path, generate_check: GenerateCheck | None) -> list[str]:
    """``benchset_problems`` of each generated set of a config that did not load, valid on its own."""
    base = file.resolve().parent
    found = []
    for index, entry in enumerate(raw.get("benchsets") or []):
        try:
            valid = BenchsetConfig.model_validate(entry)
        except ValidationError:
            continue
        if valid.generate is not None and not valid.generate.model.is_absolute():
            spec = valid.generate.model_copy(update={"model": base / valid.generate.model})
            valid = valid.model_copy(update={"generate": spec})
        found += benchset_problems(valid, f"benchsets[{index}]", generate_check)
    return found
