"""The comparison against one copy of both tensors, each measurement in a fresh process.

Usage::

    .venv/bin/python bench/bench_compare.py                     # every case, 3 fresh processes each
    .venv/bin/python bench/bench_compare.py --cases 1.6e7 gpt2-logits --kinds differ --repeats 5
    .venv/bin/python bench/bench_compare.py --startup           # numba's import, compile, load and RSS

Each measurement runs in its own interpreter, as a worker's first check would: the child makes
the tensors (not timed), then times one copy of both tensors (``np.copy`` of every sample's
actual and baseline output, into fresh memory), then the comparison as a check does it (a
``Comparison`` built, fed one sample at a time, finished into ``OutputStats``; any lazy import or
load inside it counts), then both once more in the same process (``warm``). Importing
``monitor.compare``, which a worker does when it starts, is timed apart (``import``). ``numpy`` is the
numpy pass; ``numba`` forces the fused kernel, loaded from a disk cache filled beforehand (the
best case for it: an image that pre-built the cache). The goal: the fresh comparison <= 3x the
fresh copy. ``bits`` says whether both paths gave the same metrics to the bit.

Cases: single outputs of 1e4, 1e6 and 1.6e7 float32 elements (one sample), and outputs shaped
like real models' fed over several samples. Kinds: ``equal`` (bitwise the baseline: a steady
check on the same stack), ``differ`` (inside tolerance), ``beyond`` (beyond atol: the mismatch
count runs). Wall time is ``perf_counter``; the machine's other load shows in it, so read the
ratios, which are taken within one process.
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
import tempfile
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
PATHS = ("numpy", "numba")


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


def _child(case: str, kind: str, path: str) -> dict[str, Any]:
    """One fresh process's measurement (run with ``--child``)."""
    import numpy as np

    shape, samples = CASES[case]
    rng = np.random.default_rng(0)
    baselines = [rng.standard_normal(shape, dtype=np.float32) for _ in range(samples)]
    scale = np.float32(KINDS[kind])
    actuals = [b + rng.standard_normal(shape, dtype=np.float32) * scale if scale else b.copy() for b in baselines]

    def copy() -> float:
        start = time.perf_counter()
        copies = [(np.copy(a), np.copy(b)) for a, b in zip(actuals, baselines, strict=True)]
        took = time.perf_counter() - start
        del copies
        return took

    start = time.perf_counter()
    from monitor.compare.accumulate import Comparison  # a worker imports these when it starts
    from monitor.results import AppliedTolerance

    imported = time.perf_counter() - start

    def compare() -> tuple[float, Any]:
        start = time.perf_counter()
        tolerance = AppliedTolerance(atol=1e-5, rtol=1e-3, cosine_min=0.999, snr_min_db=40.0, max_mismatch_ratio=0.5)
        elements = {"y": baselines[0].size * samples}
        comparison = Comparison(["y"], ["y"], {"y": tolerance}, samples=samples, elements=elements)
        if path == "numba":
            comparison.accumulators["y"].fused = True
        for a, b in zip(actuals, baselines, strict=True):
            comparison.feed({"y": a}, {"y": b})
        (stats,) = comparison.finish()
        return time.perf_counter() - start, stats

    rss = _rss_mib()
    copy_fresh = copy()
    compare_fresh, stats = compare()
    rss_after = _rss_mib()
    copy_warm = copy()
    compare_warm, _ = compare()
    return {
        "import": imported,
        "copy": copy_fresh,
        "compare": compare_fresh,
        "copy_warm": copy_warm,
        "compare_warm": compare_warm,
        "rss_added": rss_after - rss,
        "bits": _digest(stats),
        "verdict": stats.verdict.value,
        "numba_loaded": "numba" in sys.modules,
    }


def _spawn(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, cwd=ROOT, env=env, check=False
    )
    if done.returncode:
        raise SystemExit(f"child {args} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


_STARTUP = {
    "import numpy + monitor.compare": "import numpy; import monitor.compare.accumulate",
    "import numba": "import numpy; import monitor.compare.accumulate; import numba",
    "import + compile (empty cache)": "from monitor.compare import fused; import numpy as np; fused.preload()",
    "import + load (cached)": "from monitor.compare import fused; import numpy as np; fused.preload()",
}
_STARTUP_CHILD = """
import os, time
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
base, start = rss(), time.perf_counter()
{body}
print('{{"s": %f, "rss": %f, "rss_total": %f}}' % (time.perf_counter() - start, rss() - base, rss()))
"""


def _startup(repeats: int, env: dict[str, str], cache: str) -> None:
    """Fresh-interpreter costs of numba: import, compile into an empty cache, load from the cache."""
    print(f"fresh interpreters, median of {repeats}; NUMBA_CACHE_DIR={cache}")
    print(f"{'step':<34} {'s':>7} {'RSS added MiB':>14} {'RSS MiB':>8}")
    for label, body in _STARTUP.items():
        runs = []
        for _ in range(repeats):
            if "empty cache" in label:
                subprocess.run(["rm", "-rf", cache], check=True)
                os.makedirs(cache)
            done = subprocess.run(
                [sys.executable, "-c", _STARTUP_CHILD.format(body=body)],
                env=env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            )
            runs.append(json.loads(done.stdout.splitlines()[-1]))
        seconds, added, total = (statistics.median(run[key] for run in runs) for key in ("s", "rss", "rss_total"))
        print(f"{label:<34} {seconds:>7.3f} {added:>14.1f} {total:>8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--startup", action="store_true", help="numba's import, compile, cached load and RSS")
    parser.add_argument("--child", nargs=3, metavar=("CASE", "KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(*args.child)))
        return
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
        if args.startup:
            _startup(args.repeats, env, cache)
            return
        if "numba" in args.paths:  # fill the cache once: the fused path's best case
            subprocess.run([sys.executable, "-m", "monitor.compare.fused"], env=env, cwd=ROOT, check=True)
        _table(args, env)


_ROW = "{:<16} {:>10} {:<7} {:<6} {:>7} {:>8} {:>9} {:>7} {:>10} {:>9}  {:<13} {}"


def _table(args: argparse.Namespace, env: dict[str, str]) -> None:
    print(f"median of {args.repeats} fresh processes per row (interleaved); times in ms; goal: compare <= 3x copy")
    head = ("case", "elements", "kind", "path", "import", "copy", "compare", "ratio", "warm ratio", "RSS+ MiB", "bits")
    print(_ROW.format(*head, "verdict"))
    for case in args.cases:
        shape, samples = CASES[case]
        elements = math.prod(shape) * samples
        for kind in args.kinds:
            runs: dict[str, list[dict[str, Any]]] = {path: [] for path in args.paths}
            for _ in range(args.repeats):
                for path in args.paths:
                    runs[path].append(_spawn(["--child", case, kind, path], env))
            medians: dict[str, float] = {}
            for path in args.paths:
                got = runs[path]
                import_ms, copy_ms, compare_ms = (
                    statistics.median(r[key] for r in got) * 1e3 for key in ("import", "copy", "compare")
                )
                ratio = statistics.median(r["compare"] / r["copy"] for r in got)
                warm = statistics.median(r["compare_warm"] / r["copy_warm"] for r in got)
                rss = statistics.median(r["rss_added"] for r in got)
                bits = "same" if len({r["bits"] for p in args.paths for r in runs[p]}) == 1 else got[0]["bits"]
                medians[path] = compare_ms
                row = (case, f"{elements:,}", kind, path, f"{import_ms:.1f}", f"{copy_ms:.2f}", f"{compare_ms:.2f}")
                row += (f"{ratio:.2f}", f"{warm:.2f}", f"{rss:.1f}", bits, got[0]["verdict"])
                print(_ROW.format(*row), flush=True)
            if len(medians) == 2:
                print(f"{'':<16} {'':>10} {kind:<7} numba/numpy (fresh compare): {medians['numba'] / medians['numpy']:.2f}")


if __name__ == "__main__":
    main()
