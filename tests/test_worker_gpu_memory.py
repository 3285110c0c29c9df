"""``onnxmon_worker_gpu_memory_bytes``: NVML's per-process memory, one series per warm worker; NaN when not measured."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.runtime.gpumem import CtypesProcessNvml, process_memory
from monitor.sinks.prometheus.gpu_memory import NAME, WorkerGpuMemory

MIB = 2**20


@dataclass
class Proc:
    pid: int
    usedGpuMemory: int | None


class FakeNvml:
    """Two GPUs; pid 11 on both, pid 12 with memory NVML cannot report (MIG without privileges)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def nvmlInit(self) -> None:
        if self.fail:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    def nvmlShutdown(self) -> None: ...

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> Any:
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any, /) -> list[Proc]:
        return [Proc(11, 300 * MIB), Proc(12, None)] if handle == 0 else [Proc(11, 100 * MIB), Proc(13, 2**64 - 1)]


def scrape(collector: WorkerGpuMemory) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        s.labels["model"]: s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == NAME
    }


def test_per_process_memory_is_summed_over_the_gpus() -> None:
    assert process_memory(FakeNvml()) == {11: 400 * MIB}, "None and NVML_VALUE_NOT_AVAILABLE are left out"


def test_each_warm_worker_gets_its_pids_memory_and_nan_when_nvml_does_not_list_it() -> None:
    got = scrape(WorkerGpuMemory(lambda: {"resnet": 11, "bert": 12}, nvml=FakeNvml()))
    assert got["resnet"] == 400 * MIB
    assert math.isnan(got["bert"]), "not measured is not 0"


def test_without_nvml_every_worker_is_nan_and_without_workers_there_is_no_series() -> None:
    got = scrape(WorkerGpuMemory(lambda: {"resnet": 11}, nvml=FakeNvml(fail=True)))
    assert list(got) == ["resnet"] and math.isnan(got["resnet"])
    assert scrape(WorkerGpuMemory(lambda: {}, nvml=FakeNvml())) == {}


def test_the_ctypes_adapter_without_a_driver_answers_none() -> None:
    assert process_memory(CtypesProcessNvml("libnvidia-ml-missing.so.1")) is None
