"""The comparison against one copy of both tensors, each measurement in a fresh process.

Usage::

    .venv/bin/python bench/bench_compare.py                     # every case, 3 fresh processes each
    .venv/bin/python bench/bench_compare.py --cases 1.6e7 gpt2-logits --kinds differ --repeats 5

Each measurement runs in its own interpreter, as a worker's first check would: the child makes
the tensors (not timed), then times one copy of both tensors (``np.copy`` of every sample's
actual and baseline output, into fresh memory), then the comparison as a check does it (a
``Comparison`` built, fed one sample at a time, finished into ``OutputStats``; any lazy import or
load inside it counts), then both once more in the same process (``warm``). Importing
``monitor.compare``, which a worker does when it starts, is timed apart (``import``). The goal:
the fresh comparison <= 3x the fresh copy. ``bits`` says whether every run of a row gave the
same metrics to the bit.

Cases: single outputs of 1e4, 1e6 and 1.6e7 float32 elements (one sample), and outputs shaped
like real models' fed over several samples. Kinds: ``equal`` (bitwise the baseline: a steady
check on the same stack), ``differ`` (inside tolerance), ``beyond`` (beyond atol: the mismatch
count runs). ``ratio`` is wall time (``perf_counter``), ``cpu ratio`` the process's CPU time (all
its threads; steadier when other processes share the cores), both taken within one process.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# name -> (per-sample shape, samples)
CASES: dict[str, tuple[tuple[int, ...], int]] = {
    "1e4": ((10_000,), 1),
    "1e6": ((1_000_000,), 1),
    "1.6e7": ((16_000_000,), 1),
    "resnet50-logits": ((1, 1000), 64),
    "bert-hidden": ((1, 128, 768), 16),
    "yolov8-boxes": ((1, 84, 8400), 8),
    "gpt2-logits": ((1, 64, 50257), 4),
}
KINDS = {"equal": 0.0, "differ": 1e-6, "beyond": 1e-4}


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _digest(stats: Any) -> str:
    """The metrics' bits (NaN as one value), so two paths can be compared without shipping them."""
    parts = []
    for key, value in sorted(dataclasses.asdict(stats.metrics).items()):
        bits = ("nan" if math.isnan(value) else struct.pack("<d", value).hex()) if isinstance(value, float) else value
        parts.append(f"{key}={bits}")
    return hashlib.sha256(";".join(parts).encode()).hexdigest()[:12]


def _child(case: str, kind: str) -> dict[str, Any]:
    """One fresh process's measurement (run with ``--child``)."""
    import numpy as np

    shape, samples = CASES[case]
    rng = np.random.default_rng(0)
    baselines = [rng.standard_normal(shape, dtype=np.float32) for _ in range(samples)]
    scale = np.float32(KINDS[kind])
    actuals = [b + rng.standard_normal(shape, dtype=np.float32) * scale if scale else b.copy() for b in baselines]

    def copy() -> tuple[float, float]:
        start, cpu = time.perf_counter(), time.process_time()
        copies = [(np.copy(a), np.copy(b)) for a, b in zip(actuals, baselines, strict=True)]
        took = time.perf_counter() - start, time.process_time() - cpu
        del copies
        return took

    start = time.perf_counter()
    from monitor.compare.accumulate import Comparison  # a worker imports these when it starts
    from monitor.results import AppliedTolerance

    imported = time.perf_counter() - start

    def compare() -> tuple[float, float, Any]:
        start, cpu = time.perf_counter(), time.process_time()
        tolerance = AppliedTolerance(atol=1e-5, rtol=1e-3, cosine_min=0.999, snr_min_db=40.0, max_mismatch_ratio=0.5)
        elements = {"y": baselines[0].size * samples}
        comparison = Comparison(["y"], ["y"], {"y": tolerance}, samples=samples, elements=elements)
        for a, b in zip(actuals, baselines, strict=True):
            comparison.feed({"y": a}, {"y": b})
        (stats,) = comparison.finish()
        return time.perf_counter() - start, time.process_time() - cpu, stats

    rss = _rss_mib()
    copy_fresh, copy_cpu = copy()
    compare_fresh, compare_cpu, stats = compare()
    rss_after = _rss_mib()
    copy_warm, _ = copy()
    compare_warm, _, _ = compare()
    return {
        "import": imported,
        "copy": copy_fresh,
        "compare": compare_fresh,
        "copy_cpu": copy_cpu,
        "compare_cpu": compare_cpu,
        "copy_warm": copy_warm,
        "compare_warm": compare_warm,
        "rss_added": rss_after - rss,
        "bits": _digest(stats),
        "verdict": stats.verdict.value,
    }


def _spawn(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, cwd=ROOT, env=env, check=False
    )
    if done.returncode:
        raise SystemExit(f"child {args} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("CASE", "KIND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(*args.child)))
        return
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    print(f"median of {args.repeats} fresh processes per row; times in ms; goal: compare <= 3x copy")
    head = ("case", "elements", "kind", "import", "copy", "compare", "ratio", "cpu ratio", "warm ratio", "RSS+ MiB")
    print(_ROW.format(*head, "bits", "verdict"))
    for case in args.cases:
        shape, samples = CASES[case]
        elements = math.prod(shape) * samples
        for kind in args.kinds:
            got = [_spawn(["--child", case, kind], env) for _ in range(args.repeats)]
            import_ms, copy_ms, compare_ms = (
                statistics.median(r[key] for r in got) * 1e3 for key in ("import", "copy", "compare")
            )
            ratio = statistics.median(r["compare"] / r["copy"] for r in got)
            cpu = statistics.median(r["compare_cpu"] / max(r["copy_cpu"], 1e-9) for r in got)
            warm = statistics.median(r["compare_warm"] / r["copy_warm"] for r in got)
            rss = statistics.median(r["rss_added"] for r in got)
            bits = "same" if len({r["bits"] for r in got}) == 1 else "DIFFER"
            times = (f"{import_ms:.1f}", f"{copy_ms:.2f}", f"{compare_ms:.2f}", f"{ratio:.2f}", f"{cpu:.2f}")
            print(
                _ROW.format(case, f"{elements:,}", kind, *times, f"{warm:.2f}", f"{rss:.1f}", bits, got[0]["verdict"])
            )


_ROW = "{:<16} {:>11} {:<7} {:>7} {:>8} {:>9} {:>6} {:>9} {:>10} {:>9}  {:<6} {}"


if __name__ == "__main__":
    main()
