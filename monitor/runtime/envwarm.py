"""What a warm check worker re-probes of its environment at every check, and what it keeps.

A fresh check child snapshots everything once: it lives for one check. A warm worker
(``daemon.worker: warm``) snapshots at every check of the same model, in the same process, so
each part is probed only as often as it can change under a running process. Measured on a
2-core x86 VM without a GPU (median of 200 calls, ``bench/bench_warm.py``'s machine):

============================  ==========  ====================================================
part                          per call    kept how
============================  ==========  ====================================================
ONNX Runtime, Python, OS      ~2 us each  once per worker (``envsnap.PROCESS_CONSTANT_PARTS``,
                                          ``capture(kept=...)``): an upgrade is a restart
``/proc/cpuinfo`` (model,     ~120 us     once per worker: a process does not move to
ISA flags), arch, cores                   another CPU model
affinity, cgroup CPU quota    ~150 us     every check: a pod's CPU limit can be resized in
                                          place, and the quota sets thread counts
env vars, host, load          ~50 us      every check (cheap; the process may set its own)
CUDA libraries mapped         ~1.1 ms     ``/proc/self/maps`` read at every check (a library
(``/proc/self/maps``,                     loaded lazily, e.g. cuDNN at the first convolution,
versions)                                 appears there), scanned only for CUDA-family lines;
                                          the versions (a call into each library) kept while
                                          the same files are mapped with the same stat stamps
NVML (driver, GPU clocks)     ~40 us      the ``pynvml``-or-ctypes choice made once; "NVML
without a driver; per                     unavailable" kept (no driver appears under a
query with one                            running process's CUDA); with a driver every field
                                          is read at every check (clocks, temperature, power
                                          are what changes)
============================  ==========  ====================================================

Every ``refresh_every`` checks everything kept here is dropped and probed in full, as the
worker's files are re-hashed (``daemon.rehash_every``).
"""

from __future__ import annotations

from pathlib import Path

from monitor.files.stamped import Stamp, stamp
from monitor.runtime.cpu import cpu_fixed_entries, cpu_limit_entries
from monitor.runtime.gpu import Entries, NvmlLike, default_nvml, library_entries, mapped_libraries, nvml_entries


class WarmProbes:
    """One warm worker's kept probe results (see the module's table for what is kept and why)."""

    def __init__(self, refresh_every: int = 100) -> None:
        self.refresh_every = max(1, refresh_every)
        self.captures = 0
        self._cpu_fixed: Entries | None = None
        self._cuda: tuple[tuple[bool, Stamp | None, tuple[tuple[str, str], ...]], Entries] | None = None
        self._nvml_api: NvmlLike | None = None
        self._nvml_unavailable: Entries | None = None

    def begin(self) -> None:
        """A capture starts: at the first and every ``refresh_every``-th, forget everything kept."""
        if self.captures % self.refresh_every == 0:
            self._cpu_fixed, self._cuda, self._nvml_api, self._nvml_unavailable = None, None, None, None
        self.captures += 1

    def cpu(self, proc_root: Path, sys_root: Path) -> Entries:
        """``cpu.cpu_entries``: the fixed part kept, the limits read."""
        if self._cpu_fixed is None:
            self._cpu_fixed = cpu_fixed_entries(proc_root)
        return {**self._cpu_fixed, **cpu_limit_entries(proc_root, sys_root)}

    def cuda(self, proc_root: Path, query_versions: bool) -> Entries:
        """``gpu.cuda_entries``: the maps read, the versions kept while the same files are mapped unchanged."""
        libraries = mapped_libraries((proc_root / "self" / "maps").read_text(errors="replace"))
        named = tuple(sorted(libraries.items()))
        key = (query_versions, stamp([path for _, path in named]), named)
        if self._cuda is not None and self._cuda[0] == key and key[1] is not None:
            return dict(self._cuda[1])
        entries = library_entries(libraries, query_versions)
        self._cuda = (key, dict(entries))
        return entries

    def nvml(self, given: NvmlLike | None) -> Entries:
        """``gpu.nvml_entries`` of ``given`` (or the default API, chosen once); a missing NVML kept."""
        if self._nvml_unavailable is not None:
            return dict(self._nvml_unavailable)
        api = given
        if api is None:
            api = self._nvml_api = self._nvml_api or default_nvml()
        found = nvml_entries(api)
        if set(found) == {"nvml.error"} and str(found["nvml.error"][0]).startswith("NVML unavailable"):
            self._nvml_unavailable = dict(found)
        return found
