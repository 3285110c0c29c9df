"""The software and process parts of an environment snapshot: ONNX Runtime, Python, OS, host, env vars.

Each ``*_entries`` function probes one part for ``envsnap.capture`` and returns its ``Entries``
(``{dotted name: (value, stable)}``); ``envsnap.py`` keeps the snapshot value, its fingerprint and
its diff, the hardware parts live in ``cpu.py``, ``gpu.py`` and ``cudalibs.py``. Standard library only at import
time (ONNX Runtime is imported by the probe that reports it).
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
from collections.abc import Mapping
from importlib import metadata

from monitor.config import identity
from monitor.runtime.gpu import Entries

# Environment variables that change numerics: exact names and prefixes. Values are recorded verbatim.
NUMERIC_ENV_NAMES = frozenset(
    {
        "NVIDIA_TF32_OVERRIDE",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "CUBLAS_WORKSPACE_CONFIG",
        "OMP_NUM_THREADS",
        "TF_ENABLE_ONEDNN_OPTS",
    }
)
NUMERIC_ENV_PREFIXES = ("CUDNN_", "CUBLASLT_", "ORT_", "MKL_", "OPENBLAS_", "KMP_", "DNNL_", "ONEDNN_")

# Kubernetes downward API (set by the Helm chart) -> field; all volatile.
K8S_ENV = (
    ("k8s.node", identity.NODE_VARIABLES),
    ("k8s.pod", (identity.POD_VARIABLE,)),
    ("k8s.namespace", (identity.NAMESPACE_VARIABLE,)),
    ("k8s.image_digest", ("ONNXMON_IMAGE_DIGEST",)),
)


@functools.cache
def _distribution_version(name: str) -> str | None:
    # Read from METADATA once per process (~2 ms each): what a process has imported does not change
    # while it lives, and a warm check worker snapshots its environment at every check.
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def _onnxruntime_distributions() -> tuple[str, ...]:
    # More than one distribution providing `onnxruntime` (e.g. onnxruntime + onnxruntime-gpu) is a
    # classic way to get the CPU build by accident, so all are recorded. Every check child is a
    # fresh fork, so this runs once per check: match distribution *names* first (reading each
    # METADATA header, ~15 ms) rather than every package's file list (packages_distributions,
    # ~60-240 ms), then confirm a candidate really installs the `onnxruntime` package.
    found = set()
    for dist in metadata.distributions():
        name = str(dist.metadata["Name"] or "")
        if not name.lower().replace("_", "-").startswith(("onnxruntime", "ort-nightly")):
            continue
        top_level = (dist.read_text("top_level.txt") or "").split()
        if "onnxruntime" in top_level or any(str(f).startswith("onnxruntime/") for f in dist.files or ()):
            found.add(name)
    return tuple(sorted(found))


def onnxruntime_entries() -> Entries:
    import onnxruntime

    packages = _onnxruntime_distributions()
    get_build_info = getattr(onnxruntime, "get_build_info", None)
    return {
        "onnxruntime.version": (str(onnxruntime.__version__), True),
        "onnxruntime.package": (", ".join(packages) or None, True),
        "onnxruntime.build_info": (str(get_build_info()) if get_build_info else None, True),
        # Compiled in, not necessarily working: only session.get_providers() tells what runs.
        "onnxruntime.providers": (list(onnxruntime.get_available_providers()), True),
        # The execution-provider packages with their versions (onnxruntime-gpu, a plugin EP's own package):
        # part of the fleet's stack key (runtime/stackkey.py).
        "onnxruntime.ep_packages": (ep_packages(), True),
    }


def ep_packages(names: tuple[str, ...] | None = None) -> list[str]:
    """``name==version`` of every ONNX Runtime distribution and execution-provider plugin package installed."""
    found = _onnxruntime_distributions() if names is None else names
    plugins = _ep_plugin_distributions() if names is None else ()
    return sorted(f"{name}=={_distribution_version(name)}" for name in {*found, *plugins})


@functools.cache
def _ep_plugin_distributions() -> tuple[str, ...]:
    # Plugin execution providers ship as packages of their own (onnxruntime-ep-*, *-onnxruntime-ep): by name.
    found = set()
    for dist in metadata.distributions():
        name = str(dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith("onnxruntime-ep") or name.endswith(("-onnxruntime-ep", "-ort-ep")):
            found.add(str(dist.metadata["Name"]))
    return tuple(sorted(found))


def python_entries() -> Entries:
    from monitor import __version__

    return {
        "python.version": (platform.python_version(), True),
        "python.implementation": (platform.python_implementation(), True),
        "numpy.version": (_distribution_version("numpy"), True),
        "onnx.version": (_distribution_version("onnx"), True),
        "onnxmon.version": (__version__, False),
    }


def os_entries() -> Entries:
    libc, libc_version = platform.libc_ver()
    entries: Entries = {
        "os.system": (platform.system(), True),
        "os.libc": (f"{libc} {libc_version}".strip() or None, True),
        "os.kernel": (platform.release(), False),
        "os.platform": (platform.platform(), False),
    }
    with contextlib.suppress(OSError):  # no /etc/os-release
        entries["os.distribution"] = (platform.freedesktop_os_release().get("PRETTY_NAME"), True)
    return entries


def host_entries() -> Entries:
    entries: Entries = {"host.name": (platform.node(), False)}
    if hasattr(os, "getloadavg"):
        entries["host.load1"] = (round(os.getloadavg()[0], 2), False)
    return entries


def env_entries(environ: Mapping[str, str]) -> Entries:
    entries: Entries = {}
    # Names first, values only of the matches: os.environ decodes each value it hands out (a warm
    # worker snapshots at every check; items() cost ~4x this).
    for name in environ:
        if name in NUMERIC_ENV_NAMES or name.startswith(NUMERIC_ENV_PREFIXES):
            entries[f"env.{name}"] = (environ[name], True)
    for field, names in K8S_ENV:
        identity = next((environ[n] for n in names if environ.get(n)), None)
        if identity is not None:
            entries[field] = (identity, False)
    return entries
