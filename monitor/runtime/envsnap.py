"""Environment snapshots: what produced the numbers, a stable fingerprint of it, and diffs.

A snapshot is a flat ``{dotted name: Field(value, stable)}`` map. *Stable* fields are the
ones that can change numbers: library versions (ONNX Runtime, its package and compiled-in
providers, CUDA runtime, cuDNN, cuBLAS, TensorRT, numpy, onnx, Python, glibc), the kind of
GPU (name, compute capability, memory, driver, ECC, MIG), the CPU model and the ISA flags
that select kernels, the core count and cgroup CPU quota (they set thread counts, hence
reduction order), and the environment variables that change numerics. *Volatile* fields
are recorded but never fingerprinted: clocks, temperature, power, clock-event (throttle)
reasons, load, host name, kernel release, pod/node/namespace/image digest, library paths,
the GPU's UUID, and every ``<part>.error``.

Two choices worth knowing:

* The GPU UUID and the node name are volatile. A pod restarted onto another node with an
  identical board must not count as an environment change; a different *kind* of board
  (name, capability, memory, driver) does. The UUID is still recorded, so ``diff`` shows
  a board swap as a volatile change, useful when one faulty board drifts.
* The kernel release is volatile: numerics run in the container's user space (glibc,
  libm, the libraries above), and node kernel updates would otherwise flip the fingerprint.

Kubernetes identity comes from the downward API when present: ``ONNXMON_NODE_NAME`` (or
``NODE_NAME``), ``POD_NAME``, ``POD_NAMESPACE`` and ``ONNXMON_IMAGE_DIGEST``.

CUDA libraries are only reported when already loaded in this process and cuDNN loads
lazily, so capture after the first inference (the check engine does). Any exception while
probing a part is recorded as ``<part>.error`` instead of raised. This module imports only
the standard library at import time (ONNX Runtime lazily), so it runs without pydantic.
"""

from __future__ import annotations

import enum
import fnmatch
import functools
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitor import jsonsafe
from monitor.details import EnvChange, EnvironmentSnapshot
from monitor.runtime import envparts
from monitor.runtime.compat import compat_entries
from monitor.runtime.cpu import cpu_entries
from monitor.runtime.cudalibs import cuda_entries
from monitor.runtime.gpu import Entries, JsonValue, NvmlLike, default_nvml, describe, nvml_entries

__all__ = [
    "EnvSnapshot",
    "Field",
    "FieldChange",
    "NvmlLike",
    "capture",
    "diff",
    "format_table",
    "short",
    "summary",
]

SCHEMA_VERSION = 1

# Stable fields a later onnxmon learned to record (fnmatch patterns). A snapshot without one was taken
# by an older onnxmon: the field appearing is shown in a diff, but as not stable (it is not a change of
# the stack: the stack was only not described), so it is never attributed nor ranked as a cause.
LATER_FIELDS = ("onnxruntime.ep_packages", "gpu.*.sm_count", "gpu.*.mig_profile")

# What a running process cannot change, probed once per check worker (``capture(constant=...)``).
PROCESS_CONSTANT_PARTS = frozenset({"onnxruntime", "python", "os"})


@dataclass(frozen=True)
class Field:
    """One recorded fact; ``stable`` ones go into the fingerprint."""

    value: JsonValue
    stable: bool


@dataclass(frozen=True)
class FieldChange:
    """A field whose value differs between two snapshots (``None`` also means absent)."""

    field: str
    old: JsonValue
    new: JsonValue
    stable: bool

    def to_dict(self) -> EnvChange:
        return {"field": self.field, "old": self.old, "new": self.new, "stable": self.stable}


@dataclass(frozen=True)
class EnvSnapshot:
    """The environment of one process at one moment; ``fingerprint`` covers the stable fields only."""

    fields: Mapping[str, Field]
    captured_at: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", dict(sorted(self.fields.items())))

    @functools.cached_property
    def fingerprint(self) -> str:
        """sha256 (hex) of the canonical JSON of the stable fields: identical machines share it."""
        stable = {name: f.value for name, f in self.fields.items() if f.stable}
        canonical = json.dumps(stable, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()

    def get(self, name: str, default: JsonValue = None) -> JsonValue:
        field = self.fields.get(name)
        return default if field is None else field.value

    def to_dict(self) -> EnvironmentSnapshot:
        """JSON-safe form; the top-level ``fingerprint`` is what the store deduplicates on."""
        return {
            "fingerprint": self.fingerprint,
            "schema": SCHEMA_VERSION,
            "captured_at": jsonsafe.timestamp(self.captured_at),  # RFC 3339 UTC, as every onnxmon JSON
            "fields": {name: {"value": f.value, "stable": f.stable} for name, f in self.fields.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EnvSnapshot:
        """Rebuild from :meth:`to_dict`.

        The fingerprint is always recomputed from the fields (it is a function of them); a stored
        one that disagrees, from a hand-edited file, is ignored rather than trusted.
        """
        fields = {name: Field(_json_value(f["value"]), bool(f["stable"])) for name, f in data["fields"].items()}
        return cls(fields=fields, captured_at=jsonsafe.epoch(data.get("captured_at") or 0.0))  # either age


def _json_value(value: Any) -> JsonValue:
    if isinstance(value, list):
        return [str(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise ValueError(f"snapshot field value must be a JSON scalar or list of strings, got {value!r}")


def short(fingerprint: str) -> str:
    """The first 16 hex characters, enough to tell environments apart on screen."""
    return fingerprint[:16]


def diff(a: EnvSnapshot, b: EnvSnapshot) -> list[FieldChange]:
    """Fields that differ from ``a`` to ``b`` (added or removed ones included), in ``change_order``."""
    changes = []
    for name in sorted(a.fields.keys() | b.fields.keys()):
        old, new = a.fields.get(name), b.fields.get(name)
        if old != new:
            stable = any(f.stable for f in (old, new) if f is not None) and not _learned_later(name, old, new)
            changes.append(FieldChange(name, old.value if old else None, new.value if new else None, stable))
    return sorted(changes, key=lambda c: change_order(c.field, c.stable))


def _learned_later(name: str, old: Field | None, new: Field | None) -> bool:
    """A field only one side has, which an older onnxmon did not record (``LATER_FIELDS``)."""
    return (old is None or new is None) and any(fnmatch.fnmatchcase(name, p) for p in LATER_FIELDS)


def change_order(field: str, stable: bool = True) -> tuple[bool, int, str]:
    """Where a changed field goes in every diff onnxmon shows: stable first, and among them versions first.

    Why: a cut line or a glance must meet ``onnxruntime.version 1.32.0 → 1.20.1`` before
    ``onnxruntime.build_info`` (a ~300-character cmake string that changes with every release).
    Versions, then other fields, then build strings; by name within each.
    """
    rank = 0 if field.endswith((".version", "_version")) else 2 if "build" in field else 1
    return (not stable, rank, field)


def ordered(changes: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Stored diff entries (``{"field", "old", "new", "stable"?}``) in ``change_order``, as a fresh diff is."""
    return sorted(changes, key=lambda c: change_order(str(c.get("field", "")), bool(c.get("stable", True))))


_LABELS = {"cuda.runtime": "cuda runtime", "nvml.driver_version": "driver", "nvml.cuda_driver_version": "driver cuda"}


def _label(name: str) -> str:
    name = name.removesuffix(".version")
    if name in _LABELS:
        return _LABELS[name]
    return name.removeprefix("cuda.")


def render(value: JsonValue) -> str:
    """A field value as short human text."""
    if value is None:
        return "none"
    if isinstance(value, list):
        return ",".join(value) if value else "[]"
    return str(value)


def summary(changes: Sequence[FieldChange], *, include_volatile: bool = False) -> str:
    """One line such as ``onnxruntime 1.17.0 → 1.18.0, cudnn 9.1.0 → 9.3.0``; stable changes only by default."""
    shown = [c for c in changes if c.stable or include_volatile]
    if not shown:
        return "no environment change"
    # a build string (onnxruntime.build_info: a few hundred characters of cmake flags) is named, not quoted
    return ", ".join(
        f"{c.field} changed"
        if change_order(c.field)[1] == 2
        else f"{_label(c.field)} {render(c.old)} → {render(c.new)}"
        for c in shown
    )


_SECTIONS = {"numpy": "python", "onnx": "python", "onnxmon": "python", "nvml": "gpu", "k8s": "host"}


def _section(name: str) -> str:
    head = name.split(".", 1)[0]
    return _SECTIONS.get(head, head)


def format_table(snapshot: EnvSnapshot) -> str:
    """A readable table grouped by section, each field marked stable or volatile."""
    width = max((len(name) for name in snapshot.fields), default=0)
    lines = [f"fingerprint {short(snapshot.fingerprint)}  (sha256 {snapshot.fingerprint})"]
    section = None
    for name, field in sorted(snapshot.fields.items(), key=lambda item: (_section(item[0]), item[0])):
        if _section(name) != section:
            section = _section(name)
            lines.append(f"[{section}]")
        lines.append(f"  {name:<{width}}  {'stable  ' if field.stable else 'volatile'}  {render(field.value)}")
    return "\n".join(lines)


# --- capture ---------------------------------------------------------------------------------


class _Default(enum.Enum):
    AUTO = "auto"


def capture(
    *,
    proc_root: Path = Path("/proc"),
    sys_root: Path = Path("/sys"),
    environ: Mapping[str, str] | None = None,
    nvml: NvmlLike | _Default | None = _Default.AUTO,
    load_cuda_libs: bool = True,
    constant: MutableMapping[str, Entries] | None = None,
) -> EnvSnapshot:
    """Snapshot this process's environment; never raises (a failing part becomes ``<part>.error``).

    ``nvml`` defaults to the real ``pynvml`` when importable, else a ctypes adapter over
    ``libnvidia-ml.so.1``; ``None`` skips GPUs. ``load_cuda_libs=False`` records which CUDA
    libraries are mapped without calling into them; either way none is ever loaded here.
    ``constant`` (a check worker's, ``runtime/worker_state.py``) holds the parts in
    ``PROCESS_CONSTANT_PARTS`` once probed: what a running process cannot change (its ONNX Runtime,
    Python, OS). Every other part is probed in full at every call.
    """
    env = os.environ if environ is None else environ
    entries: Entries = {}
    parts: list[tuple[str, Callable[[], Entries]]] = [
        ("onnxruntime", envparts.onnxruntime_entries),
        ("python", envparts.python_entries),
        ("os", envparts.os_entries),
        ("host", envparts.host_entries),
        ("cpu", lambda: cpu_entries(proc_root, sys_root)),
        ("env", lambda: envparts.env_entries(env)),
        ("cuda", lambda: cuda_entries(proc_root, query_versions=load_cuda_libs)),
    ]
    if nvml is not None:
        nvml_api = default_nvml() if isinstance(nvml, _Default) else nvml
        parts.append(("nvml", lambda: nvml_entries(nvml_api)))
    for part, probe in parts:
        if constant is not None and part in constant:
            entries.update(constant[part])
            continue
        try:
            found = probe()
        except Exception as exc:  # one broken probe must not cost the rest of the snapshot
            entries[f"{part}.error"] = (describe(exc), False)
            continue
        entries.update(found)
        if constant is not None and part in PROCESS_CONSTANT_PARTS:
            constant[part] = dict(found)
    entries.update(compat_entries(entries))  # ORT / CUDA / cuDNN / TensorRT outside the release's ranges
    fields = {name: Field(value, stable) for name, (value, stable) in entries.items()}
    # Quantized to the microseconds its RFC 3339 form keeps, so a snapshot read back equals the original.
    return EnvSnapshot(fields=fields, captured_at=jsonsafe.epoch(jsonsafe.timestamp(time.time())))


def first_gpu_name() -> str | None:
    """The first GPU's model name as NVML reports it (``NVIDIA H100 80GB HBM3``), or None without one.

    Used to scope baselines per GPU pool (``config.scope``); CUDA libraries are not loaded for it.
    """
    snapshot = capture(load_cuda_libs=False)
    for key in sorted(snapshot.fields):
        if key.startswith("gpu.") and key.endswith(".name"):
            value = snapshot.fields[key].value
            return str(value) if value else None
    return None
