"""``onnxmon add MODEL.onnx``: monitor your own model in one command.

It reads the model's signature, writes a generated benchmark set and the model's entry into the
config (creating ``onnxmon.yaml`` when there is none: a user's first command needs no file of its
own), captures the first baseline in an isolated child, records it, and prints the next command.

What it cannot infer it asks for, with exit 2 and the exact options to pass: an unnamed dynamic
axis has no default size (``--dim input:0=SIZE``); a named one (``batch``) defaults to 1, said in
the output. What it writes passes the same check capture runs (``benchset_generate.generate_problems``)
before anything is written. The config is edited as text, never re-dumped: the user's comments stay
(``config/edit.py``), and the file is replaced in one rename. A model name already in the config
is refused unless ``--replace``; nothing is written by a command that fails: the config is written
only once its baseline exists, and put back when the store cannot record it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
import yaml
from pydantic import ValidationError

from monitor.cli import baseline_cmd, common, output
from monitor.config import edit, scope, settings
from monitor.config.fields import NAME_PATTERN
from monitor.config.plan import plan_for
from monitor.config.settings import GenerateSpec, Settings
from monitor.daemon import child
from monitor.errors import ConfigError, MonitorError
from monitor.files import baseline_undo, baselines, benchset_generate, signature

DEFAULT_DIM = 1
NEW_CONFIG = """\
# Written by `onnxmon add` (docs/your-model.md); every key: docs/config.md. Edit freely: later
# `onnxmon add` commands append their entries and keep what you write here.
store:
  url: sqlite:///onnxmon.db
  baselines_dir: baselines
  benchsets_dir: benchsets
"""
_NAME = re.compile(NAME_PATTERN)  # the schema's: refused here before anything is written


@dataclass(frozen=True)
class Added:
    """What ``add`` wrote: the entries, the dims it chose itself, and where."""

    name: str
    file: Path
    created: bool
    benchset: dict[str, Any]
    model: dict[str, Any]
    defaulted: dict[str, int]


def register(app: typer.Typer) -> None:
    @app.command("add")
    @output.options()
    def add(
        model: Path = typer.Argument(..., help="The .onnx file to monitor."),
        name: str | None = typer.Option(None, "--name", help="Model name (default: the file's name without .onnx)."),
        dim: list[str] = typer.Option(
            None, "--dim", help="Size of a dynamic axis: NAME=SIZE (a named dim) or INPUT:AXIS=SIZE; repeat per axis."
        ),
        value_range: list[str] = typer.Option(
            None, "--range", help="Value range of an input's samples: INPUT=LOW,HIGH (default 0,1; integers 0,9)."
        ),
        count: int = typer.Option(8, "--count", min=1, max=100_000, help="Random samples in the benchmark set."),
        edge_cases: bool = typer.Option(
            True, "--edge-cases/--no-edge-cases", help="Add zeros, range extremes, fp16-overflowing, denormal samples."
        ),
        provider: list[str] = typer.Option(
            None, "--provider", help="Execution provider, in priority order (default CPUExecutionProvider); repeat."
        ),
        replace: bool = typer.Option(
            False, "--replace", help="Replace the entries of a model already configured; promote its new baseline."
        ),
        *,
        out: output.Output,
    ) -> None:
        """Monitor MODEL.onnx: write its config entry and benchmark set, capture and promote its first baseline.

        Creates the config (./onnxmon.yaml, or -c PATH) when there is none. Exit 2 with the options to
        pass when it cannot infer something (an unnamed dynamic axis's size), or when the name is taken.
        """
        file = settings.config_path(out.config_file)
        added = _entries(file, model, name, dim or [], value_range or [], count, edge_cases, provider or [], replace)
        text = file.read_text(encoding="utf-8") if file.exists() else NEW_CONFIG
        new_text = edit.edited(text, {"benchsets": added.benchset, "models": added.model}, file)
        configured = _settings(new_text, file)
        plan = plan_for(configured, added.name)
        store = common.open_store(configured)  # an un-migrated store stops here, before anything is written
        before = baseline_undo.active_state(configured.store.baselines_dir, added.name)
        options = {"promote": before.active is not None, "promoted_by": common.login()}
        try:
            baseline = child.capture_isolated(
                plan, options, timeout_s=3 * plan.timeout_s, memory_limit_mb=configured.daemon.memory_limit_mb
            )
        except MonitorError as exc:  # the model cannot run on the generated inputs: say what to try
            told = MonitorError(
                f"{exc}; nothing was added to {file} (inputs outside what the model takes? --range INPUT=LOW,HIGH)"
            )
            told.exit_code = exc.exit_code
            raise told from None
        try:
            edit.write_atomic(file, new_text)
        except OSError as exc:
            baseline_undo.restore(before, drop=baseline.directory)
            raise ConfigError(f"{file} cannot be written: {exc.strerror or exc}; nothing was added") from None
        try:
            with store:
                baseline_cmd.record_or_undo(configured, baseline, before, store=store)
        except BaseException:
            _put_back(file, text if not added.created else None)
            raise
        active = baselines.active_id(configured.store.baselines_dir, added.name) == baseline.id
        _report(out, added, baseline.id, baseline.meta.sample_count, str(baseline.directory), active)


def _entries(
    file: Path,
    model: Path,
    name: str | None,
    dims_given: list[str],
    ranges_given: list[str],
    count: int,
    edge_cases: bool,
    providers: list[str],
    replace: bool,
) -> Added:
    """The two entries to write, or ``MonitorError`` (exit 2) saying exactly what to pass or change."""
    created = not file.exists()
    if created and not file.parent.is_dir():
        raise ConfigError(f"cannot create {file}: directory {file.parent} does not exist")
    name = name or re.sub(r"[^A-Za-z0-9._-]", "-", model.stem).lstrip("._-")
    if not _NAME.match(name):
        raise ConfigError(f"model name {name!r} must match {_NAME.pattern}; pass --name NAME")
    spec_inputs = signature.model_signature(model)
    current = None if created else common.load(str(file))
    benchset = f"{name}-bench"
    if current is not None:
        _refuse_taken(current, file, name, benchset, replace)
    dims = _parse_dims(dims_given, spec_inputs, model)
    unnamed = [d for d in benchset_generate.unsized_dims(spec_inputs, dims) if d.name is None]
    if unnamed:
        flags = " ".join(f"--dim {d.key}=SIZE" for d in unnamed)
        listed = ", ".join(f"input {d.input!r} axis {d.axis}" for d in unnamed)
        raise ConfigError(f"{model}: dynamic axes without a name, so without a default size: {listed}; pass {flags}")
    defaulted = {d.key: DEFAULT_DIM for d in benchset_generate.unsized_dims(spec_inputs, dims)}
    dims |= defaulted
    ranges = dict(_parse_range(text) for text in ranges_given)
    try:
        spec = GenerateSpec.model_validate(
            {"model": model, "count": count, "dims": dims, "ranges": ranges, "edge_cases": edge_cases}
        )
    except ValidationError as exc:  # a range low > high, a dim past 2**31-1
        raise ConfigError(f"{model}: {settings.format_error(exc.errors()[0])}") from None
    problems = benchset_generate.generate_problems(spec, spec_inputs)
    if problems:
        raise ConfigError(f"{model}: {'; '.join(problems)} (generate.dims: --dim, generate.ranges: --range)")
    where = _written_path(model, file)
    generate: dict[str, Any] = {"model": where, "count": count, "seed": 0}
    generate |= {"dims": dims} if dims else {}
    generate |= {"ranges": {k: list(v) for k, v in ranges.items()}} if ranges else {}
    generate["edge_cases"] = edge_cases
    entry = {"name": name, "path": where, "benchset": benchset, "providers": providers or ["CPUExecutionProvider"]}
    return Added(name, file, created, {"name": benchset, "generate": generate}, entry, defaulted)


def _refuse_taken(current: Settings, file: Path, name: str, benchset: str, replace: bool) -> None:
    """Exit 2 when ``name`` (or its set's name) is taken, unless ``--replace``; a set another model uses, always."""
    models = [m.name for m in current.models]
    users = sorted(m.name for m in current.models if m.benchset == benchset and m.name != name)
    if users:
        raise ConfigError(f"{file}: benchmark set {benchset!r} is used by {users}; pass --name OTHER")
    if replace:
        return
    if name in models:
        raise ConfigError(
            f"{file}: model {name!r} is already configured; pass --replace to replace its entries and promote"
            " a new baseline, or --name OTHER"
        )
    if benchset in [b.name for b in current.benchsets]:
        raise ConfigError(f"{file}: benchmark set {benchset!r} is already declared; pass --replace or --name OTHER")


def _parse_dims(given: list[str], inputs: list[signature.InputSpec], model: Path) -> dict[str, int]:
    """``--dim`` values as ``generate.dims``; a key naming no dynamic axis of the model is refused with the keys."""
    keys = set()
    for spec in inputs:
        for axis, dim in enumerate(spec.shape):
            if not isinstance(dim, int):
                keys |= {f"{spec.name}:{axis}"} | ({dim} if dim != "?" else set())
    dims = {}
    for text in given:
        key, _, size = text.rpartition("=")
        if not key or not size.isdigit() or int(size) < 1:
            raise ConfigError(f"--dim {text!r}: expected NAME=SIZE or INPUT:AXIS=SIZE with SIZE >= 1")
        if key not in keys:
            raise ConfigError(f"--dim {text!r}: {model} has no dynamic axis {key!r}; its dynamic axes: {sorted(keys)}")
        dims[key] = int(size)
    return dims


def _parse_range(text: str) -> tuple[str, tuple[float, float]]:
    key, _, span = text.rpartition("=")
    try:
        low, high = (float(v) for v in span.split(","))
    except ValueError:
        raise ConfigError(f"--range {text!r}: expected INPUT=LOW,HIGH (e.g. x=-1,1)") from None
    if not key:
        raise ConfigError(f"--range {text!r}: expected INPUT=LOW,HIGH (e.g. x=-1,1)")
    return key, (low, high)


def _written_path(model: Path, file: Path) -> str:
    """The model's path as the config holds it: relative to the config's directory when inside it."""
    absolute, base = model.resolve(), file.resolve().parent
    return str(absolute.relative_to(base)) if absolute.is_relative_to(base) else str(absolute)


def _settings(text: str, file: Path) -> Settings:
    """The settings the edited text gives, as the next command will load them (overrides, scope)."""
    from monitor.runtime import envsnap  # NVML is probed only for the pool scope

    raw = yaml.safe_load(text) or {}
    loaded = settings.from_mapping(settings.apply_env_overrides(raw, os.environ), origin=file)
    return scope.apply(loaded, gpu_name=envsnap.first_gpu_name)


def _put_back(file: Path, text: str | None) -> None:
    """The config as it was before ``add`` (or no config, when ``add`` created it)."""
    if text is None:
        file.unlink(missing_ok=True)
    else:
        edit.write_atomic(file, text)


def _report(out: output.Output, added: Added, baseline_id: str, samples: int, directory: str, active: bool) -> None:
    flag = "" if added.file == Path(settings.DEFAULT_CONFIG) else f" -c {added.file}"
    following = [f"onnxmon check {added.name}{flag}", f"onnxmon serve{flag}"]
    data = {
        "model": added.name,
        "config": str(added.file),
        "created_config": added.created,
        "benchset": added.benchset,
        "entry": added.model,
        "defaulted_dims": added.defaulted,
        "baseline": {"id": baseline_id, "samples": samples, "active": active, "directory": directory},
        "next": following,
    }
    verb = "created" if added.created else "updated"
    lines = [
        f"{verb} {added.file}: model {added.name!r} ({added.model['path']}), benchmark set {added.benchset['name']!r}",
        *(
            f"  dim {key!r} = {size} (a default: choose with --dim {key}=SIZE --replace)"
            for key, size in added.defaulted.items()
        ),
        f"baseline {baseline_id} captured and {'active' if active else 'NOT active'} ({samples} samples)"
        f" in {directory}",
        f"next: {following[0]}    (then `{following[1]}` checks it on a schedule)",
    ]
    out.emit(lambda: data, lambda wide: "\n".join(lines))
