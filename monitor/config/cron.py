"""Cron expressions, parsed one way for the whole of onnxmon.

A model's ``schedule.cron`` is a 5-field expression (minute hour day month weekday) in UTC. The
config validates it with ``trigger`` at load time, the scheduler builds its jobs with the same
function, and the ``onnxmon_schedule_interval_seconds`` gauge measures the longest gap between two
starts with it too, so an expression that one of them accepts can never be read differently by
another.
"""

from __future__ import annotations

import datetime as dt
import functools
import math

from apscheduler.triggers.cron import CronTrigger

from monitor.errors import ConfigError

# How far ahead the longest gap is measured: a week covers every weekday pattern.
GAP_WINDOW = dt.timedelta(days=7)


def trigger(expression: str, *, jitter: int | None = None, where: str = "schedule") -> CronTrigger:
    """A UTC ``CronTrigger`` from ``m h dom mon dow``; ``ConfigError`` naming the problem otherwise."""
    fields = expression.split()
    if len(fields) != 5:
        raise ConfigError(f"{where}: cron {expression!r} must have 5 fields (minute hour day month weekday)")
    minute, hour, day, month, day_of_week = fields
    try:
        return CronTrigger(
            minute=minute, hour=hour, day=day, month=month, day_of_week=day_of_week, timezone=dt.UTC, jitter=jitter
        )
    except ValueError as exc:
        raise ConfigError(f"{where}: cron {expression!r} is invalid: {exc}") from None


@functools.lru_cache(maxsize=256)
def longest_gap_seconds(expression: str, day: dt.date) -> float:
    """Longest time between two starts over the week from ``day``; NaN for an expression ``trigger`` refuses.

    Cached per day: a minutely cron walks ~10k fire times, which is worth doing once, not per scrape.
    """
    try:
        cron = trigger(expression)
    except ConfigError:
        return math.nan
    start = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
    end = start + GAP_WINDOW
    previous: dt.datetime | None = None
    current = cron.get_next_fire_time(None, start)
    longest = 0.0
    # The first fire after the window closes the last gap; a yearly cron has a single fire (or none).
    while current is not None:
        if previous is not None:
            longest = max(longest, (current - previous).total_seconds())
        if current > end:
            break
        previous = current
        current = cron.get_next_fire_time(current, current + dt.timedelta(seconds=1))
    return longest if longest > 0 else math.nan
