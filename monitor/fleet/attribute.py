"""What an outvoted node is, from a re-run of its differing samples on that node, in a fresh session.

- ``transient``: the re-run computes what the majority computed (exact mode), or no longer what the node
  recorded (tolerance mode): a one-time fault. Named, kept in the report, no alert.
- ``suspect_hardware``: the node computes its odd result again while the peers of its stack agree with
  each other: the same software on the same kind of board, so the board (or its host) is suspect. Drain
  the node and run ``dcgmi diag -r 3`` on it (docs/fleet.md).
- ``stack`` is not decided here: it is a group that differs from another group (``vote.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from monitor.results import OutputDigest

Rerun = Mapping[str, Mapping[int, str]]
"""A re-run's digests: output -> sample index -> digest."""

SUSPECT_ADVICE = "drain the node and run `dcgmi diag -r 3` on it"


def attribute(
    samples: Sequence[int],
    rerun: Rerun,
    recorded: Sequence[OutputDigest],
    majority: Sequence[OutputDigest],
    mode: str,
) -> tuple[str, str]:
    """``(kind, detail)`` of an outvoted node from the re-run of ``samples``."""
    if not samples:
        return "transient", "no sample differs any more"
    if mode == "exact":
        expected = {d.name: d.samples for d in majority}
        same = all(
            rerun.get(name, {}).get(i) == digests[i]
            for name, digests in expected.items()
            for i in samples
            if i < len(digests)
        )
    else:
        odd = {d.name: d.samples for d in recorded}
        same = not all(
            rerun.get(name, {}).get(i) == digests[i]
            for name, digests in odd.items()
            for i in samples
            if i < len(digests)
        )
    if same:
        return "transient", f"re-run of samples {_samples(samples)} in a fresh session agrees: a one-time difference"
    return (
        "suspect_hardware",
        f"re-run of samples {_samples(samples)} in a fresh session differs again while its stack's peers agree:"
        f" {SUSPECT_ADVICE}",
    )


def _samples(samples: Sequence[int]) -> str:
    shown = ", ".join(str(s) for s in samples[:8])
    return shown + (f" (+{len(samples) - 8})" if len(samples) > 8 else "")
