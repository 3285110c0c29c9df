"""A daemon's vote for its own node, after its check: no aggregator to run, the shared store is the ballot box.

``vote_own`` reads the model's latest run on every node (one indexed query), votes, and when this node
is outvoted re-runs its differing samples here in a fresh session (``rerun``, injected: the daemon runs
it in an isolated child) to say whether it is ``transient`` or ``suspect_hardware`` (``attribute.py``); a
node whose group differs from the fleet's main group is ``stack``. What it found is kept in
``fleet_outliers`` (the row goes when the node agrees again), which ``onnxmon fleet``, the API and the
metrics of every node read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from monitor.config.settings import Settings
from monitor.fleet import attribute, report
from monitor.fleet.vote import ModelVote, vote_model
from monitor.store import Store, fleet_rows

log = logging.getLogger("onnxmon.fleet")

Rerunner = Callable[[Sequence[int]], attribute.Rerun]
"""Re-runs the given samples on this node in a fresh session: output -> sample -> digest."""


def vote_own(
    store: Store,
    settings: Settings,
    model: str,
    node: str,
    now: datetime,
    rerun: Rerunner | None = None,
) -> ModelVote:
    """The vote of ``model`` as ``node`` sees it, its own finding recorded; returns the vote, the node's
    outlier (if any) with the kind its re-run found. ``node`` is named as its runs are stored
    (``fleet_rows.stored_node``: the daemon's caller cuts a long or odd name once, for the vote and its series)."""
    since = now - timedelta(seconds=settings.fleet.max_age)
    runs = fleet_rows.latest(store, model=model, since=since)
    loader = report.StoreLoader(store)
    vote = vote_model(
        model,
        runs,
        loader,
        report.tolerance_of(settings, model),
        report.quorum_of(settings),
        report.op_types_of(settings, model),
    )
    mine = next((o for o in vote.outliers if o.node == node), None)
    group = vote.group_of(node)
    if mine is None or group is None:
        fleet_rows.record(store, model, node, None, None, (), "", now)
        return vote
    kind, detail = mine.kind, mine.detail
    if kind == "outvoted" and rerun is not None and settings.fleet.rerun:
        digests = loader.digests([mine.run_id, group.reference_run])
        try:
            again = rerun(mine.samples)
        except Exception as exc:  # a re-run that cannot run leaves the node outvoted, unattributed
            log.warning("fleet re-run of %s on %s failed: %s", model, node, f"{type(exc).__name__}: {exc}"[:300])
        else:
            kind, detail = attribute.attribute(
                mine.samples, again, digests.get(mine.run_id, ()), digests.get(group.reference_run, ()), group.mode
            )
    fleet_rows.record(store, model, node, mine.run_id, kind, mine.samples, detail, now)
    if kind != "transient":
        log.warning("fleet: %s on %s is %s: %s", model, node, kind, detail)
    found = replace(mine, kind=kind, detail=detail)  # what this node now is, for its own series
    return replace(vote, outliers=tuple(found if o is mine else o for o in vote.outliers))
