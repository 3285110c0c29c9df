"""The vote: per model and stack key, each node's latest run; the majority's digest outvotes the others.

A *group* is the nodes whose latest run of a model shares a stack key (``runtime/stackkey.py``). Its
vote counts once the group has a quorum: at least ``min_nodes`` nodes and one digest held by more than
``majority`` of them; every node with another digest is then outvoted (``outvoted``, until a re-run on
that node says what it is: ``attribute.py``).

A group is voted on bit by bit (mode ``exact``) unless it cannot be bit-exact: a run of it measured a
run-to-run spread above 0 (its repeats differ), or the comparability lint has a finding (``lint.py``).
Then (mode ``tolerance``) each node is compared with the group's medoid, the node nearest the
per-output median of the runs' sums, by the sums its digests keep: for an output of ``n`` elements
whose every element is within ``atol + rtol*|b|`` of the medoid's, ``|sum(a) - sum(b)| <= n*atol +
rtol*sqrt(n)*||b||_2`` holds, so a node beyond that bound is out of tolerance for certain (a node within
it may still differ element by element: the bound can miss, it never accuses wrongly).

Groups of one model that computed differently from the largest group with a quorum make their nodes
``stack`` outliers, with the fields that separate the stacks (``separated_by``).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from monitor.fleet import lint
from monitor.results import AppliedTolerance, OutputDigest
from monitor.runtime import stackkey
from monitor.store.fleet_rows import NodeRun

Tolerance = Callable[[str], AppliedTolerance]
"""The tolerance of one output of the model voted on."""


class Loader(Protocol):
    """Where the vote reads the stacks and per-sample digests of the runs it looks into (the store)."""

    def stacks(self, run_ids: Collection[int]) -> Mapping[int, Mapping[str, str]]: ...
    def digests(self, run_ids: Collection[int]) -> Mapping[int, tuple[OutputDigest, ...]]: ...


@dataclass(frozen=True)
class Quorum:
    """When a group's vote counts: ``min_nodes`` nodes, one digest held by more than ``majority`` of them."""

    min_nodes: int = 3
    majority: float = 0.5

    def holds(self, agreeing: int, nodes: int) -> bool:
        return nodes >= self.min_nodes and agreeing / nodes > self.majority


@dataclass(frozen=True)
class Group:
    """The nodes of one model on one stack key, and how they voted."""

    number: int  # 1 for the largest group of the model, then by size: a small label, never a digest
    stack_key: str
    summary: str  # the stack in a few words
    nodes: tuple[str, ...]
    digest: str | None  # the majority's digest (exact), the medoid's (tolerance)
    agreeing: tuple[str, ...]
    mode: str  # exact | tolerance
    why: str  # why this mode
    quorum: bool
    findings: tuple[lint.Finding, ...]
    stack: Mapping[str, str]
    reference_run: int  # an agreeing run (the medoid's in tolerance mode): what the others are compared with


@dataclass(frozen=True)
class Outlier:
    """A node that stands apart: ``kind`` outvoted (no re-run yet), transient, suspect_hardware or stack."""

    node: str
    kind: str
    group: int
    run_id: int
    since: datetime
    samples: tuple[int, ...]
    detail: str


@dataclass(frozen=True)
class ModelVote:
    model: str
    groups: tuple[Group, ...]
    outliers: tuple[Outlier, ...]
    separated_by: tuple[str, ...]

    def group_of(self, node: str) -> Group | None:
        return next((g for g in self.groups if node in g.nodes), None)


@dataclass(frozen=True)
class _Tally:
    group: Group
    runs: tuple[NodeRun, ...]
    reference: NodeRun | None  # an agreeing run: what the others are compared with


def vote_model(
    model: str,
    runs: Sequence[NodeRun],
    loader: Loader,
    tolerance: Tolerance,
    quorum: Quorum = Quorum(),
    op_types: Collection[str] | None = None,
) -> ModelVote:
    """The vote over ``runs`` (each node's latest run of ``model``)."""
    by_key: dict[str, list[NodeRun]] = {}
    for run in sorted(runs, key=lambda r: r.node):
        by_key.setdefault(run.stack_key, []).append(run)
    ordered = sorted(by_key.items(), key=lambda item: (-len(item[1]), item[0]))
    stacks = loader.stacks([members[0].run_id for _, members in ordered])
    all_stacks = [stacks.get(members[0].run_id, {}) for _, members in ordered]
    tallies = [
        _tally(number, members, stacks.get(members[0].run_id, {}), all_stacks, loader, tolerance, quorum, op_types)
        for number, (_, members) in enumerate(ordered, start=1)
    ]
    outliers = [o for t in tallies for o in _outvoted(t, loader)]
    outliers += _stack_outliers(tallies, loader, tolerance)
    separated = stackkey.separating(all_stacks) if len(all_stacks) > 1 else []
    return ModelVote(model, tuple(t.group for t in tallies), tuple(outliers), tuple(separated))


def _tally(
    number: int,
    runs: list[NodeRun],
    stack: Mapping[str, str],
    all_stacks: list[Mapping[str, str]],
    loader: Loader,
    tolerance: Tolerance,
    quorum: Quorum,
    op_types: Collection[str] | None,
) -> _Tally:
    codes = {c for r in runs for c in r.reason_codes}
    findings = lint.findings(stack, codes, op_types, all_stacks)
    spread = max((r.spread for r in runs if r.spread is not None), default=0.0)
    nodes = tuple(r.node for r in runs)
    if spread > 0 or findings:
        why = f"run-to-run spread {spread:.3g} > 0" if spread > 0 else "; ".join(f.detail for f in findings)
        medoid, agreeing = _by_tolerance(runs, loader, tolerance)
        mode, digest = "tolerance", medoid.run_digest
    else:
        why = "no spread between repeats and no comparability finding: every node should compute the same bits"
        digest, _ = Counter(r.run_digest for r in runs).most_common(1)[0]
        agreeing = tuple(r.node for r in runs if r.run_digest == digest)
        medoid, mode = next(r for r in runs if r.run_digest == digest), "exact"
    group = Group(
        number=number,
        stack_key=runs[0].stack_key,
        summary=summary(stack),
        nodes=nodes,
        digest=digest,
        agreeing=agreeing,
        mode=mode,
        why=why,
        quorum=quorum.holds(len(agreeing), len(nodes)),
        findings=findings,
        stack=stack,
        reference_run=medoid.run_id,
    )
    return _Tally(group, tuple(runs), medoid)


def summary(stack: Mapping[str, str]) -> str:
    """The stack in a few words: ONNX Runtime, the providers, the GPU (or the CPU)."""
    gpu = stack.get("gpu.0.name") or stack.get("cpu.model") or ""
    parts = [f"onnxruntime {stack.get('onnxruntime.version', '?')}", stack.get("session.providers", ""), gpu]
    return " · ".join(p for p in parts if p)


def _sums(digests: Sequence[OutputDigest]) -> dict[str, OutputDigest]:
    return {d.name: d for d in digests}


def distance(a: Sequence[OutputDigest], b: Sequence[OutputDigest], tolerance: Tolerance) -> float:
    """How far ``a`` is from ``b`` in units of the tolerance bound on their sums; > 1: out of tolerance for
    certain. An output without sums (integers, strings) counts as 0 when its digests agree, else infinity."""
    worst = 0.0
    theirs = _sums(b)
    for mine in a:
        other = theirs.get(mine.name)
        if other is None:
            return math.inf
        if mine.total is None or other.total is None:
            if mine.samples != other.samples:
                return math.inf
            continue
        if math.isnan(mine.total) or math.isnan(other.total):
            return math.inf if math.isnan(mine.total) != math.isnan(other.total) else worst
        applied = tolerance(mine.name)
        n = max(mine.elements, other.elements, 1)
        bound = n * applied.atol + applied.rtol * math.sqrt(n) * max(mine.magnitude or 0.0, other.magnitude or 0.0)
        gap = abs(mine.total - other.total)
        worst = max(worst, gap / bound if bound > 0 else (math.inf if gap > 0 else 0.0))
    return worst


def _by_tolerance(runs: list[NodeRun], loader: Loader, tolerance: Tolerance) -> tuple[NodeRun, tuple[str, ...]]:
    found = loader.digests([r.run_id for r in runs])
    sums = {r.run_id: found.get(r.run_id, ()) for r in runs}
    names = sorted({d.name for digests in sums.values() for d in digests if d.total is not None})
    median = {
        name: statistics.median(d.total for ds in sums.values() for d in ds if d.name == name and d.total is not None)
        for name in names
    }

    def off_median(run: NodeRun) -> float:
        return sum(abs((d.total or 0.0) - median[d.name]) for d in sums[run.run_id] if d.name in median)

    medoid = min(runs, key=lambda r: (off_median(r), r.node))
    agreeing = tuple(r.node for r in runs if distance(sums[r.run_id], sums[medoid.run_id], tolerance) <= 1.0)
    return medoid, agreeing


def differing_samples(a: Sequence[OutputDigest], b: Sequence[OutputDigest]) -> tuple[int, ...]:
    """The samples where any output's digest differs between two runs."""
    ours, theirs = _sums(a), _sums(b)
    differ: set[int] = set()
    for name in ours.keys() | theirs.keys():  # an output one side lacks (unreadable digests): all its samples
        mine = ours[name].samples if name in ours else ()
        samples = theirs[name].samples if name in theirs else ()
        count = max(len(mine), len(samples))
        differ.update(i for i in range(count) if i >= len(mine) or i >= len(samples) or mine[i] != samples[i])
    return tuple(sorted(differ))


def _outvoted(tally: _Tally, loader: Loader) -> list[Outlier]:
    group = tally.group
    if not group.quorum or tally.reference is None:
        return []
    agreeing = set(group.agreeing)
    odd = [r for r in tally.runs if r.node not in agreeing]
    if not odd:
        return []
    found = loader.digests([tally.reference.run_id, *(r.run_id for r in odd)])
    reference = found.get(tally.reference.run_id, ())
    return [
        Outlier(
            node=r.node,
            kind="outvoted",
            group=group.number,
            run_id=r.run_id,
            since=r.started_at,
            samples=differing_samples(found.get(r.run_id, ()), reference),
            detail=f"{len(group.agreeing)} of {len(group.nodes)} nodes of its stack computed another digest",
        )
        for r in odd
    ]


def _stack_outliers(tallies: list[_Tally], loader: Loader, tolerance: Tolerance) -> list[Outlier]:
    main = next((t for t in tallies if t.group.quorum), None)
    if main is None or main.reference is None:
        return []
    outliers: list[Outlier] = []
    for tally in tallies:
        if tally is main or tally.reference is None:
            continue
        pair = loader.digests([main.reference.run_id, tally.reference.run_id])
        mine, theirs = pair.get(tally.reference.run_id, ()), pair.get(main.reference.run_id, ())
        exact = tally.group.mode == main.group.mode == "exact"
        if (tally.group.digest == main.group.digest) if exact else distance(mine, theirs, tolerance) <= 1.0:
            continue
        fields = stackkey.separating([main.group.stack, tally.group.stack])
        detail = ", ".join(
            f"{f} {main.group.stack.get(f, 'none')} vs {tally.group.stack.get(f, 'none')}"
            for f in fields
            if "build" not in f
        )
        samples = differing_samples(mine, theirs)
        outliers += [
            Outlier(r.node, "stack", tally.group.number, r.run_id, r.started_at, samples, detail or "another stack")
            for r in tally.runs
        ]
    return outliers
