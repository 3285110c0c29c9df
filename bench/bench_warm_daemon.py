"""A real ``onnxmon serve`` with kept check workers: each check's recorded duration against bare inference.

Run:  .venv/bin/python bench/bench_warm_daemon.py [--models a,b] [--samples 16] [--checks 12] [--interval 3s]

For each corpus model (``ONNXMON_CORPUS_DIR`` as for the tests; default: one model whose inference
takes >= 10 ms and one that takes < 1 ms), a throwaway workspace as ``bench_worker.py`` makes it (a
copy of the file, a generated set of ``--samples``, a captured baseline), then ``onnxmon serve`` in
its own process, exactly as production runs it (``daemon.worker: warm``, SQLite store, the model
every ``--interval``). Measured from the outside, side by side in one run:

- check: the run's ``duration_s`` as the daemon recorded it in its store (the check inside the
  kept check worker, from its start to its result: files, replay, comparison, snapshot, lint), for
  every steady-state run (the first two, which start the worker and build its session, are left out);
- bare:  ``for feeds in samples: sess.run(None, feeds)`` (``repeats`` times each) in a plain
  ``InferenceSession`` of this process, built with the check's own session options, run once after
  each recorded check while the daemon waits for its next tick (a pause first, so neither side's
  spinning ORT threads sit on the other's cores).

Printed per model: medians of both, their ratio and difference. Goal: check <= max(bare + 50 ms,
1.2 x bare) (``bench_worker.py`` measures the same goal as the daemon waits for a check).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_worker  # noqa: E402

from monitor.config.plan import CheckPlan  # noqa: E402
from tests import realmodels  # noqa: E402
from tests.workspace import Workspace  # noqa: E402

BIN = Path(sys.executable).parent
SKIPPED = 2  # the first runs: the worker starts, builds its session
PAUSE_S = 0.2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="torch-cnn-dynamo,sk-logreg-nozipmap")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--checks", type=int, default=12, help="steady-state runs per model")
    parser.add_argument("--interval", default="3s")
    parser.add_argument("--timeout", default="2s", help="the check's timeout (shorter than the interval)")
    args = parser.parse_args()
    chosen = [m for m in realmodels.corpus_models() if m.name in args.models.split(",")]
    if not chosen:
        raise SystemExit(f"none of {args.models} is in the corpus (scripts/fetch-models)")
    print(f"{len(chosen)} models, {args.samples} samples each, {args.checks} steady-state checks (medians)")
    print(f"{'model':<26}{'bare ms':>9}{'check ms':>10}{'check/bare':>11}{'added ms':>10}  goal")
    met = True
    for model in chosen:
        scratch = Path(tempfile.mkdtemp(prefix="onnxmon-bench-warm-daemon-"))
        try:
            plan, ws = _workspace(model, scratch, args.samples, args.interval, args.timeout)
            bare, checks = _measure(plan, ws, args.checks)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        bare_ms, check_ms = statistics.median(bare) * 1000, statistics.median(checks) * 1000
        limit = max(bare_ms + bench_worker.OVERHEAD_MS, bench_worker.OVERHEAD_RATIO * bare_ms)
        goal, ok = f"<= {limit:.1f} ms", check_ms <= limit
        met = met and ok
        print(
            f"{model.name:<26}{bare_ms:>9.2f}{check_ms:>10.2f}{check_ms / bare_ms:>10.2f}x{check_ms - bare_ms:>10.2f}"
            f"  {goal}: {'met' if ok else 'NOT met'}"
        )
    return 0 if met else 1


def _workspace(
    model: realmodels.CorpusModel, root: Path, samples: int, interval: str, timeout: str
) -> tuple[CheckPlan, Workspace]:
    """``bench_worker.workspace``'s files, with the schedule and the kept worker of a daemon."""
    return bench_worker.corpus_workspace(
        model,
        root,
        samples,
        daemon={"worker": "warm", "startup_spread": 0},
        schedule={"interval": interval},
        timeout=timeout,
    )


def _measure(plan: CheckPlan, ws: Workspace, checks: int) -> tuple[list[float], list[float]]:
    bare = bench_worker.bare_loop(plan)
    bare()  # warm-up
    db = ws.root / "onnxmon.db"
    log_path = ws.root / "serve.log"
    times: list[float] = []
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [str(BIN / "onnxmon"), "serve", "-c", str(ws.config_file), "--port", str(_free_port())],
            cwd=ws.root,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            seen = 0
            deadline = time.monotonic() + 120 + 30 * (checks + SKIPPED)
            while seen < checks + SKIPPED:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"daemon exited or stalled:\n{log_path.read_text()[-3000:]}")
                now = _runs(db)
                if now > seen:
                    seen = now
                    if seen > SKIPPED:  # between two ticks: the daemon is idle, the cores are ours
                        time.sleep(PAUSE_S)
                        began = time.perf_counter()
                        bare()
                        times.append(time.perf_counter() - began)
                time.sleep(0.02)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(120)
    durations, verdicts = _durations(db)
    if set(verdicts) != {"pass"}:
        raise SystemExit(f"runs that did not pass: {verdicts}\n{log_path.read_text()[-3000:]}")
    return times, durations[SKIPPED : SKIPPED + checks]


def _runs(db: Path) -> int:
    with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
        return int(c.execute("SELECT count(*) FROM runs").fetchone()[0])
    return 0


def _durations(db: Path) -> tuple[list[float], list[str]]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
        rows = connection.execute("SELECT duration_s, verdict FROM runs ORDER BY id").fetchall()
    return [float(r[0]) for r in rows], [str(r[1]) for r in rows]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    sys.exit(main())
