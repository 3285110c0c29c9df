"""A rehearsal: every model replayed on the candidate, each result stored as a candidate run, one report.

Production's history is only read here (the stack of each model's latest run, for the diff) and
written only as candidate runs, which are never a model's latest run, make no events and count in no
alert or metric (``Store.record_run(candidate=True)``). A store that cannot take them costs their
record, not the report: the caller is told how many were not stored.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from monitor.config.plan import plan_for
from monitor.config.settings import Settings
from monitor.files import baselines
from monitor.rehearse.candidate import Candidate
from monitor.rehearse.replay import replay
from monitor.rehearse.report import ModelVerdict, Report
from monitor.store import Store

log = logging.getLogger(__name__)


def rehearse(
    settings: Settings,
    config_file: str,
    candidate: Candidate,
    models: Sequence[str],
    store: Store | None,
    *,
    node: str | None = None,
) -> tuple[Report, int]:
    """Replay ``models`` on ``candidate``; the report and how many candidate runs could not be stored."""
    verdicts: list[ModelVerdict] = []
    unstored = 0
    for name in models:
        plan = plan_for(settings, name)
        result = replay(candidate, plan, config_file, diagnose_budget_s=settings.daemon.diagnose_budget)
        run_id = None
        if store is not None:
            try:
                run_id = store.record_run(result, node=node, candidate=True)
            except Exception as exc:  # the report stands without the record; the caller says so
                log.warning("candidate run of %r not stored: %s", name, exc)
                unstored += 1
        else:
            unstored += 1
        production = production_environment(settings, store, name)
        verdicts.append(ModelVerdict(result, production, run_id))
    return Report(candidate, verdicts), unstored


def production_environment(settings: Settings, store: Store | None, model: str) -> Mapping[str, Any] | None:
    """The stack production last checked ``model`` on (its latest run's snapshot), else its active baseline's."""
    if store is not None:
        try:
            latest = store.runs(model, limit=1)
            fingerprint = latest[0].environment_fingerprint if latest else None
            snapshot = store.environment(fingerprint) if fingerprint else None
            if snapshot:
                return snapshot
        except Exception as exc:  # an unreadable store: the baseline's stack is the next best answer
            log.warning("production environment of %r not read from the store: %s", model, exc)
    baseline = baselines.active(settings.store.baselines_dir, model)
    return dict(baseline.meta.environment) if baseline is not None and baseline.meta.environment else None
