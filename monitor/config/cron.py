"""Cron expressions, parsed one way for the whole of onnxmon.

A model's ``schedule.cron`` is a 5-field expression (minute hour day month weekday) in UTC. The
config validates it with ``trigger`` at load time, the scheduler builds its jobs with the same
function, and the ``onnxmon_schedule_interval_seconds`` gauge measures the longest gap between two
starts with it too, so an expression that one of them accepts can never be read differently by
another.

An expression that never fires (``0 0 31 2 *``: there is no February 31st) is refused by ``trigger``
like a malformed one: APScheduler would run such a job once (its first run is set by hand), then
drop it, and the model would go unmonitored with no staleness alert. The calendar repeats every 400
years (146,097 days, a whole number of weeks), so an expression with no fire in the next 400 years
has none at all. ``shortest_gap_seconds`` is what a check's ``timeout`` must stay under (the
scheduler never runs a model twice at once: a longer check skips the next start).
"""

from __future__ import annotations

import calendar
import datetime as dt
import functools
import itertools
import math

from apscheduler.triggers.cron import CronTrigger

from monitor.errors import ConfigError

# How far ahead the longest gap is measured: a week covers every weekday pattern (a rarer cron: its first gap).
GAP_WINDOW = dt.timedelta(days=7)
CYCLE = dt.timedelta(days=146_097)  # the Gregorian calendar's period: 400 years, a whole number of weeks
DAY_S = 86_400.0
_DAY_WALK = dt.timedelta(days=8 * 366)  # how far firing days are compared: leap days are up to 8 years apart


def trigger(expression: str, *, jitter: int | None = None, where: str = "schedule") -> CronTrigger:
    """A UTC ``CronTrigger`` from ``m h dom mon dow``; ``ConfigError`` naming the problem otherwise."""
    problem = problem_of(expression)
    if problem is not None:
        raise ConfigError(f"{where}: {problem}")
    return _parsed(expression, jitter)


def problem_of(expression: str) -> str | None:
    """Why ``expression`` cannot schedule anything (malformed, or it never fires), in one line; None when it can."""
    fields = expression.split()
    if len(fields) != 5:
        return f"cron {expression!r} must have 5 fields (minute hour day month weekday)"
    try:
        cron = _parsed(expression, None)
    except ValueError as exc:
        return f"cron {expression!r} is invalid: {exc}"
    now = dt.datetime.now(dt.UTC)
    first = cron.get_next_fire_time(None, now)
    if first is None or first > now + CYCLE:
        _, _, day, month, weekday = fields
        return f"cron {expression!r} never fires: {_no_such_date(day, month, weekday)}"
    return None


def _parsed(expression: str, jitter: int | None) -> CronTrigger:
    minute, hour, day, month, day_of_week = expression.split()
    return CronTrigger(
        minute=minute,
        hour=hour,
        day=day,
        month=month,
        day_of_week=weekdays(day_of_week),
        timezone=dt.UTC,
        jitter=jitter,
    )


_CRON_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")  # cron's numbers: 0 and 7 are Sunday


def weekdays(field: str) -> str:
    """A cron weekday field in APScheduler's terms: numbers as cron means them, written as day names.

    Cron counts 0 (and 7) as Sunday and 1 as Monday; APScheduler 3 counts 0 as Monday, so ``1-5``
    handed over as it is would run Tuesday to Saturday. Every numeric item (``5``, ``1-5``, ``*/2``,
    ``1-7/2``) becomes the names of the days it means; names and a bare ``*`` pass as they are.
    ``ValueError`` on a number past 7 or a range that runs backwards.
    """
    items = []
    for item in field.split(","):
        span, _, step_text = item.partition("/")
        if span != "*" and not any(ch.isdigit() for ch in span):
            items.append(item)  # ``mon``, ``mon-fri``, ``mon-fri/2``: APScheduler reads names as cron does
            continue
        if span == "*" and not step_text:
            items.append(item)
            continue
        start, _, end = ("0", "", "6") if span == "*" else span.partition("-")
        if not (start.isdigit() and (end.isdigit() or not end) and (step_text.isdigit() or not step_text)):
            raise ValueError(f"weekday {item!r}: write days as numbers 0-7 or as names, not both")
        first, step = int(start), int(step_text or 1)
        last = int(end) if end else (7 if step_text else first)  # ``5/2``: from Friday to the week's end
        if not (0 <= first <= last <= 7) or step < 1:
            raise ValueError(f"weekday {item!r}: cron weekdays are 0-7 (0 and 7 are Sunday), a range low to high")
        items.extend(_CRON_DAYS[n] for n in range(first, last + 1, step))
    return ",".join(dict.fromkeys(items))


def _no_such_date(day: str, month: str, weekday: str) -> str:
    """Why no date fits: ``no February 31st`` for plain numbers, the three fields otherwise.

    A date that exists falls on every weekday within 400 years, so with plain day and month numbers
    the date itself is what does not exist.
    """
    days, months = _numbers(day), _numbers(month)
    if days and months and all(1 <= m <= 12 for m in months):
        names = " or ".join(calendar.month_name[m] for m in months)
        if len(days) == 1 and len(months) == 1:
            return f"no {names} {_ordinal(days[0])}"
        return f"no {' or '.join(_ordinal(d) for d in days)} in {names}"
    return f"no date is day {day!r} of month {month!r} on weekday {weekday!r}"


def _numbers(field: str) -> list[int]:
    parts = field.split(",")
    return [int(p) for p in parts] if all(p.isdigit() for p in parts) else []


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _midnight(day: dt.date) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)


@functools.lru_cache(maxsize=256)
def next_gap_seconds(expression: str, after: dt.datetime) -> float:
    """The time from the expression's next fire after ``after`` to the one after it; NaN for one ``trigger`` refuses.

    What "one interval" means for a cron model at a given moment (a model backed off after failing
    runs waits a whole number of these, not a guessed minute).
    """
    try:
        cron = trigger(expression)
    except ConfigError:
        return math.nan
    first = cron.get_next_fire_time(None, after)
    second = cron.get_next_fire_time(first, first + dt.timedelta(seconds=1)) if first is not None else None
    return (second - first).total_seconds() if first is not None and second is not None else math.nan


def longest_gap_seconds(expression: str, day: dt.date) -> float:
    """Longest time between two starts over the week from ``day``; NaN for an expression ``trigger`` refuses.

    A cron that fires less than twice in the week (monthly, yearly) gives its first gap: the time
    from its next fire to the one after, so the staleness alert has a bound for it too.
    Cached per day: a minutely cron walks ~10k fire times, which is worth doing once, not per scrape.
    """
    try:
        cron = trigger(expression)
    except ConfigError:
        return math.nan
    start = _midnight(day)
    end = start + GAP_WINDOW
    previous: dt.datetime | None = None
    current = cron.get_next_fire_time(None, start)
    longest = 0.0
    # The first fire after the window closes the last gap (and a yearly cron's first gap is its only one).
    while current is not None:
        if previous is not None:
            longest = max(longest, (current - previous).total_seconds())
            if current > end:
                break
        previous = current
        current = cron.get_next_fire_time(current, current + dt.timedelta(seconds=1))
    return longest if longest > 0 else math.nan


@functools.lru_cache(maxsize=1024)
def shortest_gap_seconds(expression: str, day: dt.date, under: float = math.inf) -> float:
    """Shortest time between two starts from ``day`` on; NaN for an expression ``trigger`` refuses.

    The minute and hour fields do not depend on the day, so every firing day fires at the same times
    (its minutes in each of its hours): the shortest gap is the shortest one within a firing day, or,
    across firing days, the fewest days between two of them (over the next 8 years) less a day's span.
    Exact below ``under`` (a check's timeout): a gap of ``under`` or more may be given as any value not
    below it, so a daily or weekly cron with a short timeout is settled without walking its days.
    """
    try:
        cron = trigger(expression)
    except ConfigError:
        return math.nan
    first = cron.get_next_fire_time(None, _midnight(day))
    if first is None:
        return math.nan
    hours, minutes = _hours(cron, first), _minutes(cron, first)
    times = sorted(h * 3600.0 + m * 60.0 for h in hours for m in minutes)
    within: float = min((b - a for a, b in itertools.pairwise(times)), default=math.inf)
    span = times[-1] - times[0]
    if DAY_S - span >= under:  # no pair of firing days can come closer than under
        return min(within, DAY_S - span)
    firing: dt.date = first.date()
    days_apart: float = math.inf
    horizon = firing + _DAY_WALK
    while days_apart > 1 and firing < horizon:
        following = cron.get_next_fire_time(None, _midnight(firing + dt.timedelta(days=1)))
        if following is None:
            break
        days_apart = min(days_apart, (following.date() - firing).days)
        firing = following.date()
    return min(within, days_apart * DAY_S - span)


def _minutes(cron: CronTrigger, first: dt.datetime) -> list[int]:
    """The minutes a firing hour fires at: those of ``first``'s hour (the first of its day)."""
    found, current = [first.minute], first
    while (after := cron.get_next_fire_time(current, current + dt.timedelta(minutes=1))) is not None:
        if (after.date(), after.hour) != (first.date(), first.hour):
            break
        found.append(after.minute)
        current = after
    return found


def _hours(cron: CronTrigger, first: dt.datetime) -> list[int]:
    """The hours a firing day fires in: those of ``first``'s day."""
    found, current = [first.hour], first
    while current.hour < 23:
        after = cron.get_next_fire_time(None, current.replace(minute=0) + dt.timedelta(hours=1))
        if after is None or after.date() != first.date():
            break
        found.append(after.hour)
        current = after
    return found
