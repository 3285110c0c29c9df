"""The run page's "Decisions" section: per decided output, how many decisions flipped, and which.

A decision is what the output decides (``models[].decisions``: a class per row, a yes/no, a label);
the check keeps the first flipped (sample, row) pairs (``results.DecisionStats.flips``), shown here
so the on-call engineer can replay exactly those inputs. Warnings (``tolerance.numeric: warn``: a
numeric drift that flipped no decision) are listed with the reasons, under "Why". The section is
``templates/decisions.html``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from monitor.api.web.formats import num
from monitor.results import OutputStats

SHOWN_FLIPS = 20  # (sample, row) pairs printed per output; the result keeps more (the API has them all)


@dataclass(frozen=True)
class DecisionRow:
    output: str
    kind: str
    total: int
    flipped: int
    ratio: float
    state: str  # changed (over the limit), within (flipped, within the limit) or same
    limit: str
    flips: str  # the first flipped (sample, row) pairs


def rows(outputs: Sequence[OutputStats]) -> list[DecisionRow]:
    """One row per output that decides something; none when no output of the run does."""
    found = []
    for output in outputs:
        stats = output.decisions
        if stats is None:
            continue
        flips = ", ".join(f"sample {s} row {r}" for s, r in stats.flips[:SHOWN_FLIPS])
        more = stats.flipped - min(len(stats.flips), SHOWN_FLIPS)
        flips += f" … and {more:,} more" if more > 0 and flips else ""
        if any(r.code == "decision_changed" for r in output.reasons):
            state = "changed"
        else:
            state = "within" if stats.flipped else "same"
        limit = f"max_decision_flip_ratio {num(output.tolerance.max_decision_flip_ratio)}"
        found.append(
            DecisionRow(output.name, stats.kind, stats.total, stats.flipped, stats.ratio, state, limit, flips or "—")
        )
    return found
