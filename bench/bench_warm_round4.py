"""Issue 29, round 4: warm checks through two warm pools in one process, with and without this round's cuts.

Run:  .venv/bin/python bench/bench_warm_round4.py [--models a,b] [--checks 60] [--samples 16] [--gap 0.2]

Separate runs of ``bench_warm.py`` drift by more than these cuts are worth (the same tree's
sk-logreg-nozipmap measured 7.1 and 8.5 ms a warm check in two runs a minute apart), so both sides
run here, on one workspace per model, alternating check by check with a bare ``sess.run`` loop of
the same samples, each after the same idle ``--gap`` (the daemon's checks come after an idle gap):

- before: a ``WarmPool`` whose parent sends the plan with every check, and whose workers parse
  ``/proc/self/status`` for their memory figures, check every sample's inputs against the signature
  in full, list a benchmark set's versions afresh at both of a check's opens and build the lint cache's
  directory path at every check (what 29c13d5 did);
- after:  the pool and workers as they are now.

Printed per model: medians of bare, of each side's whole check as the daemon waits for it (pipe
both ways, the check, the result decoded) and of its recorded duration (``finished_at -
started_at``, inside the worker), after/before for both, and whether every check's verdict and
every output's metrics are identical between the sides.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_warm  # noqa: E402

from monitor.daemon import isolate, warm, warm_worker  # noqa: E402
from monitor.exportcheck import lint_warnings  # noqa: E402
from monitor.files import stamped  # noqa: E402
from monitor.files.signature import check_inputs_fit  # noqa: E402
from monitor.runtime import session  # noqa: E402


def memory_before(status: Path = Path("/proc/self/status")) -> dict[str, int]:
    """Before: the memory figures parsed out of ``/proc/self/status``."""
    figures = {}
    with contextlib.suppress(OSError):
        for line in status.read_text().splitlines():
            field_name, _, value = line.partition(":")
            if field_name in ("VmSize", "VmRSS"):
                key = "address_space_bytes" if field_name == "VmSize" else "rss_bytes"
                figures[key] = int(value.split()[0]) * 1024
    return figures


def check_inputs_before(self: session.Session, feeds: Any, *, where: str = "inputs") -> None:
    """Before: every sample's inputs checked against the signature in full."""
    check_inputs_fit(feeds, self._signature, where=where)


def cache_dir_before(environ: Any = None) -> Path:
    """Before: the lint cache directory built afresh at every check."""
    env = os.environ if environ is None else environ
    state = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "onnxmon" / "lint"


def serve_before(conn: Any, owner: int, memory_limit_bytes: int | None, rehash_every: int) -> None:
    """A worker as before: its own process, so patching its modules touches no other worker."""
    warm_worker.memory = memory_before  # type: ignore[assignment]
    lint_warnings.cache_dir = cache_dir_before
    session.Session.check_inputs = check_inputs_before  # type: ignore[method-assign]
    kept_parsed = stamped.KeptFiles.parsed

    def parsed(self: stamped.KeptFiles, path: Path, parse: Callable[[], Any], *, kind: str = "parsed") -> Any:
        return parse() if kind == "versions" else kept_parsed(self, path, parse, kind=kind)

    stamped.KeptFiles.parsed = parsed  # type: ignore[method-assign]
    warm_worker.serve(conn, owner, memory_limit_bytes, rehash_every)


class PoolBefore(warm.WarmPool):
    """Before: the plan is pickled and sent with every check, and the workers are ``serve_before``'s."""

    def _ask(self, worker: Any, job: Any, plan: Any, timeout_s: float, memory_limit_bytes: int | None) -> Any:
        checks, worker.checks = worker.checks, 0  # 0: "the worker has no plan yet", so it is sent
        try:
            return super()._ask(worker, job, plan, timeout_s, memory_limit_bytes)
        finally:
            worker.checks = checks + (1 if worker.checks == 1 else 0)

    def _spawn(self, name: str, key: tuple[Any, ...], memory_limit_bytes: int | None) -> Any:
        ctx = isolate.context()
        mine, theirs = ctx.Pipe(duplex=True)
        process = ctx.Process(  # type: ignore[attr-defined]
            target=serve_before, args=(theirs, os.getpid(), memory_limit_bytes, self.rehash_every), daemon=True
        )
        process.start()
        theirs.close()
        return warm._Worker(name, key, process, mine, last_used=self._clock())


def main() -> int:
    args, chosen = bench_warm.round_arguments(__doc__ or "")
    scratch = Path(tempfile.mkdtemp(prefix="onnxmon-bench-round4-"))
    pools = {"before": PoolBefore(limit=len(chosen) + 1), "after": warm.WarmPool(limit=len(chosen) + 1)}
    differ = 0
    print(f"{len(chosen)} models, {args.samples} samples, {args.checks} checks per side, alternating (medians)")
    print(
        f"{'model':<22}{'bare ms':>9}{'check before':>14}{'after':>8}{'ratio':>8}"
        f"{'recorded before':>17}{'after':>8}{'ratio':>8}"
    )
    try:
        for model in chosen:
            plan = bench_warm.workspace(model, scratch / model.name, args.samples)
            bare = bench_warm.bare_loop(plan)
            sides = {
                side: functools.partial(bench_warm.run_isolated_result, plan, pool) for side, pool in pools.items()
            }
            measured = bench_warm.side_by_side(sides, bare, rounds=args.checks, gap=args.gap)
            t, r = measured.medians_ms()
            same = measured.same("before", "after")
            differ += 0 if same else 1
            print(
                f"{model.name:<22}{t['bare']:>9.2f}{t['before']:>14.2f}{t['after']:>8.2f}"
                f"{t['after'] / t['before']:>7.3f}x{r['before']:>17.2f}{r['after']:>8.2f}"
                f"{r['after'] / r['before']:>7.3f}x  {'same verdicts and metrics' if same else 'NUMBERS DIFFER'}"
            )
    finally:
        for pool in pools.values():
            pool.close()
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"models whose checks differ between the sides: {differ}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
