"""The CPU part of the environment snapshot: model, kernel-selecting ISA flags, cores, quota.

ONNX Runtime's CPU kernels (MLAS, oneDNN) dispatch on ISA extensions, and its default thread
pools follow the usable cores and the cgroup quota, which set the reduction order: all of
these are *stable* fields of the fingerprint. Roots (``/proc``, ``/sys``) are arguments so
tests feed fixture files.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from monitor.runtime.gpu import Entries, describe

# ISA extensions that make ONNX Runtime / MLAS / oneDNN pick different kernels (Linux cpuinfo names).
X86_FLAGS = (
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)
ARM_FLAGS = ("asimd", "asimdhp", "asimddp", "i8mm", "bf16", "sve", "sve2")
ARM_PARTS = {"0xd0c": "Neoverse-N1", "0xd40": "Neoverse-V1", "0xd49": "Neoverse-N2", "0xd4f": "Neoverse-V2"}


def cpuinfo_entries(cpuinfo_text: str) -> Entries:
    """CPU model and the kernel-selecting ISA flags from ``/proc/cpuinfo`` text (x86 or ARM)."""
    first: dict[str, str] = {}
    for line in cpuinfo_text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            first.setdefault(key.strip(), value.strip())
    present = set(first.get("flags", first.get("Features", "")).split())
    if "Features" in first and "flags" not in first:
        part = first.get("CPU part", "")
        fallback = "implementer {} part {}".format(first.get("CPU implementer", "?"), part or "?")
        model = first.get("model name") or f"ARM {ARM_PARTS.get(part, fallback)}"
        wanted: tuple[str, ...] = ARM_FLAGS
    else:
        model = first.get("model name", "unknown")
        wanted = X86_FLAGS
    return {"cpu.model": (model, True), "cpu.flags": ([f for f in wanted if f in present], True)}


QuotaFiles = tuple[Path, ...]  # cgroup v2: (cpu.max,); v1: (cpu.cfs_quota_us, cpu.cfs_period_us); (): none


def cpu_quota_cores(proc_root: Path, sys_root: Path) -> float | None:
    """The cgroup CPU limit in cores (v2 ``cpu.max``, else v1 CFS quota); ``None`` when unlimited or unknown."""
    return quota_from(quota_files(proc_root, sys_root))


def quota_files(proc_root: Path, sys_root: Path) -> QuotaFiles:
    """Which files hold this process's CPU limit: found through ``/proc/self/cgroup`` and two probes.

    Split from reading them (``quota_from``): where the limit lives, then the limit itself.
    """
    cgroup = sys_root / "fs" / "cgroup"
    own = ""
    try:
        for line in (proc_root / "self" / "cgroup").read_text().splitlines():
            if line.startswith("0::"):
                own = line[3:].strip().lstrip("/")
    except OSError:
        pass
    for cpu_max in (cgroup / own / "cpu.max", cgroup / "cpu.max"):
        if cpu_max.is_file():
            return (cpu_max,)
    for v1 in (cgroup / "cpu", cgroup / "cpu,cpuacct"):
        if (v1 / "cpu.cfs_quota_us").is_file():
            return (v1 / "cpu.cfs_quota_us", v1 / "cpu.cfs_period_us")
    return ()


def quota_from(files: QuotaFiles) -> float | None:
    """The limit in cores that ``files`` (``quota_files``) hold now; ``None`` when unlimited or none."""
    if len(files) == 1:
        quota, _, period = _read_small(files[0]).strip().partition(" ")
        return None if quota == "max" else round(int(quota) / int(period or 100000), 3)
    if len(files) == 2:
        quota_us, period_us = int(_read_small(files[0])), int(_read_small(files[1]))
        return None if quota_us < 0 else round(quota_us / period_us, 3)
    return None


def _read_small(path: Path) -> str:
    """A cgroup control file's text: one ``open`` and one ``read`` (a third of ``Path.read_text``'s cost)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 4096).decode("ascii", errors="replace")
    finally:
        os.close(fd)


def cpu_entries(proc_root: Path, sys_root: Path) -> Entries:
    """Model, ISA flags, architecture, core counts and cgroup quota: what picks CPU kernels and threads."""
    return {**cpu_fixed_entries(proc_root), **cpu_limit_entries(proc_root, sys_root)}


def cpu_fixed_entries(proc_root: Path) -> Entries:
    """What a running process's CPU cannot change into: model, ISA flags, architecture, logical cores."""
    entries = cpuinfo_entries((proc_root / "cpuinfo").read_text(errors="replace"))
    entries["cpu.arch"] = (platform.machine(), True)
    # Core counts set ONNX Runtime's default thread pools, and thread count sets reduction order.
    entries["cpu.logical_cores"] = (os.cpu_count(), True)
    return entries


def cpu_limit_entries(proc_root: Path, sys_root: Path, files: QuotaFiles | None = None) -> Entries:
    """What can change under a running process: the usable cores (affinity) and the cgroup quota
    (an in-place resize of the pod's CPU limit), read from ``files`` when the caller found them."""
    entries: Entries = {}
    if hasattr(os, "sched_getaffinity"):
        entries["cpu.usable_cores"] = (len(os.sched_getaffinity(0)), True)
    try:
        found = quota_files(proc_root, sys_root) if files is None else files
        entries["cpu.quota_cores"] = (quota_from(found), True)
    except Exception as exc:
        entries["cpu.quota_error"] = (describe(exc), False)
    return entries
