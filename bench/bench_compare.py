"""Benchmark ``monitor.compare.outputs`` against one numpy copy of the same tensors.

Usage::

    .venv/bin/python bench/bench_compare.py                 # 50M float32 elements, 5 repeats
    .venv/bin/python bench/bench_compare.py --elements 10000000 --repeats 3 --chunks 65536 1048576

For each case - (a) tensors that differ slightly (inside tolerance), (a') tensors that differ
beyond atol (the mismatch count runs), (b) bitwise-equal tensors - each chunk size and each worker
count, it times ``compare_output`` (the full metric suite) and the reference ``a.copy(); b.copy()``
interleaved in the same run, repeats, and prints the medians and their ratio. The goal is a ratio
<= 2; it is measured here, never asserted in tests. ``cpu`` counts every thread of the process, so
with 2 workers the cpu ratio shows the total work and the wall ratio the latency. No BLAS pin is
needed: ``monitor.compare.stream`` makes no BLAS calls.
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
    actual: np.ndarray, expected: np.ndarray, tolerance: AppliedTolerance, chunk: int, workers: int
) -> tuple[float, float, OutputStats]:
    """(wall, CPU) seconds of the full metric suite, and its result."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    stats = compare_output("y", [actual], [expected], tolerance, chunk_elements=chunk, workers=workers)
    return time.perf_counter() - wall, time.process_time() - cpu, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elements", type=int, default=50_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chunks", type=int, nargs="+", default=[1 << 16, 1 << 18, 1 << 20])
    parser.add_argument("--workers", type=int, nargs="+", default=sorted({1, DEFAULT_WORKERS}))
    args = parser.parse_args()

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
    header = ("case", "chunk", "workers", "compare s", "copy s", "ratio", "cmp cpu s", "copy cpu s", "cpu ratio")
    print("{:<16} {:>8} {:>7} {:>10} {:>8} {:>6} {:>10} {:>10} {:>9}  verdict".format(*header))
    for label, actual in cases.items():
        for chunk, workers in itertools.product(args.chunks, args.workers):
            compare_wall, compare_cpu, copy_wall, copy_cpu = [], [], [], []
            verdict = ""
            for _ in range(args.repeats):
                wall, cpu = _time_copy(actual, expected)
                copy_wall.append(wall)
                copy_cpu.append(cpu)
                wall, cpu, stats = _time_compare(actual, expected, tolerance, chunk, workers)
                compare_wall.append(wall)
                compare_cpu.append(cpu)
                verdict = stats.verdict.value
            cw, pw = statistics.median(compare_wall), statistics.median(copy_wall)
            cc, pc = statistics.median(compare_cpu), statistics.median(copy_cpu)
            row = f"{label:<16} {chunk:>8} {workers:>7} {cw:>10.3f} {pw:>8.3f} {cw / pw:>6.2f}"
            print(f"{row} {cc:>10.3f} {pc:>10.3f} {cc / pc:>9.2f}  {verdict}")


if __name__ == "__main__":
    main()
