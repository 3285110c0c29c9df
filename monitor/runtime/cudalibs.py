"""The CUDA half of the GPU environment: which CUDA libraries *this process* has loaded, and their versions.

Which CUDA runtime / cuDNN / cuBLAS / TensorRT is this process using? Only the libraries mapped
in ``/proc/self/maps`` count (an installed library nobody loaded computes nothing). Each is opened
with ``RTLD_NOLOAD`` on its exact mapped path, so a library that is not already loaded stays
unloaded, and its own version function is asked; CUDA is never loaded here. cuDNN and most of
cuBLAS load lazily, on the first convolution / matmul: capture after the first inference
(``check`` does) or these fields are simply absent.

Probes return ``gpu.Entries`` (dotted name -> (value, stable)); ``envsnap`` wraps them.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from monitor.runtime import gpu
from monitor.runtime.gpu import Entries

_CUDA_FAMILY = re.compile(r"^lib(cudart|cudnn\w*|cublas(Lt)?|nvinfer\w*|nvrtc\w*|cufft|curand|cusparse\w*)\.so")
_CUDA_LINE = re.compile(r"^.*/lib(?:cudart|cudnn|cublas|nvinfer|nvrtc|cufft|curand|cusparse).*$", re.MULTILINE)


def _cudart(lib: ctypes.CDLL) -> tuple[str, int]:
    value = ctypes.c_int(0)
    if lib.cudaRuntimeGetVersion(ctypes.byref(value)) != 0:
        raise RuntimeError("cudaRuntimeGetVersion failed")
    return gpu.cuda_version(value.value), value.value


def _version_call(
    name: str, restype: type[Any], major_scale_threshold: int
) -> Callable[[ctypes.CDLL], tuple[str, int]]:
    """cuDNN >= 9 and TensorRT >= 10 moved from major*1000 to major*10000; the threshold tells which."""

    def ask(lib: ctypes.CDLL) -> tuple[str, int]:
        fn = getattr(lib, name)
        fn.restype = restype
        raw = int(fn())
        scale = 10000 if raw >= major_scale_threshold else 1000
        return f"{raw // scale}.{raw % scale // 100}.{raw % 100}", raw

    return ask


def _cublas(lib: ctypes.CDLL) -> tuple[str, int]:
    parts = []
    for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        value = ctypes.c_int(0)
        if lib.cublasGetProperty(prop, ctypes.byref(value)) != 0:
            raise RuntimeError("cublasGetProperty failed")
        parts.append(value.value)
    return "{}.{}.{}".format(*parts), parts[0] * 10000 + parts[1] * 100 + parts[2]


def _cublaslt(lib: ctypes.CDLL) -> tuple[str, int]:
    fn = lib.cublasLtGetVersion
    fn.restype = ctypes.c_size_t
    raw = int(fn())
    return f"{raw // 10000}.{raw % 10000 // 100}.{raw % 100}", raw


# field name, library file name pattern, version probe
CUDA_LIBRARIES: tuple[tuple[str, re.Pattern[str], Callable[[ctypes.CDLL], tuple[str, int]]], ...] = (
    ("runtime", re.compile(r"^libcudart\.so"), _cudart),
    ("cudnn", re.compile(r"^libcudnn\.so"), _version_call("cudnnGetVersion", ctypes.c_size_t, 90000)),
    ("cublas", re.compile(r"^libcublas\.so"), _cublas),
    ("cublaslt", re.compile(r"^libcublasLt\.so"), _cublaslt),
    ("tensorrt", re.compile(r"^libnvinfer\.so"), _version_call("getInferLibVersion", ctypes.c_int32, 100000)),
)


def mapped_libraries(maps_text: str) -> dict[str, str]:
    """File name -> path of every CUDA-family shared library mapped, from ``/proc/<pid>/maps`` text."""
    found: dict[str, str] = {}
    # Only the lines naming a CUDA-family file are split (a warm worker reads its maps at every check).
    for line in _CUDA_LINE.findall(maps_text):
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith("/") or parts[5].endswith("(deleted)"):
            continue
        path = parts[5].strip()
        name = os.path.basename(path)
        if _CUDA_FAMILY.match(name):
            found.setdefault(name, path)
    return found


def open_loaded(path: str) -> ctypes.CDLL:
    """A handle on a library *already* loaded in this process; raises OSError rather than load it."""
    return ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LAZY", 1))


def cuda_entries(proc_root: Path, *, query_versions: bool = True) -> Entries:
    """Versions and paths of the CUDA libraries mapped in this process (nothing when none is)."""
    return library_entries(mapped_libraries((proc_root / "self" / "maps").read_text(errors="replace")), query_versions)


def library_entries(libraries: Mapping[str, str], query_versions: bool = True) -> Entries:
    """Paths and (with ``query_versions``) versions of the mapped CUDA ``libraries`` (name -> path)."""
    entries: Entries = {}
    if libraries:
        entries["cuda.loaded_libraries"] = (sorted(libraries), False)
    errors: list[str] = []
    for field, pattern, probe in CUDA_LIBRARIES:
        path = next((p for name, p in sorted(libraries.items()) if pattern.match(name)), None)
        if path is None:
            continue
        entries[f"cuda.{field}.path"] = (path, False)
        if not query_versions:
            continue
        try:
            version, raw = probe(open_loaded(path))
            entries[f"cuda.{field}.version"] = (version, True)
            entries[f"cuda.{field}.version_raw"] = (raw, True)
        except Exception as exc:
            entries[f"cuda.{field}.version"] = (None, True)
            errors.append(f"{field}: {gpu.describe(exc)}")
    if errors:
        entries["cuda.error"] = ("; ".join(errors), False)
    return entries
