"""Issue 29, round 5: warm checks through two warm pools in one process, with and without this round's cuts.

Run:  .venv/bin/python bench/bench_warm_round5.py [--models a,b] [--checks 60] [--samples 16] [--gap 0.2]

As ``bench_warm_round4.py``: both sides on one workspace per model, alternating check by check with a
bare ``sess.run`` loop of the same samples, each after the same idle ``--gap`` (separate runs drift by
more than these cuts are worth). The sides:

- before: the comparison fed and finished at every check (``compare/memo.py`` given a zero byte budget,
  so it never holds a record), the result sent as ``CheckResult.to_dict()`` and read back with
  ``from_dict``, every request pickled afresh, the worker's liveness asked with ``is_alive`` and its
  answer awaited with ``isolate.receive`` (what 88c7cc0 did);
- after:  the pool and workers as they are now (a comparison answered from the last one while every
  output keeps its bits, the ``CheckResult`` pickled as it is, one request's bytes kept per job, one
  ``poll`` over the pipe and the worker's sentinel).

Printed per model: medians of bare, of each side's whole check as the daemon waits for it (pipe both
ways, the check, the result decoded) and of its recorded duration (``finished_at - started_at``,
inside the worker), what each side adds to bare, after/before, whether the after side's comparison
was answered from its memo, and whether every check's verdict and every output's metrics are
identical between the sides.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_warm  # noqa: E402

from monitor.check import run_check  # noqa: E402
from monitor.compare import memo  # noqa: E402
from monitor.config.plan import CheckPlan  # noqa: E402
from monitor.daemon import child, isolate, warm, warm_worker  # noqa: E402
from monitor.results import CheckResult  # noqa: E402
from monitor.runtime.kept import ModelSource  # noqa: E402


def check_job_before(plan: CheckPlan, models: ModelSource) -> dict[str, Any]:
    """Before, inside the worker: the comparison in full at every check, the result as a dict."""
    models.kept["comparison"] = memo.Memo(budget_bytes=0)  # never holds a record: never answers
    return {"result": run_check(plan, models=models).to_dict()}


class _WorkerBefore(warm._Worker):
    def alive(self) -> bool:
        return bool(self.process.is_alive())


class PoolBefore(warm.WarmPool):
    """Before, in the parent: every request pickled, ``is_alive``, ``isolate.receive``."""

    def _ask(self, worker: Any, job: Any, plan: Any, timeout_s: float, memory_limit_bytes: int | None) -> Any:
        began = time.monotonic()
        worker.conn.send((job, plan if worker.checks == 0 else None))
        message = isolate.receive(worker.process, worker.conn, began + timeout_s)
        if not isinstance(message, tuple) or message[0] != "ok":
            raise RuntimeError(f"the before side's worker answered {message!r}")
        worker.checks += 1
        worker.last_used = self._clock()
        payload = message[1]
        payload.pop("worker", None)
        return isolate.Outcome("ok", payload, "", time.monotonic() - began)

    def _spawn(self, name: str, key: tuple[Any, ...], memory_limit_bytes: int | None) -> Any:
        ctx = isolate.context()
        mine, theirs = ctx.Pipe(duplex=True)
        process = ctx.Process(  # type: ignore[attr-defined]
            target=warm_worker.serve,
            args=(theirs, os.getpid(), memory_limit_bytes, self.rehash_every),
            daemon=True,
        )
        process.start()
        theirs.close()
        return _WorkerBefore(name, key, process, mine, last_used=self._clock())


def before_check(plan: CheckPlan, pool: PoolBefore) -> CheckResult:
    outcome = pool.run(check_job_before, plan, timeout_s=plan.timeout_s + child.GRACE_S, memory_limit_bytes=None)
    assert outcome is not None and outcome.value is not None
    return CheckResult.from_dict(outcome.value["result"])


def after_check(plan: CheckPlan, pool: warm.WarmPool) -> CheckResult:
    return child.run_isolated(plan, pool=pool)[0]


def reused_comparison(result: CheckResult) -> bool:
    return bool((result.details.get("warm") or {}).get("comparison_reused"))


def main() -> int:
    args, chosen = bench_warm.round_arguments(__doc__ or "")
    scratch = Path(tempfile.mkdtemp(prefix="onnxmon-bench-round5-"))
    before_pool, after_pool = PoolBefore(limit=len(chosen) + 1), warm.WarmPool(limit=len(chosen) + 1)
    differ = 0
    print(f"{len(chosen)} models, {args.samples} samples, {args.checks} checks per side, alternating (medians)")
    print(
        f"{'model':<22}{'bare ms':>9}{'check before':>14}{'after':>8}{'ratio':>8}{'added before':>14}{'after':>8}"
        f"{'recorded before':>17}{'after':>8}{'ratio':>8}{'added before':>14}{'after':>8}{'memo':>6}"
    )
    try:
        for model in chosen:
            plan = bench_warm.workspace(model, scratch / model.name, args.samples)
            bare = bench_warm.bare_loop(plan)
            sides = {
                "before": lambda p=plan: before_check(p, before_pool),
                "after": lambda p=plan: after_check(p, after_pool),
            }
            measured = bench_warm.side_by_side(sides, bare, rounds=args.checks, gap=args.gap)
            t, r = measured.medians_ms()
            same = measured.same("before", "after")
            reused = sum(1 for got in measured.results if reused_comparison(got["after"]))
            differ += 0 if same else 1
            print(
                f"{model.name:<22}{t['bare']:>9.2f}{t['before']:>14.2f}{t['after']:>8.2f}"
                f"{t['after'] / t['before']:>7.3f}x{t['before'] - t['bare']:>+14.2f}{t['after'] - t['bare']:>+8.2f}"
                f"{r['before']:>17.2f}{r['after']:>8.2f}{r['after'] / r['before']:>7.3f}x"
                f"{r['before'] - t['bare']:>+14.2f}{r['after'] - t['bare']:>+8.2f}{reused:>4}/{args.checks}"
                f"  {'same verdicts and metrics' if same else 'NUMBERS DIFFER'}"
            )
    finally:
        before_pool.close()
        after_pool.close()
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"models whose checks differ between the sides: {differ}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
