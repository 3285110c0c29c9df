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
affinity, cgroup CPU quota    ~20 us      every check: a pod's CPU limit can be resized in
                                          place, and the quota sets thread counts; where the
                                          limit lives (``/proc/self/cgroup`` and the probes for
                                          v2/v1 files, ~170 us) once per refresh
env vars, host, load          ~50 us      every check (cheap; the process may set its own)
CUDA libraries mapped         ~1.1 ms     ``/proc/self/maps`` read (scanned only for CUDA-family
(``/proc/self/maps``,                     lines) and versions probed at the first check after
versions)                                 a session build (a library loaded lazily, e.g. cuDNN
                                          at the first convolution, is mapped by then); later
                                          checks ``os.stat`` each mapped library (~2 us each):
                                          a moved stamp reads the maps again. A library a kept
                                          session maps only later shows in the volatile
                                          ``cuda.loaded_libraries`` at the next refresh
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
from monitor.runtime.cpu import QuotaFiles, cpu_fixed_entries, cpu_limit_entries, quota_files
from monitor.runtime.gpu import Entries, NvmlLike, default_nvml, library_entries, mapped_libraries, nvml_entries


class WarmProbes:
    """One warm worker's kept probe results (see the module's table for what is kept and why)."""

    def __init__(self, refresh_every: int = 100) -> None:
        self.refresh_every = max(1, refresh_every)
        self.captures = 0
        self._cpu_fixed: Entries | None = None
        self._quota_files: QuotaFiles | None = None
        self._cuda: tuple[tuple[bool, Stamp | None, tuple[tuple[str, str], ...]], Entries] | None = None
        self._nvml_api: NvmlLike | None = None
        self._nvml_unavailable: Entries | None = None

    def begin(self) -> None:
        """A capture starts: at the first and every ``refresh_every``-th, forget everything kept."""
        if self.captures % self.refresh_every == 0:
            self._cpu_fixed, self._cuda, self._nvml_api, self._nvml_unavailable = None, None, None, None
            self._quota_files = None
        self.captures += 1

    def cpu(self, proc_root: Path, sys_root: Path) -> Entries:
        """``cpu.cpu_entries``: the fixed part and where the cgroup limit lives kept, the limits read."""
        if self._cpu_fixed is None:
            self._cpu_fixed = cpu_fixed_entries(proc_root)
        if self._quota_files is None:
            self._quota_files = quota_files(proc_root, sys_root)
        return {**self._cpu_fixed, **cpu_limit_entries(proc_root, sys_root, self._quota_files)}

    def session_built(self) -> None:
        """A session was (re)built in this worker: the next capture reads ``/proc/self/maps`` again."""
        self._cuda = None

    def cuda(self, proc_root: Path, query_versions: bool) -> Entries:
        """``gpu.cuda_entries``, kept while the same CUDA files are mapped with unchanged stat stamps.

        ``/proc/self/maps`` is read at the first capture after a session build (the libraries it
        loads, lazily ones included, are mapped by the end of its first replay), at every refresh,
        and whenever a kept library's stamp moved; in between, one ``os.stat`` per mapped library.
        """
        if self._cuda is not None:
            kept_key, kept_entries = self._cuda
            now = stamp([path for _, path in kept_key[2]])
            if kept_key[0] == query_versions and now is not None and now == kept_key[1]:
                return dict(kept_entries)
        libraries = mapped_libraries((proc_root / "self" / "maps").read_text(errors="replace"))
        named = tuple(sorted(libraries.items()))
        entries = library_entries(libraries, query_versions)
        self._cuda = ((query_versions, stamp([path for _, path in named]), named), dict(entries))
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
