"""The GPU half of the environment snapshot: CUDA libraries loaded in this process, and NVML.

Two questions, answered without ever loading CUDA ourselves:

* Which CUDA runtime / cuDNN / cuBLAS / TensorRT is *this process* using? Only the
  libraries mapped in ``/proc/self/maps`` count (an installed library nobody loaded
  computes nothing). Each is opened with ``RTLD_NOLOAD`` on its exact mapped path, so a
  library that is not already loaded stays unloaded, and its own version function is
  asked. cuDNN and most of cuBLAS load lazily, on the first convolution / matmul: capture
  after the first inference (``check`` does) or these fields are simply absent.
* Which driver and which boards? NVML, through anything shaped like ``pynvml``
  (:class:`NvmlLike`): the real ``nvidia-ml-py`` module, :class:`CtypesNvml` (a small
  adapter over ``libnvidia-ml.so.1`` for machines without nvidia-ml-py), or a test fake.

Probes return :data:`Entries` (dotted name -> (value, stable)); ``envsnap`` wraps them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

JsonValue = str | int | float | bool | None | list[str]
Entries = dict[str, tuple[JsonValue, bool]]

NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0

# nvmlClocksEventReason* bits (formerly "throttle reasons"); names as in nvml.h, snake_cased.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)


def decode_clock_event_reasons(mask: int) -> list[str]:
    """Names of the bits set in an NVML clock-event (throttle) reason mask; unknown bits kept as hex."""
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    unknown = mask & ~sum(bit for bit, _ in CLOCK_EVENT_REASONS)
    if unknown:
        names.append(f"unknown_{unknown:#x}")
    return names


class MemoryInfo(Protocol):
    @property
    def total(self) -> int: ...
    @property
    def used(self) -> int: ...


class NvmlLike(Protocol):
    """The part of the ``pynvml`` API the snapshot uses (the module itself satisfies it)."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any, /) -> str | bytes: ...
    def nvmlDeviceGetUUID(self, handle: Any, /) -> str | bytes: ...
    def nvmlDeviceGetCudaComputeCapability(self, handle: Any, /) -> tuple[int, int]: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any, /) -> MemoryInfo: ...
    def nvmlDeviceGetEccMode(self, handle: Any, /) -> Sequence[int]: ...
    def nvmlDeviceGetMigMode(self, handle: Any, /) -> Sequence[int]: ...
    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int, /) -> int: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int, /) -> int: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any, /) -> int: ...


def default_nvml() -> NvmlLike:
    """The real ``pynvml`` module when importable, else :class:`CtypesNvml` (fails at init without a driver)."""
    try:
        import pynvml

        module: NvmlLike = pynvml
        return module
    except ImportError:
        return CtypesNvml()


def describe(exc: BaseException) -> str:
    """One bounded line for an exception: its type and message."""
    return f"{type(exc).__name__}: {exc}"[:300]


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _not_supported(exc: BaseException) -> bool:
    return getattr(exc, "value", None) == NVML_ERROR_NOT_SUPPORTED


def _cuda_version(encoded: int) -> str:
    """NVML / CUDA encode 12.4 as 12040."""
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def nvml_entries(nvml: NvmlLike) -> Entries:
    """Driver and per-GPU fields; no GPU or no driver gives only a volatile ``nvml.error``."""
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return {"nvml.error": (f"NVML unavailable: {describe(exc)}", False)}
    entries: Entries = {}
    try:
        entries["nvml.driver_version"] = (_text(nvml.nvmlSystemGetDriverVersion()), True)
        entries["nvml.cuda_driver_version"] = (_cuda_version(nvml.nvmlSystemGetCudaDriverVersion()), True)
        count = nvml.nvmlDeviceGetCount()
        entries["gpu.count"] = (count, True)
        for index in range(count):
            try:
                entries.update(_device_entries(nvml, index))
            except Exception as exc:
                entries[f"gpu.{index}.error"] = (describe(exc), False)
    except Exception as exc:
        entries["nvml.error"] = (describe(exc), False)
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    return entries


def _device_entries(nvml: NvmlLike, index: int) -> Entries:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    entries: Entries = {}
    errors: list[str] = []

    def ask(name: str, stable: bool, probe: Callable[[], JsonValue]) -> None:
        value: JsonValue
        try:
            value = probe()
        except Exception as exc:  # a field the board cannot report must not hide the others
            value = "unsupported" if _not_supported(exc) else None
            if value is None:
                errors.append(f"{name}: {describe(exc)}")
        entries[f"gpu.{index}.{name}"] = (value, stable)

    def enabled(state: Sequence[int]) -> str:
        return "enabled" if state[0] else "disabled"

    def reasons() -> JsonValue:
        event_reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        mask = event_reasons(handle) if event_reasons else nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
        return decode_clock_event_reasons(int(mask))

    # Stable: what kind of board. The UUID names *this* board: recorded, volatile, so a pod
    # rescheduled onto an identical board is not an environment change (diff still shows it).
    ask("name", True, lambda: _text(nvml.nvmlDeviceGetName(handle)))
    ask("uuid", False, lambda: _text(nvml.nvmlDeviceGetUUID(handle)))
    ask("compute_capability", True, lambda: "{}.{}".format(*nvml.nvmlDeviceGetCudaComputeCapability(handle)))
    ask("memory_total_mib", True, lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // 2**20)
    ask("ecc", True, lambda: enabled(nvml.nvmlDeviceGetEccMode(handle)))
    ask("mig", True, lambda: enabled(nvml.nvmlDeviceGetMigMode(handle)))
    # Volatile: the state of the moment.
    ask("memory_used_mib", False, lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).used) // 2**20)
    ask("sm_clock_mhz", False, lambda: int(nvml.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM)))
    ask("mem_clock_mhz", False, lambda: int(nvml.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_MEM)))
    ask("temperature_c", False, lambda: int(nvml.nvmlDeviceGetTemperature(handle, NVML_TEMPERATURE_GPU)))
    ask("power_w", False, lambda: round(nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0, 1))
    ask("clock_event_reasons", False, reasons)
    if errors:
        entries[f"gpu.{index}.error"] = ("; ".join(errors), False)
    return entries


# --- CUDA libraries mapped in this process ---------------------------------------------------

_CUDA_FAMILY = re.compile(r"^lib(cudart|cudnn\w*|cublas(Lt)?|nvinfer\w*|nvrtc\w*|cufft|curand|cusparse\w*)\.so")
_CUDA_LINE = re.compile(r"^.*/lib(?:cudart|cudnn|cublas|nvinfer|nvrtc|cufft|curand|cusparse).*$", re.MULTILINE)


def _cudart(lib: ctypes.CDLL) -> tuple[str, int]:
    value = ctypes.c_int(0)
    if lib.cudaRuntimeGetVersion(ctypes.byref(value)) != 0:
        raise RuntimeError("cudaRuntimeGetVersion failed")
    return _cuda_version(value.value), value.value


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
            errors.append(f"{field}: {describe(exc)}")
    if errors:
        entries["cuda.error"] = ("; ".join(errors), False)
    return entries


# --- NVML over ctypes, for machines without nvidia-ml-py --------------------------------------


class NvmlError(Exception):
    """An NVML call returned an error code; ``value`` is that code (as in pynvml's NVMLError)."""

    def __init__(self, value: int, message: str) -> None:
        super().__init__(f"NVML error {value}: {message}")
        self.value = value


class _Memory(ctypes.Structure):
    _fields_ = (("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong))


class CtypesNvml:
    """:class:`NvmlLike` over ``libnvidia-ml.so.1`` with ctypes; the library is opened by ``nvmlInit``."""

    def __init__(self, library: str = "libnvidia-ml.so.1") -> None:
        self._library = library
        self._lib: ctypes.CDLL | None = None

    def _call(self, name: str, *args: Any) -> None:
        if self._lib is None:
            raise NvmlError(1, "NVML not initialized")
        code = int(getattr(self._lib, name)(*args))
        if code != NVML_SUCCESS:
            describe_error = self._lib.nvmlErrorString
            describe_error.restype = ctypes.c_char_p
            raise NvmlError(code, _text(describe_error(code) or b"unknown"))

    def _string(self, name: str, *args: Any) -> str:
        buffer = ctypes.create_string_buffer(256)
        self._call(name, *args, buffer, ctypes.c_uint(len(buffer)))
        return _text(buffer.value)

    def _uint(self, name: str, *args: Any, kind: type[Any] = ctypes.c_uint) -> int:
        value = kind(0)
        self._call(name, *args, ctypes.byref(value))
        return int(value.value)

    def _pair(self, name: str, handle: Any, kind: type[Any] = ctypes.c_uint) -> tuple[int, int]:
        first, second = kind(0), kind(0)
        self._call(name, handle, ctypes.byref(first), ctypes.byref(second))
        return int(first.value), int(second.value)

    def nvmlInit(self) -> None:
        if self._lib is None:
            self._lib = ctypes.CDLL(self._library)
        self._call("nvmlInit_v2")

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return self._string("nvmlSystemGetDriverVersion")

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self._uint("nvmlSystemGetCudaDriverVersion", kind=ctypes.c_int)

    def nvmlDeviceGetCount(self) -> int:
        return self._uint("nvmlDeviceGetCount_v2")

    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
        return handle

    def nvmlDeviceGetName(self, handle: Any, /) -> str:
        return self._string("nvmlDeviceGetName", handle)

    def nvmlDeviceGetUUID(self, handle: Any, /) -> str:
        return self._string("nvmlDeviceGetUUID", handle)

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any, /) -> tuple[int, int]:
        return self._pair("nvmlDeviceGetCudaComputeCapability", handle, ctypes.c_int)

    def nvmlDeviceGetMemoryInfo(self, handle: Any, /) -> _Memory:
        memory = _Memory()
        self._call("nvmlDeviceGetMemoryInfo", handle, ctypes.byref(memory))
        return memory

    def nvmlDeviceGetEccMode(self, handle: Any, /) -> tuple[int, int]:
        return self._pair("nvmlDeviceGetEccMode", handle, ctypes.c_int)

    def nvmlDeviceGetMigMode(self, handle: Any, /) -> tuple[int, int]:
        return self._pair("nvmlDeviceGetMigMode", handle)

    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int, /) -> int:
        return self._uint("nvmlDeviceGetClockInfo", handle, ctypes.c_int(clock_type))

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int, /) -> int:
        return self._uint("nvmlDeviceGetTemperature", handle, ctypes.c_int(sensor))

    def nvmlDeviceGetPowerUsage(self, handle: Any, /) -> int:
        return self._uint("nvmlDeviceGetPowerUsage", handle)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any, /) -> int:
        # Newer drivers name it "clocks event reasons"; the old symbol stays exported for compatibility.
        assert self._lib is not None
        name = "nvmlDeviceGetCurrentClocksEventReasons"
        if not hasattr(self._lib, name):
            name = "nvmlDeviceGetCurrentClocksThrottleReasons"
        return self._uint(name, handle, kind=ctypes.c_ulonglong)
