"""The fleet's vote read from the store, as ``onnxmon fleet``, ``/api/v1/fleet``, the page and the metrics show it.

One indexed query reads every node's latest run of every model (``store/fleet_rows.py``: ``latest_runs`` joined
to ``runs``, the small columns only); the stacks and per-sample digests of the few runs the vote looks
into are read by id; what a re-run found an outvoted node to be (``fleet_outliers``, written by that
node's daemon: ``own.py``) names its kind.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from monitor.config.plan import plan_for
from monitor.config.settings import Settings
from monitor.diagnose import modelfile
from monitor.errors import ConfigError
from monitor.fleet.vote import ModelVote, Outlier, Quorum, Tolerance, vote_model
from monitor.results import AppliedTolerance, OutputDigest
from monitor.store import Store, fleet_rows

PREFETCH_MINORITY = 100
"""Minority runs of one group whose digests are read ahead; more are read when the vote asks for them."""

STANDING = frozenset({"outvoted", "suspect_hardware", "stack"})
"""Outlier kinds that stand (exit 1, ``onnxmon_fleet_consistent`` 0); a ``transient`` one is named only."""


class StoreLoader:
    """The vote's ``Loader`` over the store, each run read once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._stacks: dict[int, Mapping[str, str]] = {}
        self._digests: dict[int, tuple[OutputDigest, ...]] = {}

    def stacks(self, run_ids: Collection[int]) -> Mapping[int, Mapping[str, str]]:
        self._stacks.update(fleet_rows.stacks(self.store, [i for i in run_ids if i not in self._stacks]))
        return {i: self._stacks[i] for i in run_ids if i in self._stacks}

    def prefetch(self, runs: Collection[fleet_rows.NodeRun]) -> None:
        """Read at once what the votes of many models will ask for, model by model otherwise: each group's
        first node's stack, and the digests of a group's minority runs with one run of its majority."""
        groups: dict[tuple[str, str], list[fleet_rows.NodeRun]] = {}
        for run in runs:
            groups.setdefault((run.model, run.stack_key), []).append(run)
        stacks, digests = [], []
        for members in groups.values():
            stacks.append(min(members, key=lambda r: r.node).run_id)
            counts = Counter(r.run_digest for r in members)
            majority, held = counts.most_common(1)[0]
            digests.append(next(r.run_id for r in members if r.run_digest == majority))
            if held < len(members) // 2 + 1 or len(counts) > 1:
                digests += [r.run_id for r in members if r.run_digest != majority][:PREFETCH_MINORITY]
        self.stacks(stacks)
        self.digests(digests)

    def digests(self, run_ids: Collection[int]) -> Mapping[int, tuple[OutputDigest, ...]]:
        self._digests.update(fleet_rows.digests(self.store, [i for i in run_ids if i not in self._digests]))
        return {i: self._digests[i] for i in run_ids if i in self._digests}


def quorum_of(settings: Settings) -> Quorum:
    return Quorum(settings.fleet.min_nodes, settings.fleet.majority)


def tolerance_of(settings: Settings, model: str) -> Tolerance:
    """Each output's configured tolerance (the defaults' for a model this config does not name)."""
    try:
        configured = settings.model(model)
    except ConfigError:
        default = settings.defaults.tolerance.applied()
        return lambda output: default

    def applied(output: str) -> AppliedTolerance:
        return settings.tolerance_for(configured, output)

    return applied


def op_types_of(settings: Settings, model: str) -> frozenset[str] | None:
    """The model file's op types when this config names the model and its file is here, else None."""
    try:
        plan = plan_for(settings, model)
        stat = os.stat(plan.model.path)
    except (ConfigError, OSError):
        return None
    key = (str(plan.model.path), stat.st_mtime_ns, stat.st_size)  # the file as it is now
    if key not in _OP_TYPES:
        if len(_OP_TYPES) >= 256:
            _OP_TYPES.clear()
        _OP_TYPES[key] = frozenset(modelfile.op_types(plan))
    return _OP_TYPES[key]


_OP_TYPES: dict[tuple[str, int, int], frozenset[str]] = {}


def vote(store: Store, settings: Settings, now: datetime, *, model: str | None = None) -> list[ModelVote]:
    """The vote of every model (or of ``model``) over each node's latest run newer than ``fleet.max_age``."""
    since = now - timedelta(seconds=settings.fleet.max_age)
    runs = fleet_rows.latest(store, model=model, since=since)
    recorded = {(o.model, o.node): o for o in fleet_rows.outliers(store, model=model)}
    by_model: dict[str, list[fleet_rows.NodeRun]] = {}
    for run in runs:
        by_model.setdefault(run.model, []).append(run)
    loader, quorum = StoreLoader(store), quorum_of(settings)
    loader.prefetch(runs)
    votes = []
    for name in sorted(by_model):
        found = vote_model(
            name, by_model[name], loader, tolerance_of(settings, name), quorum, op_types_of(settings, name)
        )
        outliers = tuple(_with_recorded(o, recorded.get((name, o.node))) for o in found.outliers)
        votes.append(replace(found, outliers=outliers))
    return votes


def _with_recorded(outlier: Outlier, record: fleet_rows.OutlierRecord | None) -> Outlier:
    """An outvoted node with what its own daemon's re-run found (the same run), since when it stands apart."""
    if record is None or outlier.kind != "outvoted":
        return outlier
    if record.run_id == outlier.run_id:
        return replace(outlier, kind=record.kind, since=record.since, detail=record.detail or outlier.detail)
    return replace(outlier, since=min(record.since, outlier.since))


def standing(vote: ModelVote) -> list[Outlier]:
    return [o for o in vote.outliers if o.kind in STANDING]


def document(vote: ModelVote) -> dict[str, Any]:
    """One model's vote as JSON: ``groups``, ``outliers``, ``separated_by`` (docs/fleet.md)."""
    return {
        "model": vote.model,
        "consistent": not standing(vote),
        "groups": [
            {
                "group": g.number,
                "stack_key": g.stack_key,
                "summary": g.summary,
                "nodes": list(g.nodes),
                "agreeing": list(g.agreeing),
                "digest": g.digest,
                "mode": g.mode,
                "why": g.why,
                "quorum": g.quorum,
                "findings": [{"code": f.code, "detail": f.detail, "fix": f.fix} for f in g.findings],
            }
            for g in vote.groups
        ],
        "outliers": [
            {
                "node": o.node,
                "kind": o.kind,
                "group": o.group,
                "since": o.since.isoformat().replace("+00:00", "Z"),
                "samples": list(o.samples),
                "run_id": o.run_id,
                "detail": o.detail,
            }
            for o in vote.outliers
        ],
        "separated_by": list(vote.separated_by),
    }


@dataclass(frozen=True)
class NodeState:
    """What the metrics say of one node for one model: consistent (0/1) and its group's small number."""

    consistent: bool
    group: int


def node_state(vote: ModelVote, node: str) -> NodeState | None:
    group = vote.group_of(node)
    if group is None:
        return None
    return NodeState(not any(o.node == node for o in standing(vote)), group.number)
