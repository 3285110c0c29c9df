"""Huge values that a config could pass: ``fleet.max_age`` far enough back that ``now - max_age`` is before
year 1 made every fleet vote raise OverflowError (``onnxmon fleet`` a traceback, ``/api/v1/fleet`` a 500,
every daemon's own vote failed). It is refused naming the field; the longest accepted one votes."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from monitor.config.settings import from_mapping
from monitor.errors import ConfigError
from monitor.fleet import report
from monitor.store import Store
from tests.test_fleet import NOW, check, odd, record, store  # noqa: F401 (a fixture)

ORIGIN = Path("/nonexistent/onnxmon.yaml")


def test_a_max_age_before_year_one_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"fleet\.max_age"):
        from_mapping({"fleet": {"max_age": "1000000d"}}, origin=ORIGIN)


def test_the_longest_max_age_accepted_still_votes(store: Store) -> None:  # noqa: F811
    record(store, {f"n{i}": check() for i in range(3)} | {"n3": check(samples=odd(1))})
    settings = from_mapping({"fleet": {"max_age": "36500d"}}, origin=ORIGIN)
    (vote,) = report.vote(store, settings, NOW + timedelta(seconds=5))
    assert [o.node for o in vote.outliers] == ["n3"]
