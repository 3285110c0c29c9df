"""Benchmark: a diagnosis's wall time against the time its experiments spent inside their children.

The goal: a diagnosis's wall time ≤ 1.5× the time its experiments spend inside their isolated children
(baseline and benchmark-set load, session build, replay, comparison: what ``measure`` times), on each
scenario of ``tests/diagnose_scenarios.py`` (real corpus models, one real cause each).

Each scenario is diagnosed in a fresh worker process of this script, per mode: ``shared`` (the daemon's
path: the knobs that ``knobs.may_share_a_child`` replayed one after another in one child) and, with
``--modes apart,shared``, ``apart`` (a child per experiment) side by side. Each worker starts its
forkserver first and reports that start apart (a daemon's is started once, at its first check;
``onnxmon diagnose`` pays it once per command), builds the scenario, runs the check, then the diagnosis
with the daemon's isolation (``daemon.diagnosis.isolated``). Printed per scenario and mode: the
diagnosis's wall time, the time inside the children, their ratio, the number of experiments, whether the
top cause is the scenario's truth, and whether the ranking (causes in order) and every experiment's ratio
equal the first mode's. Say the load with the numbers (``uptime``).

Run: ``.venv/bin/python bench/bench_diagnose.py`` (``--scenarios 0,1`` for some, ``--modes apart,shared``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monitor.check import run_check  # noqa: E402
from monitor.daemon import isolate  # noqa: E402
from monitor.daemon.diagnosis import isolated  # noqa: E402
from monitor.diagnose.engine import diagnose  # noqa: E402
from tests import isolate_targets  # noqa: E402
from tests.diagnose_scenarios import SCENARIOS  # noqa: E402
from tests.workspace import Workspace  # noqa: E402

MODES = ("apart", "shared")


def worker(index: int, mode: str) -> dict[str, Any]:
    """One scenario diagnosed in this process, its experiments sharing children or not (``mode``); plain data."""
    logging.disable(logging.WARNING)  # the quantizer's pre-processing advice
    began = time.perf_counter()
    isolate.run(isolate_targets.answer, 1, timeout_s=300)
    forkserver_s = time.perf_counter() - began
    scenario = SCENARIOS[index]
    root = Path(tempfile.mkdtemp(prefix="onnxmon-bench-diagnose-"))
    cwd = os.getcwd()
    try:
        os.chdir(root)
        plan, _ = scenario.build(Workspace(root))
        began = time.perf_counter()
        result = run_check(plan)
        check_s = time.perf_counter() - began
        began = time.perf_counter()
        diagnosis = diagnose(plan, result, isolate=isolated, share=mode == "shared")
        wall_s = time.perf_counter() - began
    finally:
        os.chdir(cwd)
        shutil.rmtree(root, ignore_errors=True)
    return {
        "top": diagnosis.top.cause if diagnosis.top else "-",
        "causes": [h.cause for h in diagnosis.hypotheses],
        "ratios": [[e.knob, e.value, e.error_ratio] for e in diagnosis.experiments],
        "wall_s": wall_s,
        "inside_s": sum(e.seconds for e in diagnosis.experiments),  # measured inside each child
        "experiments": len(diagnosis.experiments),
        "check_s": check_s,
        "forkserver_s": forkserver_s,
    }


def _run_worker(index: int, mode: str) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(index), mode]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise SystemExit(f"worker {index} {mode} failed:\n{done.stderr[-3000:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--worker", nargs=2, metavar=("INDEX", "MODE"), help=argparse.SUPPRESS)
    parser.add_argument("--scenarios", default=",".join(str(i) for i in range(len(SCENARIOS))))
    parser.add_argument("--modes", default="shared", help="some of apart,shared")
    options = parser.parse_args()
    if options.worker:
        print(json.dumps(worker(int(options.worker[0]), options.worker[1])))
        return
    print(os.popen("uptime").read().strip())
    print(
        f"{'scenario':<38} {'mode':<6} {'top cause':<24} ok  forkserver s  check s  diagnose s"
        "  in children s  experiments  wall/children  same ranking"
    )
    totals: dict[str, list[float]] = {m: [0.0, 0.0] for m in options.modes.split(",")}
    for index in (int(i) for i in options.scenarios.split(",")):
        scenario = SCENARIOS[index]
        rows = {mode: _run_worker(index, mode) for mode in options.modes.split(",")}
        first = next(iter(rows.values()))  # the ranking and ratios every other mode must equal
        for mode, row in rows.items():
            same = row["causes"] == first["causes"] and row["ratios"] == first["ratios"]
            ok = "yes" if row["top"] == scenario.expected else "NO"
            totals[mode][0] += row["wall_s"]
            totals[mode][1] += row["inside_s"]
            print(
                f"{scenario.name:<38} {mode:<6} {row['top']:<24} {ok:<3} {row['forkserver_s']:12.2f}"
                f"  {row['check_s']:7.2f}  {row['wall_s']:10.2f}  {row['inside_s']:13.2f}  {row['experiments']:11d}"
                f"  {row['wall_s'] / row['inside_s']:12.2f}x  {'yes' if same else 'NO'}"
            )
    for mode, (wall, inside) in totals.items():
        print(
            f"all scenarios, {mode}: diagnoses {wall:.2f} s wall for {inside:.2f} s in children = {wall / inside:.2f}x"
        )
    print(os.popen("uptime").read().strip())


if __name__ == "__main__":
    main()
