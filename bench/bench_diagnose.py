"""Benchmark: the time a diagnosis takes per model, beside the check it explains, on the drift scenarios.

For each scenario of ``tests/diagnose_scenarios.py`` (real corpus models, one real cause each):
the check's own time (``run_check``), the diagnosis's time (every experiment in its isolated
child, as the daemon runs them), the time the experiments spent inside their children (session,
replay, comparison: the rest is process start and hand-over), the number of experiments, the
diagnosis ÷ check ratio measured side by side in this run, and whether the top cause is the
scenario's truth. On a loaded machine the children's start-up dominates; say the load with the
numbers (``uptime``). Run:
``.venv/bin/python bench/bench_diagnose.py``.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monitor.check import run_check  # noqa: E402
from monitor.daemon.diagnosis import isolated  # noqa: E402
from monitor.diagnose.engine import diagnose  # noqa: E402
from tests.diagnose_scenarios import SCENARIOS  # noqa: E402
from tests.workspace import Workspace  # noqa: E402


def main() -> None:
    logging.disable(logging.WARNING)  # the quantizer's pre-processing advice
    print(
        f"{'scenario':<38} {'truth':<24} {'top cause':<24} ok  check s  diagnose s  in children s  experiments  ratio"
    )
    for scenario in SCENARIOS:
        root = Path(tempfile.mkdtemp(prefix="onnxmon-bench-diagnose-"))
        cwd = os.getcwd()
        try:
            os.chdir(root)
            plan, _ = scenario.build(Workspace(root))
            began = time.perf_counter()
            result = run_check(plan)
            check_s = time.perf_counter() - began
            began = time.perf_counter()
            diagnosis = diagnose(plan, result.to_dict(), isolate=isolated)
            diagnose_s = time.perf_counter() - began
        finally:
            os.chdir(cwd)
            shutil.rmtree(root, ignore_errors=True)
        top = diagnosis.top.cause if diagnosis.top else "-"
        inside = sum(e.seconds for e in diagnosis.experiments)  # measured inside each child: replay + compare
        ok = "yes" if top == scenario.expected else "NO"
        print(
            f"{scenario.name:<38} {scenario.expected:<24} {top:<24} {ok:<3} {check_s:7.2f}  {diagnose_s:10.2f}"
            f"  {inside:13.2f}  {len(diagnosis.experiments):11d}  {diagnose_s / check_s:5.1f}x"
        )


if __name__ == "__main__":
    main()
