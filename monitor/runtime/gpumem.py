"""GPU memory held per process, from NVML: what a warm check worker keeps on the GPU between checks.

``process_memory(nvml)`` asks every GPU for its compute processes and sums, per pid, the memory
NVML says each uses (context, handles, workspaces and the ONNX Runtime arena together; what
``nvidia-smi --query-compute-apps`` shows). ``None`` means NVML could not answer (no driver, no
GPU): the caller reports "not measured", never 0.

Two limits worth knowing. NVML reports pids as the driver sees them: in a container without the
host's pid namespace they may be host pids, so a worker's own pid is then not found (the metric
says NaN rather than a false 0). And ``usedGpuMemory`` is unavailable under some MIG setups
without privileges (pynvml gives None): such a process is left out.

:class:`ProcessNvml` is the part of the ``pynvml`` API used; ``nvidia-ml-py`` satisfies it, and
:class:`CtypesProcessNvml` adds the one call to the ctypes adapter of ``gpu.py``. It asks the
``_v2`` entry point (24-byte ``nvmlProcessInfo_v2_t``), never ``_v3``, whose struct grew and
shrank again across drivers (R535 added ``usedGpuCcProtectedMemory``).
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Sequence
from typing import Any, Protocol

from monitor.runtime.gpu import CtypesNvml, NvmlError

NVML_ERROR_INSUFFICIENT_SIZE = 7


class ProcessInfo(Protocol):
    @property
    def pid(self) -> int: ...
    @property
    def usedGpuMemory(self) -> int | None: ...


class ProcessNvml(Protocol):
    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> Any: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any, /) -> Sequence[ProcessInfo]: ...


def default_process_nvml() -> ProcessNvml:
    """The real ``pynvml`` when importable, else the ctypes adapter (which fails at init without a driver)."""
    try:
        import pynvml

        module: ProcessNvml = pynvml
        return module
    except ImportError:
        return CtypesProcessNvml()


def process_memory(nvml: ProcessNvml) -> dict[int, int] | None:
    """pid -> bytes of GPU memory used, summed over the GPUs; None when NVML cannot answer."""
    try:
        nvml.nvmlInit()
    except Exception:
        return None
    try:
        used: dict[int, int] = {}
        for index in range(nvml.nvmlDeviceGetCount()):
            for process in nvml.nvmlDeviceGetComputeRunningProcesses(nvml.nvmlDeviceGetHandleByIndex(index)):
                memory = process.usedGpuMemory
                if memory is None or memory >= 2**63:  # NVML_VALUE_NOT_AVAILABLE is all ones
                    continue
                used[int(process.pid)] = used.get(int(process.pid), 0) + int(memory)
        return used
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


class _ProcessInfoV2(ctypes.Structure):
    _fields_ = (
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    )


class _ProcessInfoV1(ctypes.Structure):
    _fields_ = (("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong))


class CtypesProcessNvml(CtypesNvml):
    """:class:`CtypesNvml` that can also list a GPU's compute processes."""

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any, /) -> list[ProcessInfo]:
        if self._lib is None:
            raise NvmlError(1, "NVML not initialized")
        name: str = "nvmlDeviceGetComputeRunningProcesses_v2"
        struct: type[ctypes.Structure] = _ProcessInfoV2
        if not hasattr(self._lib, name):
            name, struct = "nvmlDeviceGetComputeRunningProcesses", _ProcessInfoV1
        count = ctypes.c_uint(0)
        code = int(getattr(self._lib, name)(handle, ctypes.byref(count), None))
        if code == 0:
            return []  # no process on this GPU
        if code != NVML_ERROR_INSUFFICIENT_SIZE:
            raise NvmlError(code, f"{name} failed")
        count.value += 8  # room for processes started since the first call
        buffer = (struct * count.value)()
        self._call(name, handle, ctypes.byref(count), buffer)
        return [buffer[i] for i in range(count.value)]
