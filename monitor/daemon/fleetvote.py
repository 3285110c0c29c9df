"""The daemon's vote for its own node after a check (``fleet.vote``, docs/fleet.md).

After the check went to every sink (and its diagnosis, if any), the daemon reads the model's latest
run on every node from the shared store and votes (``fleet/own.py``); when its node is outvoted it
re-runs the differing samples in an isolated child with a fresh session (never the check worker's
kept one) and records what it found. The node's two fleet series follow (``onnxmon_fleet_consistent``,
``onnxmon_fleet_group``). A vote that fails is logged, never the check's failure.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from monitor.check import rerun
from monitor.config.plan import CheckPlan
from monitor.config.settings import Settings
from monitor.daemon import diagnosis
from monitor.fleet import own, report
from monitor.results import CheckResult
from monitor.sinks.prometheus.fleet_gauges import FleetGauges
from monitor.store import Store, fleet_rows

log = logging.getLogger("onnxmon.daemon")


def rerun_child(plan: CheckPlan, samples: list[int]) -> Mapping[str, Any]:
    """In the isolated child: the samples' digests from a fresh session (JSON: sample indices as text)."""
    found = rerun.rerun_digests(plan, samples)
    return {"digests": {name: {str(i): d for i, d in per.items()} for name, per in found.items()}}


def after_check(
    plan: CheckPlan,
    result: CheckResult,
    run_id: int | None,
    *,
    settings: Settings,
    store: Store,
    node: str | None,
    gauges: FleetGauges,
    stop: threading.Event | None = None,
) -> None:
    """Vote for ``node`` on ``plan``'s model when the run was stored with a digest; set the node's series."""
    if not settings.fleet.vote or run_id is None or not node or result.run_digest is None:
        return

    def rerun_isolated(samples: Sequence[int]) -> dict[str, dict[int, str]]:
        outcome = diagnosis.isolated(rerun_child, (plan, list(samples)), timeout_s=plan.timeout_s, stop=stop)
        if "error" in outcome:
            raise RuntimeError(str(outcome["error"]))
        return {name: {int(i): str(d) for i, d in per.items()} for name, per in outcome["digests"].items()}

    node = fleet_rows.stored_node(node)  # as its runs name it: the vote finds the node, the series are set
    try:
        vote = own.vote_own(store, settings, plan.name, node, datetime.now(UTC), rerun_isolated)
        state = report.node_state(vote, node)
        if state is not None:
            gauges.set(plan.name, state.consistent, state.group)
    except Exception as exc:  # the vote is advice: a store hiccup costs it, never the check
        log.warning("fleet vote of %s on %s failed: %s", plan.name, node, f"{type(exc).__name__}: {exc}"[:300])
