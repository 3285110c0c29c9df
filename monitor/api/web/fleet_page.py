"""The fleet page (``/fleet``): models x nodes, each cell the node's group and what the vote says of it.

The odd node is obvious at a glance: every agreeing cell is a green group number, an outlier a red or
amber badge with its kind (docs/fleet.md). Below, per model, its groups (mode and why, the comparability
findings with their fixes) and the fields that separate them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from monitor.api.web import templating
from monitor.fleet import report
from monitor.fleet.vote import ModelVote

if TYPE_CHECKING:
    from monitor.api.handle import DaemonHandle

_KINDS = {"transient": "info", "outvoted": "warn", "suspect_hardware": "bad", "stack": "bad"}


@dataclass(frozen=True)
class Cell:
    text: str
    kind: str  # badge class: ok, info, warn, bad, none
    title: str


@dataclass(frozen=True)
class GroupLine:
    number: int
    summary: str
    nodes: str
    mode: str
    why: str
    findings: list[str]


@dataclass(frozen=True)
class Row:
    model: str
    cells: list[Cell]
    groups: list[GroupLine]
    separated_by: str
    consistent: bool


def render(handle: DaemonHandle, now: datetime) -> str:
    votes = report.vote(handle.store, handle.settings, now)
    nodes = sorted({n for v in votes for g in v.groups for n in g.nodes})
    rows = [_row(v, nodes) for v in votes]
    standing = sum(1 for r in rows if not r.consistent)
    return templating.render(
        "fleet.html",
        title="Fleet",
        crumbs=[("Models", "/"), ("Fleet", None)],
        now=now,
        nodes=nodes,
        rows=rows,
        standing=standing,
    )


def _row(vote: ModelVote, nodes: list[str]) -> Row:
    outliers = {o.node: o for o in vote.outliers}
    cells = []
    for node in nodes:
        group = vote.group_of(node)
        outlier = outliers.get(node)
        if group is None:
            cells.append(Cell("—", "none", "no recent run with digests"))
        elif outlier is not None:
            title = f"group {group.number}: {outlier.kind}, samples {list(outlier.samples)[:8]}: {outlier.detail}"
            cells.append(Cell(f"{group.number} {outlier.kind}", _KINDS.get(outlier.kind, "warn"), title))
        else:
            agrees = node in group.agreeing or not group.quorum
            cells.append(Cell(str(group.number), "ok" if agrees else "none", f"group {group.number}: {group.summary}"))
    groups = [
        GroupLine(
            g.number,
            g.summary,
            f"{len(g.agreeing)}/{len(g.nodes)} agree" + ("" if g.quorum else ", no quorum"),
            g.mode,
            g.why,
            [f"{f.detail}: {f.fix}" for f in g.findings],
        )
        for g in vote.groups
    ]
    return Row(vote.model, cells, groups, ", ".join(vote.separated_by[:8]), not report.standing(vote))
