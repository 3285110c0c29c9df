"""Benchmark ``monitor.compare.outputs`` against one numpy copy of the same tensors.

Usage::

    .venv/bin/python bench/bench_compare.py                 # 50M float32 elements, 5 repeats
    .venv/bin/python bench/bench_compare.py --elements 10000000 --repeats 3 --chunks 65536 1048576
    .venv/bin/python bench/bench_compare.py --startup       # numba's import, compile and cached load

For each case - (a) tensors that differ slightly (inside tolerance), (a') tensors that differ
beyond atol (the mismatch count runs), (b) bitwise-equal tensors - each implementation (the fused
kernel and the numpy pass, ``monitor/compare/fused.py``), each chunk size and each worker count, it
times ``compare_output`` (the full metric suite) and the reference ``a.copy(); b.copy()``
interleaved in the same run, repeats, and prints the medians and their ratio. The goal is a ratio
<= 2 for the fused kernel on one thread; it is measured here, never asserted in tests. ``cpu``
counts every thread of the process, so with 2 workers the cpu ratio shows the total work and the
wall ratio the latency. No BLAS pin is needed: ``monitor.compare`` makes no BLAS calls.

``--startup`` runs fresh interpreters (as a check child is): numba's import, the kernel's compile
into an empty cache, and its load from the cache, beside one numpy pass over the same tensors.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import time

import numpy as np

from monitor.compare.outputs import DEFAULT_WORKERS, compare_output
from monitor.results import AppliedTolerance, OutputStats


def _time_copy(actual: np.ndarray, expected: np.ndarray) -> tuple[float, float]:
    """(wall, CPU) seconds of one copy of each tensor."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    actual.copy()
    expected.copy()
    return time.perf_counter() - wall, time.process_time() - cpu


def _time_compare(
    actual: np.ndarray, expected: np.ndarray, tolerance: AppliedTolerance, chunk: int, workers: int, fused: bool
) -> tuple[float, float, OutputStats]:
    """(wall, CPU) seconds of the full metric suite, and its result."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    stats = compare_output("y", [actual], [expected], tolerance, chunk_elements=chunk, workers=workers, fused=fused)
    return time.perf_counter() - wall, time.process_time() - cpu, stats


_STARTUP = """
import sys, time
import numpy as np
start = time.perf_counter()
{body}
print(f"{{time.perf_counter() - start:.3f}}")
"""
_STARTUP_STEPS = {
    "import numba": "import numba",
    "import + compile (empty cache)": "from monitor.compare import fused; fused.kernel(np.dtype('float32'))",
    "import + load (cached)": "from monitor.compare import fused; fused.kernel(np.dtype('float32'))",
}


def _startup(elements: int, repeats: int) -> None:
    """Fresh-interpreter costs of the fused path, beside the numpy pass they must be repaid by."""
    import os
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        print(f"fresh interpreters, median of {repeats}; NUMBA_CACHE_DIR={cache}")
        for label, body in _STARTUP_STEPS.items():
            times = []
            for _ in range(repeats):
                if "empty cache" in label:
                    subprocess.run(["rm", "-rf", cache], check=True)
                    os.makedirs(cache)
                done = subprocess.run(
                    [sys.executable, "-c", _STARTUP.format(body=body)], env=env, capture_output=True, text=True
                )
                times.append(float(done.stdout.split()[-1]))
            print(f"  {label:<32} {statistics.median(times):7.3f} s")
    rng = np.random.default_rng(0)
    expected = rng.standard_normal(elements, dtype=np.float32)
    actual = expected + rng.standard_normal(elements, dtype=np.float32) * np.float32(1e-6)
    tolerance = AppliedTolerance(atol=1e-5, rtol=1e-3)
    for fused in (False, True):
        times = [_time_compare(actual, expected, tolerance, 1 << 16, 1, fused)[0] for _ in range(repeats)]
        print(f"  {'fused' if fused else 'numpy'} pass over {elements:,} float32    {statistics.median(times):7.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elements", type=int, default=50_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chunks", type=int, nargs="+", default=[1 << 16, 1 << 18, 1 << 20])
    parser.add_argument("--workers", type=int, nargs="+", default=sorted({1, DEFAULT_WORKERS}))
    parser.add_argument("--paths", nargs="+", choices=["fused", "numpy"], default=["fused", "numpy"])
    parser.add_argument("--startup", action="store_true", help="time numba's import/compile/load instead")
    args = parser.parse_args()
    if args.startup:
        _startup(min(args.elements, 10_000_000), args.repeats)
        return

    rng = np.random.default_rng(0)
    expected = rng.standard_normal(args.elements, dtype=np.float32)
    noise = rng.standard_normal(args.elements, dtype=np.float32)
    cases = {
        "differ slightly": expected + noise * np.float32(1e-6),
        "differ > atol": expected + noise * np.float32(1e-4),
        "bitwise equal": expected.copy(),
    }
    del noise
    tolerance = AppliedTolerance(atol=1e-5, rtol=1e-3, cosine_min=0.999, snr_min_db=40.0, max_mismatch_ratio=0.5)

    print(f"{args.elements:,} float32 elements per tensor, median of {args.repeats} interleaved repeats")
    print("wall = perf_counter, cpu = process_time (steadier when other processes share the cores)")
    header = ("case", "path", "chunk", "workers", "compare s", "copy s", "ratio", "cmp cpu s", "copy cpu s")
    header += ("cpu ratio",)
    print("{:<16} {:<5} {:>8} {:>7} {:>10} {:>8} {:>6} {:>10} {:>10} {:>9}  verdict".format(*header))
    compare_output("warm-up", [cases["bitwise equal"][:10]], [expected[:10]], tolerance, fused=True)  # load numba
    for label, actual in cases.items():
        for path, chunk, workers in itertools.product(args.paths, args.chunks, args.workers):
            compare_wall, compare_cpu, copy_wall, copy_cpu = [], [], [], []
            verdict = ""
            for _ in range(args.repeats):
                wall, cpu = _time_copy(actual, expected)
                copy_wall.append(wall)
                copy_cpu.append(cpu)
                wall, cpu, stats = _time_compare(actual, expected, tolerance, chunk, workers, path == "fused")
                compare_wall.append(wall)
                compare_cpu.append(cpu)
                verdict = stats.verdict.value
            cw, pw = statistics.median(compare_wall), statistics.median(copy_wall)
            cc, pc = statistics.median(compare_cpu), statistics.median(copy_cpu)
            row = f"{label:<16} {path:<5} {chunk:>8} {workers:>7} {cw:>10.3f} {pw:>8.3f} {cw / pw:>6.2f}"
            print(f"{row} {cc:>10.3f} {pc:>10.3f} {cc / pc:>9.2f}  {verdict}")


if __name__ == "__main__":
    main()
