"""One model checked on the candidate stack: the candidate's own ``onnxmon check``, its result read back.

Why through the candidate's command line: the candidate is another interpreter, with its own ONNX
Runtime, numpy and CUDA libraries; what crosses is the JSON every ``onnxmon check -o json`` prints,
not pickles of one interpreter's objects. Inside, the candidate checks exactly as production does:
its isolated child with the model's hard timeout and the daemon's memory cap, and the diagnosis
of a fail within ``daemon.diagnose_budget`` (``check``'s default), so a no-go comes with its cause.
Nothing is recorded there (``--no-store``): the caller stores candidate runs as such.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from typing import Any

from monitor import jsonsafe
from monitor.config.plan import CheckPlan
from monitor.rehearse.candidate import Candidate
from monitor.results import CheckResult, error_result

STARTUP_S = 60.0
"""Room for the candidate interpreter to start and import ONNX Runtime, on top of the check's own limits."""


def replay(candidate: Candidate, plan: CheckPlan, config_file: str, *, diagnose_budget_s: float) -> CheckResult:
    """The candidate's check of ``plan.name`` against the active baseline; an ``error`` result when it gives none."""
    limit = STARTUP_S + plan.timeout_s + 10.0 + diagnose_budget_s
    command = candidate.command("check", plan.name, "--no-store", "-o", "json", "-c", config_file)
    started = time.time()
    try:
        done = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=limit, check=False)
    except subprocess.TimeoutExpired:
        return error_result(
            plan.name, "timeout", f"the candidate's check took over {limit:g} s; killed", started, time.time()
        )
    except OSError as exc:
        return error_result(plan.name, "crash", f"the candidate could not run: {exc}", started, time.time())
    try:
        (found,) = jsonsafe.loads(done.stdout)  # CheckResult.from_dict reads floats where its types say
        return CheckResult.from_dict(_epoch_times(found))
    except (ValueError, TypeError, KeyError):
        last = (done.stderr.strip().splitlines() or [done.stdout.strip()[:200] or "no output"])[-1][:500]
        detail = f"the candidate's check exited {done.returncode} without a result: {last}"
        return error_result(plan.name, "crash", detail, started, time.time())


def _epoch_times(found: Mapping[str, Any]) -> dict[str, Any]:
    """``check -o json`` writes RFC 3339 times; ``CheckResult.from_dict`` reads epoch seconds."""
    data = dict(found)
    data.pop("run_id", None)
    for key in ("started_at", "finished_at"):
        if isinstance(data.get(key), str):
            data[key] = jsonsafe.epoch(data[key])
    return data
