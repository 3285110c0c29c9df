"""``onnxmon_worker_gpu_memory_bytes``: the GPU memory each warm check worker holds, read from NVML at scrape time.

The daemon knows its warm workers' pids (``daemon.warm.WarmPool.pids``); NVML knows each GPU's
compute processes and their memory (``runtime.gpumem``). One series per live worker, labelled by
its model: bytes over all GPUs, or NaN when NVML cannot answer or does not list the worker's pid
(a CPU-only worker, or NVML reporting host pids in a container: not measured is not 0). No worker,
no series: a fresh-worker daemon (``daemon.worker: fresh``) frees the GPU after every check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from monitor.runtime.gpumem import ProcessNvml, default_process_nvml, process_memory

NAME = "onnxmon_worker_gpu_memory_bytes"
HELP = "GPU memory a warm check worker holds (NVML, all GPUs); NaN when not measured."


class WorkerGpuMemory(Collector):
    """A scrape-time collector over ``pids()`` (model -> pid of its warm worker)."""

    def __init__(self, pids: Callable[[], Mapping[str, int]], nvml: ProcessNvml | None = None) -> None:
        self._pids = pids
        self._nvml = nvml

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(NAME, HELP, labels=["model"])
        workers = dict(self._pids())
        if workers:
            used = process_memory(self._nvml if self._nvml is not None else default_process_nvml())
            for model, pid in sorted(workers.items()):
                value = used.get(pid) if used is not None else None
                family.add_metric([model], float(value) if value is not None else math.nan)
        return [family]


def install(registry: CollectorRegistry, pids: Callable[[], Mapping[str, int]]) -> WorkerGpuMemory:
    """Register the collector in ``registry``; ``pids`` is read at every scrape."""
    collector = WorkerGpuMemory(pids)
    registry.register(collector)
    return collector
