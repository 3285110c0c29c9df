"""The NVML half of the GPU environment: the driver and each board, asked through NVML.

NVML is reached through anything shaped like ``pynvml`` (:class:`NvmlLike`): the real
``nvidia-ml-py`` module, :class:`CtypesNvml` (a small adapter over ``libnvidia-ml.so.1`` for
machines without nvidia-ml-py), or a test fake. The CUDA libraries this process has loaded are
``cudalibs``'s question.

Probes return :data:`Entries` (dotted name -> (value, stable)); ``envsnap`` wraps them.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Sequence
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


def cuda_version(encoded: int) -> str:
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
        entries["nvml.cuda_driver_version"] = (cuda_version(nvml.nvmlSystemGetCudaDriverVersion()), True)
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
    # The fleet's stack key (runtime/stackkey.py): cuBLAS is bitwise reproducible only on one SM count, and
    # a MIG slice is another machine. Both optional in NVML bindings: asked only where the binding has them.
    attributes = getattr(nvml, "nvmlDeviceGetAttributes", None)
    if attributes is not None:
        ask("sm_count", True, lambda: int(attributes(handle).multiprocessorCount))
    if hasattr(nvml, "nvmlDeviceGetMigDeviceHandleByIndex"):
        ask("mig_profile", True, lambda: mig_profile(nvml, handle))
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


def mig_profile(nvml: Any, handle: Any) -> str:
    """The MIG slices of a board by their profile (``1g.10gb,3g.40gb``, from each MIG device's name), or
    ``none`` with MIG off: two slices of one board compute on different SM counts."""
    if not nvml.nvmlDeviceGetMigMode(handle)[0]:
        return "none"
    profiles = []
    for index in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            device = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except Exception:  # an empty slot: NVML_ERROR_NOT_FOUND
            continue
        name = _text(nvml.nvmlDeviceGetName(device))
        profiles.append(name.rsplit(" MIG ", 1)[-1].strip())
    return ",".join(sorted(profiles)) or "none"


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
