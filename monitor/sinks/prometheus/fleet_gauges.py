"""This node's place in the fleet vote, per model (docs/fleet.md): two series per model per node, never a digest.

``onnxmon_fleet_consistent{model}``: 1 while this node agrees with its stack's majority (or is only
``transient``), 0 while it stands apart (outvoted, ``suspect_hardware``, ``stack``).
``onnxmon_fleet_group{model}``: the small number of its group (1: the model's largest group).
Set by the daemon after its own vote (``daemon/fleetvote.py``); a model it has not voted on has neither.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Gauge


class FleetGauges:
    """The two fleet series of this node, labelled by model only (the node is the scrape target's)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.consistent = Gauge(
            "onnxmon_fleet_consistent",
            "1 while this node computes what its stack's majority computes (docs/fleet.md), 0 while it stands apart.",
            ["model"],
            registry=registry,
        )
        self.group = Gauge(
            "onnxmon_fleet_group",
            "The number of this node's comparison group for the model (1: the largest); never a digest.",
            ["model"],
            registry=registry,
        )

    def set(self, model: str, consistent: bool, group: int) -> None:
        self.consistent.labels(model).set(1 if consistent else 0)
        self.group.labels(model).set(group)

    def forget(self, model: str) -> None:
        for gauge in (self.consistent, self.group):
            with contextlib.suppress(KeyError):  # never set for this model
                gauge.remove(model)
