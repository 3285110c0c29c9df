"""The run page's "Decisions" section: per decided output, how many decisions flipped, and which.

A decision is what the output decides (``models[].decisions``: a class per row, a yes/no, a label);
the check keeps the first flipped (sample, row) pairs (``results.DecisionStats.flips``), shown here
so the on-call engineer can replay exactly those inputs. Warnings (``tolerance.numeric: warn``: a
numeric drift that flipped no decision) are listed with the reasons, under "Why".
"""

from __future__ import annotations

from collections.abc import Sequence

from monitor.api.web.html import badge, esc, num, section, table
from monitor.results import OutputStats

SHOWN_FLIPS = 20  # (sample, row) pairs printed per output; the result keeps more (the API has them all)


def render(outputs: Sequence[OutputStats]) -> str:
    """The section, or nothing when no output of the run decides anything."""
    decided = [o for o in outputs if o.decisions is not None]
    if not decided:
        return ""
    rows = []
    for output in decided:
        stats = output.decisions
        assert stats is not None
        flips = ", ".join(f"sample {s} row {r}" for s, r in stats.flips[:SHOWN_FLIPS])
        more = stats.flipped - min(len(stats.flips), SHOWN_FLIPS)
        flips += f" … and {more:,} more" if more > 0 and flips else ""
        limit = f"max_decision_flip_ratio {num(output.tolerance.max_decision_flip_ratio)}"
        if any(r.code == "decision_changed" for r in output.reasons):
            state = badge("changed", "bad", title=limit)
        else:
            state = badge("within limit", "warn", title=limit) if stats.flipped else badge("same", "ok")
        rows.append(
            [
                f'<span class="mono">{esc(output.name)}</span>',
                esc(stats.kind),
                esc(num(stats.total)),
                esc(num(stats.flipped)) + " " + state,
                esc(num(stats.ratio)),
                f'<span class="mono">{esc(flips) or "—"}</span>',
            ]
        )
    body = table(["Output", "Kind", "Decisions", "Flipped", "Ratio", "Flipped (sample, row)"], rows, empty="")
    return section("Decisions", body, anchor="decisions")
