"""One model checked on the candidate stack: the candidate's own ``onnxmon check``, its result read back.

Why through the candidate's command line: the candidate is another interpreter, with its own ONNX
Runtime, numpy and CUDA libraries; what crosses is the JSON every ``onnxmon check -o json`` prints,
not pickles of one interpreter's objects. Inside, the candidate checks exactly as production does:
its isolated child with the model's hard timeout and the daemon's memory cap, and the diagnosis
of a fail within ``daemon.diagnose_budget`` (``check``'s default), so a no-go comes with its cause.
Nothing is recorded there (``--no-store``): the caller stores candidate runs as such.
"""

from __future__ import annotations

import time

from monitor.config.plan import CheckPlan
from monitor.rehearse import answer, child
from monitor.rehearse.candidate import Candidate
from monitor.results import CheckResult, error_result

STARTUP_S = 60.0
"""Room for the candidate interpreter to start and import ONNX Runtime, on top of the check's own limits."""
MAX_ANSWER_BYTES = 8 << 20
"""What ``check -o json`` may print for one model (a result with its diagnosis is tens of kilobytes)."""
MAX_STDERR_BYTES = 64 << 20
"""What it may write to stderr (its log) before it is cut; only the end is kept, for the report's ``why``."""


def replay(
    candidate: Candidate,
    plan: CheckPlan,
    config_file: str,
    *,
    diagnose_budget_s: float,
    expected: answer.Expected | None = None,
) -> CheckResult:
    """The candidate's check of ``plan.name`` against the active baseline; an ``error`` result when it gives none.

    ``expected``: what its answer must be about (default: production's active baseline of the model, read now)."""
    expected = expected or answer.Expected.of(plan)
    limit = STARTUP_S + plan.timeout_s + 10.0 + diagnose_budget_s
    command = candidate.command("check", plan.name, "--no-store", "-o", "json", "-c", config_file)
    started = time.time()
    try:
        ran = child.run(command, limit_s=limit, stdout_cap=MAX_ANSWER_BYTES, stderr_cap=MAX_STDERR_BYTES)
    except OSError as exc:
        return error_result(plan.name, "crash", f"the candidate could not run: {exc}", started, time.time())
    finished = time.time()
    if ran.timed_out:
        return error_result(plan.name, "timeout", f"the candidate's check {ran.cut}; killed", started, finished)
    if ran.cut is not None:
        return error_result(plan.name, "crash", f"the candidate's check {ran.cut}; killed", started, finished)
    if not ran.stdout.strip():
        detail = f"the candidate's check exited {ran.returncode} without a result: {ran.last_line()}"
        return error_result(plan.name, "crash", detail, started, finished)
    try:
        return answer.check_result(ran.stdout, expected, returncode=ran.returncode, window=(started, finished))
    except answer.BadAnswer as exc:
        detail = f"the candidate's check exited {ran.returncode} with an answer onnxmon does not take: {exc}"
        detail += f" (its stderr ends: {ran.last_line()})" if ran.returncode and ran.stderr.strip() else ""
        return error_result(plan.name, "crash", detail, started, finished)
