"""What ``onnxmon baseline capture --promote`` and ``onnxmon check`` leave behind, made in this process.

The CLI runs both in an isolated worker (a process): a fixture that only needs their results (a
promoted baseline on disk and in the store, a run recorded in the SQLite store) makes them here
through the same library calls the worker and the command make, so the tests that read them stay in
the fast tier (tests/tiers.py). The tests of the commands themselves still run them as a user does.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor import capture
from monitor.check import run_check
from monitor.cli import baseline_cmd, common, recording
from monitor.config.plan import plan_for
from monitor.files import baseline_undo
from monitor.results import CheckResult
from tests.workspace import Workspace


@dataclass(frozen=True)
class Recorded:
    """The promoted baseline's id, the check's result and its run id in the store."""

    baseline_id: str
    result: CheckResult
    run_id: int


def capture_and_check(ws: Workspace, model: str) -> Recorded:
    """Capture and promote a baseline of ``model`` (recorded in the store), then check it and record the run."""
    settings = ws.settings()
    plan = plan_for(settings, model)
    before = baseline_undo.active_state(settings.store.baselines_dir, model)
    baseline = capture.capture_baseline(plan, promote=True, promoted_by=common.login())
    with common.open_store(settings) as store:
        baseline_cmd.record_or_undo(settings, baseline, before, store=store)
    result = run_check(plan)
    recorded = recording.record(settings, [result])
    assert recorded.complete and recorded.run_ids[0] is not None, recorded.message()
    return Recorded(baseline.id, result, recorded.run_ids[0])
