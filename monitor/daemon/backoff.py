"""Back-off of a model whose checks cannot run: waits that grow, and end as soon as something was fixed.

A model whose runs keep failing to *run* (timeout, crash, unloadable model: ``RUN_FAILURES``) is not
retried in a tight loop: after its 2nd such run in a row it waits one interval, then 2, 4, ... up to
``daemon.max_backoff``. One interval is the schedule's: the interval, or for a cron model the gap
between its next two starts (``Schedule.next_gap_seconds``), never a guessed minute.

The wait is for the same inputs to fail again. It ends at the next scheduled tick when any of them
changed: the model file (its stat stamp), the model's ``ACTIVE`` baseline file, or the model's config
(a reload that changed its entry or its benchmark set). A run that is not a run failure (a pass, a
drift, a missing baseline) ends it too, so a fixed model is checked again within one interval;
``POST /api/v1/models/{name}/check`` checks it at once. A tick skipped while backed off is counted
apart from one skipped because the previous run was still going
(``onnxmon_scheduler_backed_off_runs_total``).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitor.config.plan import CheckPlan
from monitor.files import baselines, stamped
from monitor.results import CheckResult, Verdict

log = logging.getLogger("onnxmon.daemon")

RUN_FAILURES = frozenset({"timeout", "crash", "model_error", "run_error", "internal_error"})
"""Reasons that mean "the check could not run at all": these back a model off."""
FALLBACK_GAP_S = 60.0
"""One interval for a schedule whose gap cannot be computed (a cron that no longer fires: refused at load)."""


def inputs_of(plan: CheckPlan) -> tuple[Any, ...]:
    """What a check's failures ran against: the model file's stamp, its ACTIVE file's, its config entry."""
    active = Path(plan.baselines_dir) / plan.name / baselines.ACTIVE_FILE
    return (
        stamped.stamp([plan.model.path]),
        stamped.stamp([active]),
        plan.model.model_dump_json(),
        plan.benchset.model_dump_json(),
    )


@dataclass
class _State:
    failures: int
    not_before: float
    inputs: tuple[Any, ...]


class Backoff:
    """Each backed-off model's failures in a row, the time it may run again and what it failed on."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._states: dict[str, _State] = {}
        self._lock = threading.Lock()

    def holds(self, plan: CheckPlan) -> int:
        """The failures in a row of a model still backed off now (skip its tick), 0 when it may run.

        A model whose inputs changed since its failures is let go (its back-off forgotten) at once.
        """
        with self._lock:
            state = self._states.get(plan.name)
            if state is None or self.clock() >= state.not_before:
                return 0
            if inputs_of(plan) != state.inputs:
                log.info("%s: its model file, baseline or config changed: back-off ended", plan.name)
                del self._states[plan.name]
                return 0
            return state.failures

    def update(self, plan: CheckPlan, result: CheckResult, max_backoff: float) -> None:
        """Count a run failure (and set the next time the model may run), or forget the model's back-off."""
        codes = {r.code for r in result.reasons}
        with self._lock:
            if result.verdict is not Verdict.ERROR or not codes & RUN_FAILURES:
                self._states.pop(plan.name, None)
                return
            state = self._states.setdefault(plan.name, _State(0, 0.0, ()))
            state.failures += 1
            state.inputs = inputs_of(plan)
            now = self.clock()
            gap = plan.schedule.next_gap_seconds(now=dt.datetime.fromtimestamp(now, dt.UTC))
            gap = gap if math.isfinite(gap) and gap > 0 else FALLBACK_GAP_S
            delay = min(gap * 2 ** (state.failures - 1), max_backoff)
            state.not_before = now + delay if state.failures > 1 else 0.0

    def failures(self, model: str) -> int:
        """The model's run failures in a row (0: not backed off)."""
        with self._lock:
            state = self._states.get(model)
            return state.failures if state is not None else 0
