"""The stack key: the environment fields that may legitimately change a model's numbers, and their digest.

The fleet vote (``monitor/fleet/``, docs/fleet.md) compares only runs that should compute the same bits:
the same model on the same software and hardware *kind*. ``stack_of`` picks those fields from a check's
environment snapshot and session; ``key_of`` is their digest (xxh3-128 of their canonical JSON). A
check records both (``CheckResult.stack``, ``.stack_key``), so a vote reads one column and a report can
name the fields that separate two groups (``onnxruntime.version 1.32.0 vs 1.20.1``).

In the key (``STACK_FIELDS`` and the prefixes below): the model's sha256, the benchmark set and its
version, ONNX Runtime's version, build and packages, the execution-provider packages with their
versions, the providers in use with their options and the session options, each GPU's SKU, compute
capability, SM count and MIG profile, the driver and the CUDA driver version, the CUDA runtime, cuDNN,
cuBLAS and TensorRT libraries' versions, the CPU model, ISA flags (``cpu.flags``), host architecture
(``cpu.arch``) and usable cores (they set ONNX Runtime's default thread count), and the environment
variables that change numerics (``env.*``: ``runtime/envparts.py``'s list). Never in it: host name,
load, temperature, clocks, power, the GPU's UUID, the node, pod or image: what differs between two
healthy nodes of one pool.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import xxhash

from monitor.details import EnvironmentSnapshot

# Exact snapshot fields of the key.
STACK_FIELDS = frozenset(
    {
        "onnxruntime.version",
        "onnxruntime.build_info",
        "onnxruntime.package",
        "onnxruntime.ep_packages",
        "nvml.driver_version",
        "nvml.cuda_driver_version",
        "gpu.count",
        "cpu.model",
        "cpu.flags",
        "cpu.arch",
        "cpu.usable_cores",
        "cpu.quota_cores",
    }
)
# Snapshot fields of the key by prefix: every numerics env var; each CUDA library's version.
STACK_PREFIXES = ("env.",)
GPU_SUFFIXES = (".name", ".compute_capability", ".memory_total_mib", ".sm_count", ".mig", ".mig_profile")
# Volatile even under a stack prefix: where a library was loaded from says nothing of what it computes.
EXCLUDED_SUFFIXES = (".path", ".paths", ".error")


def _in_key(name: str) -> bool:
    if name.endswith(EXCLUDED_SUFFIXES):
        return False
    if name in STACK_FIELDS or name.startswith(STACK_PREFIXES):
        return True
    if name.startswith("cuda."):
        return name.endswith(".version")
    return name.startswith("gpu.") and name.endswith(GPU_SUFFIXES)


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return "" if value is None else str(value)


def stack_of(
    environment: EnvironmentSnapshot,
    *,
    model_sha256: str | None,
    benchset: str | None,
    benchset_version: int | None,
    providers: tuple[str, ...],
    provider_options: Mapping[str, Mapping[str, str]],
    session_options: Mapping[str, Any],
) -> dict[str, str]:
    """The stack key's fields, as text, by name (sorted): snapshot fields under their own names, the rest as
    ``model.sha256``, ``benchset.name``, ``benchset.version``, ``session.providers``, ``session.provider_options``
    and ``session.options``."""
    fields = environment.get("fields") or {}
    stack = {name: _text(field.get("value")) for name, field in fields.items() if _in_key(name)}
    stack.update(
        {
            "model.sha256": model_sha256 or "",
            "benchset.name": benchset or "",
            "benchset.version": "" if benchset_version is None else str(benchset_version),
            "session.providers": ",".join(providers),
            "session.provider_options": _text({k: dict(v) for k, v in provider_options.items()}),
            "session.options": _text(dict(session_options)),
        }
    )
    return dict(sorted(stack.items()))


def key_of(stack: Mapping[str, str]) -> str:
    """The stack key: xxh3-128 (hex) of the fields' canonical JSON."""
    canonical = json.dumps(dict(stack), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return xxhash.xxh3_128_hexdigest(canonical.encode())


def separating(stacks: list[Mapping[str, str]]) -> list[str]:
    """The fields whose values differ between ``stacks``, versions first (``envsnap.change_order``'s rule)."""
    names = set().union(*(s.keys() for s in stacks)) if stacks else set()
    differ = [n for n in names if len({s.get(n) for s in stacks}) > 1]
    rank = {True: 0, False: 1}
    return sorted(differ, key=lambda n: (rank[n.endswith((".version", "_version"))], "build" in n, n))
