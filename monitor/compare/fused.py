"""The fused metric kernel: every float metric of the suite in one read of both chunks (numba).

``stream.py``'s numpy pass is the reference implementation: about twenty numpy passes over each
chunk. This kernel computes the same metrics in one loop over the two chunks, with the same
results **to the bit** (``tests/test_compare_fused.py`` holds the table and the property test):

* sums follow the one order written in ``formulas.py`` (lanes of ``LANES``, folded by halving,
  chunk totals in chunk order), which a vectorized loop can follow exactly;
* maxima and counts are exact in any order, the ULP distance is integer arithmetic, and the p99
  candidates (errors above the worker's proven floor, ``p99.Largest``) are the same set;
* every division the numpy pass makes (``|d| / (atol + rtol*|b|)``, ``|d| / max(|b|, floor)``)
  is made for each element, so no skipping rule has to be proven twice.

A bitwise-equal chunk (found by comparing the bits, which stops at the first difference) only
sums its squares. Otherwise each block of ``LANES`` elements is one branch-free vectorizable loop (a NaN/Inf position is
zeroed on both sides, as the position rule says) followed by a store of the p99 candidates and,
only for a block that held a NaN or Inf, a scalar pass counting them. float16 chunks are cast to
float32 first (exact; numba has no float16 arithmetic) with the ULPs counted on their own bits.

When it runs: a float output compared in its own dtype (float16/32/64, native byte order) with
non-negative finite atol/rtol, and at least ``MIN_ELEMENTS_COLD`` elements while numba is not loaded
in the process, ``MIN_ELEMENTS_LOADED`` once it is (importing numba and loading the cached kernel
cost a fresh check child more than the numpy pass of a smaller output). Otherwise, or when
numba cannot be imported (or ``NUMBA_DISABLE_JIT`` is set), the numpy pass runs and one log line
says why; both give the same numbers, so which one ran never shows in a result.

Compiling costs seconds; the check runs in a fresh child per check, so the machine code is cached
on disk (numba ``cache=True``): in ``NUMBA_CACHE_DIR`` when set, else
``$XDG_CACHE_HOME/onnxmon/numba`` (default ``~/.cache/onnxmon/numba``), which works when
site-packages is read-only. A cache directory that cannot be written costs the compile per process,
never the check (logged once). ``bench/bench_compare.py`` measures the compile, the cached load and
the kernel against one copy of both tensors.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from monitor.compare.formulas import LANES

log = logging.getLogger(__name__)

# Below these sizes the numpy pass is taken: importing numba and loading the cached kernel cost a
# fresh process ~0.3-1 s (``bench/bench_compare.py --startup``), which a 32M-element output's savings
# repay; once loaded (a long-lived or warm worker, ``preload``), anything past one chunk gains.
MIN_ELEMENTS_COLD = 1 << 25
MIN_ELEMENTS_LOADED = 1 << 16
_FLOAT_BITS = {np.dtype(np.float16): np.int16, np.dtype(np.float32): np.int32, np.dtype(np.float64): np.int64}
_lock = threading.Lock()
_kernels: dict[str, Any] = {}  # "float32:int32" (values:bits) -> numba dispatcher
_state: dict[str, Any] = {}  # "numba": the module or None, "why": why not


def cache_dir() -> Path:
    """Where compiled kernels are kept when ``NUMBA_CACHE_DIR`` is not set."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "onnxmon" / "numba"


def eligible(dtype: np.dtype[Any], atol: float, rtol: float) -> bool:
    """Whether the kernel computes exactly this stream's metrics (float dtype, native, sane tolerance)."""
    finite = 0.0 <= atol < math.inf and 0.0 <= rtol < math.inf
    return dtype in _FLOAT_BITS and dtype.isnative and finite


def usable(
    dtype: np.dtype[Any],
    atol: float,
    rtol: float,
    elements: int,
    *,
    loaded: bool | None = None,
    cached: bool | None = None,
) -> bool:
    """Whether a stream of ``elements`` should run fused: eligible, and big enough to repay loading numba.

    A process that has not loaded the kernel takes it only from the disk cache: compiling costs
    seconds to a minute on a busy machine, which a check child's timeout may not have. The cache
    is filled by ``python -m monitor.compare.fused`` (an image build step or an init container), by
    ``preload()`` in a long-lived process, or by any ``fused=True`` comparison.
    """
    if not eligible(dtype, atol, rtol):
        return False
    if _state.get("numba") is not None if loaded is None else loaded:
        return elements >= MIN_ELEMENTS_LOADED
    return elements >= MIN_ELEMENTS_COLD and (is_cached() if cached is None else cached)


def is_cached() -> bool:
    """Whether the disk cache holds this source's compiled kernel (numba's index file for it)."""
    root = Path(os.environ.get("NUMBA_CACHE_DIR") or cache_dir())
    python = f"py{sys.version_info[0]}{sys.version_info[1]}"
    index = f"fused._chunk_metrics-{_chunk_metrics.__code__.co_firstlineno}.{python}.nbi"
    try:
        return any(root.glob(f"*/{index}"))
    except OSError:
        return False


def preload() -> bool:
    """Import numba and load (or compile) every kernel now: for a long-lived process, before its first check."""
    return all(kernel(np.dtype(name)) is not None for name in ("float16", "float32", "float64"))


def kernel(dtype: np.dtype[Any]) -> Any | None:
    """The compiled kernel for chunks of float ``dtype``, or None (numba unavailable, said once)."""
    compute = "float64" if dtype == np.float64 else "float32"
    bits = np.dtype(_FLOAT_BITS[np.dtype(dtype)]).name
    with _lock:  # one compile (or cache load) per process, whichever worker thread asks first
        numba = _numba()
        if numba is None:
            return None
        key = f"{compute}:{bits}"
        if key not in _kernels:
            _kernels[key] = _compile(numba, compute, bits)
        return _kernels[key]


def _numba() -> Any | None:
    if "numba" in _state:
        return _state["numba"]
    try:
        import numba
    except Exception as exc:  # not installed, or a broken llvmlite: the numpy pass is the same, only slower
        _state.update(numba=None, why=f"numba unavailable ({exc}); metrics use the numpy pass")
        log.info(_state["why"])
        return None
    if getattr(numba.config, "DISABLE_JIT", False):
        _state.update(numba=None, why="NUMBA_DISABLE_JIT is set; metrics use the numpy pass")
        log.info(_state["why"])
        return None
    _state["cache"] = _cache(numba)
    _state["numba"] = numba
    return numba


def _cache(numba: Any) -> bool:
    """Point numba's cache at a writable directory; False (said once) when there is none."""
    if not os.environ.get("NUMBA_CACHE_DIR"):
        numba.config.CACHE_DIR = str(cache_dir())
    path = Path(numba.config.CACHE_DIR)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        log.warning("numba cache %s not writable (%s): the metric kernel compiles in every process", path, exc)
        return False
    return True


def _compile(numba: Any, compute: str, bits: str) -> Any:
    """One dispatcher per (values, bits) dtype pair, typed for read-only inputs (a writable array converts)."""
    types = numba.types
    values = types.Array(getattr(types, compute), 1, "C", readonly=True)
    ints = types.Array(getattr(types, bits), 1, "C", readonly=True)
    f64, i64, u64 = (types.Array(kind, 1, "C") for kind in (types.float64, types.int64, types.uint64))
    signature = types.intp(values, values, ints, ints, f64, f64, types.intp, f64, i64, u64)
    jit = numba.njit([signature], nogil=True, cache=_state["cache"], error_model="numpy", boundscheck=False)
    return jit(_chunk_metrics)


def _chunk_metrics(a: Any, b: Any, bits_a: Any, bits_b: Any, params: Any, cand: Any, cand_at: int, out_f: Any,
                   out_i: Any, out_u: Any) -> int:  # fmt: skip
    """One chunk: ``out_f`` = 5 folded sums + 3 maxima, ``out_i`` = 8 counts, ``out_u`` = max ULP.

    ``params`` = (atol, rtol, floor of the relative error, p99 floor); errors above the p99 floor
    are written to ``cand`` from ``cand_at`` on; returns how many. Compiled by numba; as plain
    Python it is the same algorithm, only slow.
    """
    atol, rtol, floor, p99_floor = params[0], params[1], params[2], params[3]
    n = a.size
    magnitude = np.uint64((1 << (bits_a.itemsize * 8 - 1)) - 1)
    acc = np.zeros((9, LANES))  # sums a², b², d², ab, |d|; max |d|, rel, ratio; |d| of the block
    ulp = np.zeros(LANES, np.uint64)
    counts = np.zeros((2, LANES), np.int64)  # elements breaking atol + rtol*|b|, differing bits
    position = np.zeros(5, np.int64)  # nan, nan mismatch, inf, inf mismatch, other non-finite mismatch
    at = cand_at
    nonfinite = 0
    equal = True  # a bitwise-equal chunk (the common case) only adds its squares
    for i in range(n):
        if bits_a[i] != bits_b[i]:
            equal = False
            break
    for start in range(0 if equal else n, n, LANES):
        m = min(LANES, n - start)
        block_a = a[start : start + m]
        bad_block = 0
        for j in range(m):
            xe: Any = np.float64(block_a[j])
            bad = (xe - xe) != 0.0
            bad_block += bad
            xe = 0.0 if bad else xe
            acc[0, j] += xe * xe
        if bad_block:
            nonfinite += bad_block
            for j in range(m):
                xe = np.float64(block_a[j])
                position[0] += xe != xe
                position[2] += (xe - xe != 0.0) and xe == xe
    for row in (1, 3):
        for j in range(LANES if equal else 0):
            acc[row, j] = acc[0, j]  # b = a: the same squares, the same order
    for start in range(n if equal else 0, n, LANES):
        m = min(LANES, n - start)
        block_a, block_b = a[start : start + m], b[start : start + m]
        int_a, int_b = bits_a[start : start + m], bits_b[start : start + m]
        bad_block = 0
        for j in range(m):
            xa: Any = np.float64(block_a[j])  # local annotations are never evaluated: numba ignores them
            xb: Any = np.float64(block_b[j])
            ua: Any = np.int64(int_a[j])
            ub: Any = np.int64(int_b[j])
            counts[1, j] += ua != ub
            bad = ((xa - xa) != 0.0) | ((xb - xb) != 0.0)  # NaN or Inf on either side
            bad_block += bad
            xa, xb = (0.0 if bad else xa), (0.0 if bad else xb)
            ua, ub = (0 if bad else ua), (0 if bad else ub)
            d = xa - xb
            ad = abs(d)
            acc[8, j] = ad
            acc[0, j] += xa * xa
            acc[1, j] += xb * xb
            acc[2, j] += d * d
            acc[3, j] += xa * xb
            acc[4, j] += ad
            acc[5, j] = ad if ad > acc[5, j] else acc[5, j]
            abs_b = abs(xb)
            limit = abs_b * rtol + atol
            counts[0, j] += ad > limit
            ratio = ad / limit  # 0/0 is NaN, never above the running max
            acc[7, j] = ratio if ratio > acc[7, j] else acc[7, j]
            rel = ad / (abs_b if abs_b > floor else floor)
            acc[6, j] = rel if rel > acc[6, j] else acc[6, j]
            same_sign = (ua ^ ub) >= 0  # same sign: ordered like the bits; else |a| + |b| in ULPs
            near = np.uint64(ua - ub if ua > ub else ub - ua)
            across = (np.uint64(ua) & magnitude) + (np.uint64(ub) & magnitude)
            distance = near if same_sign else across
            ulp[j] = distance if distance > ulp[j] else ulp[j]
        for j in range(m):  # branch-free: always store, advance only past a candidate
            cand[at] = acc[8, j]
            at += acc[8, j] > p99_floor
        if bad_block:
            nonfinite += bad_block
            for j in range(m):
                xa, xb = np.float64(block_a[j]), np.float64(block_b[j])
                nan_a, nan_b = xa != xa, xb != xb
                inf_a, inf_b = (xa - xa != 0.0) and not nan_a, (xb - xb != 0.0) and not nan_b
                same = xa == xb
                position[0] += nan_a
                position[1] += nan_a != nan_b
                position[2] += inf_a
                position[3] += (inf_a or inf_b) and not same
                position[4] += (nan_a or nan_b or inf_a or inf_b) and not same and not (nan_a and nan_b)
    width = LANES // 2
    while width >= 1:  # formulas.fold_lanes: lane j plus lane j + width
        for row in range(5):
            for j in range(width):
                acc[row, j] = acc[row, j] + acc[row, j + width]
        width //= 2
    for row in range(5):
        out_f[row] = acc[row, 0]
    for row in range(5, 8):
        out_f[row] = acc[row].max()
    out_i[0] = n - nonfinite
    out_i[1] = counts[0].sum()
    out_i[2] = position[4]
    out_i[3] = position[0]
    out_i[4] = position[1]
    out_i[5] = position[2]
    out_i[6] = position[3]
    out_i[7] = counts[1].sum()
    out_u[0] = ulp.max()
    return at - cand_at


if __name__ == "__main__":  # fill the disk cache: `python -m monitor.compare.fused`
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    raise SystemExit(0 if preload() else 1)
