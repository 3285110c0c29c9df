"""More models than kept workers, all checked every interval: what a check costs under each eviction rule.

Run:  .venv/bin/python bench/bench_warm_pool.py [--models 48] [--workers 16] [--cycles 3]

``--models`` models are checked in turn, ``--cycles`` times over (the schedule of a daemon whose
models share one interval), through a ``WarmPool`` of ``--workers`` (``daemon.warm_workers``). The
job is trivial (``tests/isolate_targets.warm_answer``): what is timed is the worker machinery.

- lru:  the old rule, ``evict_idle_s=0``: a full pool stops its least recently used worker and
        starts one for the model asking. On a cycle longer than the pool, every check does so.
- idle: the rule now (``EVICT_IDLE_S``): only a worker idle that long makes room; otherwise the
        check runs in a worker started and stopped for it (``warm.ask_once``, inside ``WarmPool.run``).

Both in one run, interleaved per cycle after a first cycle that fills the pools; prints the median
per-check time of each, the ratio, and how many workers each started. Absolute times are noisy here.

Measured (2 shared cores, 2026-12-01, defaults)::

    see the README's benchmark table
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.daemon import warm
from tests import isolate_targets as targets


def one_cycle(pool: warm.WarmPool, names: list[str]) -> tuple[float, int]:
    """Seconds per check over one pass of every model, and the workers started meanwhile."""
    before = set(pool.pids().values())
    began = time.perf_counter()
    started: set[int] = set()
    for name in names:
        plan = targets.Plan(name)
        outcome = pool.run(targets.warm_answer, plan, timeout_s=30, memory_limit_bytes=None)
        assert outcome.kind == "ok", outcome.detail
        started |= set(pool.pids().values()) - before
    return (time.perf_counter() - began) / len(names), len(started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=int, default=48)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--cycles", type=int, default=3)
    args = parser.parse_args()
    names = [f"model-{i:03d}" for i in range(args.models)]
    pools = {"lru": warm.WarmPool(limit=args.workers, evict_idle_s=0), "idle": warm.WarmPool(limit=args.workers)}
    per_check: dict[str, list[float]] = {k: [] for k in pools}
    spawned: dict[str, int] = dict.fromkeys(pools, 0)
    try:
        for pool in pools.values():
            one_cycle(pool, names)  # fills the pool
        for _ in range(args.cycles):
            for label, pool in pools.items():
                seconds, new = one_cycle(pool, names)
                per_check[label].append(seconds)
                spawned[label] += new
    finally:
        for pool in pools.values():
            pool.close(wait_s=1)
    lru, idle = (statistics.median(per_check[k]) for k in ("lru", "idle"))
    print(f"{args.models} models, {args.workers} warm workers, {args.cycles} cycles after the first (medians)")
    print(f"lru  (evict the least recently used): {lru * 1000:8.1f} ms a check, {spawned['lru']} workers started")
    print(f"idle (evict only after EVICT_IDLE_S): {idle * 1000:8.1f} ms a check, {spawned['idle']} workers started")
    print(f"lru / idle: {lru / idle:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
