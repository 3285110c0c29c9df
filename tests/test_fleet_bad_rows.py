"""A run whose stored digests or stack are not what a check writes (a hand edit, another release's format)
must cost that run's detail only: the vote of the fleet goes on, the node with the unreadable row is still
outvoted by its run digest, with every sample named (none can be shown to agree), and ``onnxmon fleet``
answers instead of a traceback that exits 1, the code of a standing outlier."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import text

from monitor.fleet import report
from monitor.store import Store
from tests.test_fleet import NOW, SETTINGS, check, odd, record, store  # noqa: F401 (a fixture)

BAD_DIGESTS = [
    [{"samples": ["a"]}],  # no name
    [{"name": "y", "samples": ["a"], "total": "abc"}],  # a sum that is not a number
    ["y"],
    {"y": 1},
    [{"name": "y", "samples": 5}],
]


@pytest.mark.parametrize("digests", BAD_DIGESTS, ids=lambda d: json.dumps(d)[:30])
def test_a_run_with_unreadable_digests_is_outvoted_on_every_sample_and_the_vote_goes_on(
    store: Store,  # noqa: F811
    digests: object,
) -> None:
    record(store, {f"n{i}": check() for i in range(4)} | {"n4": check(samples=odd(2))})
    with store.engine.begin() as connection:
        connection.execute(text("UPDATE runs SET digests = :d WHERE node = 'n4'"), {"d": json.dumps(digests)})
    (vote,) = report.vote(store, SETTINGS, NOW + timedelta(seconds=5))
    assert [(o.node, o.kind, o.samples) for o in vote.outliers] == [("n4", "outvoted", (0, 1, 2, 3))]


def test_a_run_with_an_unreadable_stack_is_voted_on_with_no_stack_fields(store: Store) -> None:  # noqa: F811
    record(store, {f"n{i}": check() for i in range(4)} | {"n4": check(samples=odd(2))})
    with store.engine.begin() as connection:
        connection.execute(text("UPDATE runs SET stack = :s"), {"s": json.dumps(["not", "a", "mapping"])})
    (vote,) = report.vote(store, SETTINGS, NOW + timedelta(seconds=5))
    assert [(o.node, o.kind, o.samples) for o in vote.outliers] == [("n4", "outvoted", (2,))]
