"""A node name the store cannot keep as given: longer than its 253-character column, or holding a NUL or a
lone surrogate. The store keeps the run under the name cut and made storable; the node's own vote must
look itself up by that same name, or it never finds itself: no re-run, no recorded finding, no series.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from monitor.config.plan import CheckPlan
from monitor.config.settings import from_mapping
from monitor.daemon import fleetvote
from monitor.fleet import report
from monitor.sinks.prometheus.fleet_gauges import FleetGauges
from monitor.store import Store, fleet_rows
from monitor.store.text import storable
from tests.test_fleet import NOW, check, odd, record, store  # noqa: F401 (a fixture)

NO_RERUN = from_mapping({"fleet": {"rerun": False}}, origin=Path("/nonexistent/onnxmon.yaml"))


@pytest.mark.parametrize("node", ["gpu-" + "x" * 300, "gpu-\x00-01", "gpu-\ud800-01"], ids=["long", "nul", "surrogate"])
def test_a_node_whose_name_the_store_cuts_still_finds_itself_in_its_vote(store: Store, node: str) -> None:  # noqa: F811
    record(store, {f"n{i}": check(at=NOW - timedelta(seconds=5)) for i in range(4)})
    result = check(samples=odd(2), at=NOW - timedelta(seconds=5))
    run_id = store.record_run(result, node=node)
    registry = CollectorRegistry()
    plan = cast(CheckPlan, cast(Any, SimpleNamespace(name="m", timeout_s=60.0)))
    fleetvote.after_check(plan, result, run_id, settings=NO_RERUN, store=store, node=node, gauges=FleetGauges(registry))
    stored = storable(node)[:253]  # the runs.node column
    assert [(o.node, o.kind, o.samples) for o in fleet_rows.outliers(store, model="m")] == [(stored, "outvoted", (2,))]
    assert registry.get_sample_value("onnxmon_fleet_consistent", {"model": "m"}) == 0.0
    (vote,) = report.vote(store, NO_RERUN, NOW + timedelta(seconds=5))
    assert [o.node for o in report.standing(vote)] == [stored]
