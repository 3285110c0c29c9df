"""Schedules that cannot monitor a model are refused at load (issue 42: #4 and the cron timeout).

A cron that never fires (``0 0 31 2 *``) passed ``config validate``: the daemon ran the model once (its
first run is set by hand), APScheduler dropped the job, ``onnxmon_schedule_interval_seconds`` was NaN
and ``OnnxmonChecksStale`` could never fire. A ``timeout`` longer than a cron's gap passed too, where
the same timeout on an ``interval`` is refused. Ground truth for the gaps is APScheduler's own walk
of the fire times.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
from pathlib import Path
from typing import Any

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

from monitor.config import cron
from monitor.config.settings import Schedule
from monitor.daemon import scheduler
from monitor.errors import ConfigError
from tests import modelzoo
from tests.conftest import onnxmon
from tests.workspace import Workspace

DAY = dt.date(2025, 3, 5)


def workspace(tmp_path: Path, **fields: Any) -> Workspace:
    ws = Workspace(tmp_path)
    ws.add_model("m", modelzoo.classifier(), count=1, **fields)
    ws.write()
    return ws


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ("0 0 31 2 *", "no February 31st"),
        ("*/5 * 30 2 *", "no February 30th"),
        ("0 0 31 4,6,9,11 *", "no 31st in April or June or September or November"),
        ("0 0 30,31 2 1", "no 30th or 31st in February"),
    ],
)
def test_config_validate_refuses_a_cron_that_never_fires_naming_file_field_and_why(
    tmp_path: Path, expression: str, why: str
) -> None:
    ws = workspace(tmp_path, schedule={"cron": expression})
    done = onnxmon("config", "validate", "-c", ws.config_file)
    assert done.exit_code == 2, done.output
    line = f"models[0].schedule: cron {expression!r} never fires: {why}"
    assert str(ws.config_file) in done.stderr and line in done.stderr, done.stderr


def test_serve_and_a_defaults_schedule_refuse_a_cron_that_never_fires(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    ws.extra["defaults"] = {"schedule": {"cron": "0 0 31 2 *"}}
    ws.write()
    done = onnxmon("serve", "-c", ws.config_file, "--port", "1")  # refused at load: nothing is started
    assert done.exit_code == 2, done.output
    assert "defaults.schedule: cron '0 0 31 2 *' never fires: no February 31st" in done.stderr, done.stderr


def test_the_scheduler_refuses_a_never_firing_cron_instead_of_running_it_once(tmp_path: Path) -> None:
    """A reload's settings that slipped past the schema (built by hand) still never install such a job."""
    settings = workspace(tmp_path, schedule={"cron": "0 0 * * *"}).settings()
    model = settings.models[0]
    never = Schedule.model_construct(interval=None, cron="0 0 31 2 *", jitter=0.0)
    broken = settings.model_copy(update={"models": [model.model_copy(update={"schedule": never})]})
    jobs = BackgroundScheduler(timezone=dt.UTC)
    with pytest.raises(ConfigError, match=r"model 'm': cron '0 0 31 2 \*' never fires: no February 31st"):
        scheduler.install_jobs(jobs, broken, lambda name: None)
    assert jobs.get_jobs() == []


def test_a_cron_that_fires_on_a_rare_date_is_kept() -> None:
    assert cron.problem_of("0 0 29 2 *") is None  # every leap year
    assert cron.problem_of("0 0 29 2 1") is None  # a leap day that is also a given weekday: rare, but it fires


@pytest.mark.parametrize(
    ("weekday", "days"),
    [
        ("1-5", {"Mon", "Tue", "Wed", "Thu", "Fri"}),
        ("0", {"Sun"}),
        ("7", {"Sun"}),
        ("6,0", {"Sat", "Sun"}),
        ("*/2", {"Sun", "Tue", "Thu", "Sat"}),
        ("1-5/2", {"Mon", "Wed", "Fri"}),
        ("mon-fri", {"Mon", "Tue", "Wed", "Thu", "Fri"}),
        ("*", {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}),
    ],
)
def test_a_cron_weekday_number_means_what_cron_means_sunday_is_0(weekday: str, days: set[str]) -> None:
    """APScheduler 3 counts 0 as Monday; cron counts 0 (and 7) as Sunday: ``1-5`` is Monday to Friday."""
    trigger = cron.trigger(f"0 9 * * {weekday}")
    fires, when = [], dt.datetime(2026, 12, 5, tzinfo=dt.UTC)  # a Saturday
    for _ in range(21):
        when = trigger.get_next_fire_time(None, when + dt.timedelta(seconds=1))
        assert when is not None
        fires.append(when)
    assert {f.strftime("%a") for f in fires} == days  # strftime: the C library's calendar, not APScheduler's
    assert all((f.hour, f.minute) == (9, 0) for f in fires)


@pytest.mark.parametrize("weekday", ["8", "5-1", "*/0", "mon-5"])
def test_a_cron_weekday_past_7_backwards_or_mixed_is_refused(weekday: str) -> None:
    problem = cron.problem_of(f"0 9 * * {weekday}")
    assert problem is not None and f"weekday {weekday!r}" in problem


@pytest.mark.parametrize(
    ("expression", "seconds"),
    [
        ("0 0 1 * *", 30 * 86400.0),  # 1 April to 1 May
        ("0 0 1 1 *", 365 * 86400.0),  # 1 January 2026 to 2027
        ("0 12 29 2 *", 1461 * 86400.0),  # 29 February 2028 to 2032
    ],
)
def test_a_cron_firing_less_than_weekly_has_a_staleness_bound_not_nan(expression: str, seconds: float) -> None:
    gap = Schedule(cron=expression).longest_gap_seconds(now=dt.datetime(2025, 3, 5, tzinfo=dt.UTC))
    trigger = cron.trigger(expression)
    first = trigger.get_next_fire_time(None, dt.datetime(2025, 3, 5, tzinfo=dt.UTC))
    assert first is not None
    second = trigger.get_next_fire_time(first, first + dt.timedelta(seconds=1))
    assert second is not None and gap == (second - first).total_seconds()
    assert not math.isnan(gap) and gap == seconds


def walked_shortest_gap(expression: str, days: int) -> float:
    """The shortest gap between two fire times of APScheduler's own walk over ``days`` days from ``DAY``."""
    minute, hour, day, month, weekday = expression.split()
    trigger = CronTrigger(
        minute=minute, hour=hour, day=day, month=month, day_of_week=cron.weekdays(weekday), timezone=dt.UTC
    )
    start = dt.datetime(DAY.year, DAY.month, DAY.day, tzinfo=dt.UTC)
    end = start + dt.timedelta(days=days)
    fires = [trigger.get_next_fire_time(None, start)]
    while fires[-1] is not None and fires[-1] < end:
        last = fires[-1]
        fires.append(trigger.get_next_fire_time(last, last + dt.timedelta(seconds=1)))
    times = [f for f in fires if f is not None]
    return min((b - a).total_seconds() for a, b in itertools.pairwise(times))


@pytest.mark.parametrize(
    ("expression", "days"),
    [
        ("*/5 * * * *", 2),
        ("7,8 */6 * * *", 3),
        ("0 9 * * 1-5", 14),
        ("0 1,23 * * *", 3),
        ("0 1,23 1,31 * *", 70),  # 31 March 23:00 to 1 April 01:00: two hours
        ("30 22 28,1 * *", 400),  # 28 February to 1 March 2026: a day
        ("0 0 1 * *", 400),
        ("0 0 * * 6", 30),
    ],
)
def test_the_shortest_gap_of_a_cron_is_apschedulers_walk(expression: str, days: int) -> None:
    assert cron.shortest_gap_seconds(expression, DAY) == walked_shortest_gap(expression, days)


@pytest.mark.parametrize(
    ("schedule", "timeout", "message"),
    [
        ({"cron": "*/5 * * * *"}, "10m", "timeout 600s must be shorter than the shortest gap between two starts of"
         " its schedule cron '*/5 * * * *' (300s), or runs would pile up"),
        ({"cron": "*/5 * * * *"}, "5m", "timeout 300s must be shorter than the shortest gap"),
        ({"cron": "0 1,23 * * *"}, "3h", "cron '0 1,23 * * *' (7200s)"),
        ({"interval": "5m"}, "5m", "timeout 300s must be shorter than its schedule interval 300s"),
    ],
)  # fmt: skip
def test_a_timeout_not_shorter_than_the_schedules_gap_is_refused_for_cron_as_for_interval(
    tmp_path: Path, schedule: dict[str, str], timeout: str, message: str
) -> None:
    ws = workspace(tmp_path, schedule=schedule, timeout=timeout)
    done = onnxmon("config", "validate", "-c", ws.config_file)
    assert done.exit_code == 2 and "model 'm'" in done.stderr and message in done.stderr, done.output


@pytest.mark.parametrize(("schedule", "timeout"), [({"cron": "*/5 * * * *"}, "4m"), ({"cron": "0 1,23 * * *"}, "1h")])
def test_a_timeout_under_the_crons_shortest_gap_is_accepted(
    tmp_path: Path, schedule: dict[str, str], timeout: str
) -> None:
    workspace(tmp_path, schedule=schedule, timeout=timeout).settings()
