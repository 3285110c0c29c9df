"""``Store.recent_states``: every model's recent window in one read, as each model's own history says it.

The ``/metrics`` collector reads the windows of all models at every scrape in a fixed number of
statements (``monitor/store/recent.py``). The oracle here is the history API, one model at a time:
``Store.runs`` (its newest runs on the node), ``Store.run`` (their outputs) and ``Store.events``.
The statements are cut into chunks of two models so that joining chunks is exercised too.
"""

from __future__ import annotations

import dataclasses

import pytest

from monitor.results import CheckResult, Verdict
from monitor.store import RECENT_RUNS, RecentState, Store, events, recent
from tests.test_metrics import Scenario


def expected(store: Store, model: str, node: str) -> RecentState:
    runs = store.runs(model, node=node, limit=RECENT_RUNS)
    failing: dict[str, int] = {}
    for run in runs:
        record = store.run(run.id)
        assert record is not None
        for output in record.outputs:
            if output.verdict is Verdict.FAIL:
                failing[output.name] = failing.get(output.name, 0) + 1

    def newest(kind: str) -> object:
        times = [e.at for e in store.events(model=model, kind=kind) if (e.node or "") in (node, "")]
        return max(times) if times else None

    return RecentState(
        runs=len(runs),
        errors=sum(1 for r in runs if r.verdict is Verdict.ERROR),
        failed=sum(1 for r in runs if r.verdict is Verdict.FAIL),
        failing=failing,
        environment_changed_at=newest(events.ENVIRONMENT_CHANGED),
        baseline_promoted_at=newest(events.BASELINE_PROMOTED),
    )


def test_the_windows_of_many_models_are_each_models_own(
    scenario: Scenario, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recent, "_CHUNK", 2)
    error = dataclasses.replace(scenario.failing, verdict=Verdict.ERROR, outputs=())
    moved = dict(scenario.passing.environment) | {"fingerprint": "another-environment"}
    kinds: list[CheckResult] = [scenario.passing, scenario.failing, error, scenario.failing]
    # model name -> how many runs on node-a (and one more on node-b for "m4")
    plan = {"m0": 0, "m1": 1, "m2": 3, "m3": 7, "m4": 2}
    clock = scenario.passing.started_at
    for model, count in plan.items():
        for index in range(count):
            clock += 10
            result = dataclasses.replace(
                kinds[index % len(kinds)], model=model, started_at=clock, finished_at=clock + 1
            )
            if model == "m3" and index == 5:  # the environment changes once: an event on node-a
                result = dataclasses.replace(result, environment=moved)
            store.record_run(result, node="node-a")
        if model == "m4":
            store.record_run(dataclasses.replace(scenario.failing, model=model, started_at=clock + 5), node="node-b")
    store.record_baseline({"baseline_id": "m2-b1", "model": "m2", "created_at": "2026-01-01T00:00:00+00:00"})
    store.record_promotion("m2", "m2-b1", by="test")  # a baseline_promoted event (node "")

    names = [*plan, "never-seen"]
    found = store.recent_states(names, "node-a")
    assert list(found) == names
    for model in plan:
        assert found[model] == expected(store, model, "node-a"), model
    assert found["never-seen"] == RecentState()
    # the oracle is not trivial: a full window, errors, failing outputs, an environment change
    assert found["m3"].runs == RECENT_RUNS and found["m3"].errors == 1 and found["m3"].failing
    assert found["m3"].failed == 2
    assert found["m3"].environment_changed_at is not None
    assert found["m2"].baseline_promoted_at is not None
    assert found["m4"].runs == 2  # node-b's run is not in node-a's window
    assert store.recent_states(["m4"], "node-b")["m4"] == expected(store, "m4", "node-b")
