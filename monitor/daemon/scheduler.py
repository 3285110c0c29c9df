"""APScheduler 3.x jobs from config: one job per model, fixed ids, rebuilt at every (re)start.

Choices that matter, each for a reason:

- in-memory job store: a shared SQL job store would run every job once per replica;
- ``coalesce=True``: after a pause or a clock jump forward, one catch-up run, not a burst;
- ``max_instances=1``: a model never overlaps itself (a skipped run is counted);
- ``misfire_grace_time=None``: with APScheduler's default of one second, a model queued
  behind another in the worker pool is silently dropped as "missed"; ``None`` runs it late.
- checks that share a GPU run one at a time (``DeviceLocks``); CPU-only checks run in
  parallel up to ``daemon.workers``.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.interval import IntervalTrigger

from monitor.config import cron
from monitor.config.settings import ModelConfig, Settings
from monitor.errors import ConfigError

JOB_PREFIX = "check:"
EPOCH = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
_GPU_PROVIDERS = {
    "CUDAExecutionProvider": "cuda",
    "TensorrtExecutionProvider": "cuda",
    "ROCMExecutionProvider": "rocm",
    "MIGraphXExecutionProvider": "rocm",
    "DmlExecutionProvider": "dml",
}


def job_id(model: str) -> str:
    return f"{JOB_PREFIX}{model}"


def device_key(model: ModelConfig) -> str | None:
    """The accelerator a model runs on (``cuda:0``), or None for CPU-only models."""
    for provider in model.providers:
        family = _GPU_PROVIDERS.get(provider.name)
        if family:
            device = provider.options.get("device_id", 0)
            return f"{family}:{device}"
    return None


class DeviceLocks:
    """One lock per accelerator so that checks sharing a GPU never run concurrently."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    @contextmanager
    def hold(self, key: str | None) -> Iterator[None]:
        if key is None:
            yield
            return
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            yield


def trigger_for(settings: Settings, model: ModelConfig) -> BaseTrigger:
    """The APScheduler trigger of a model's schedule (interval or 5-field cron, UTC, jitter)."""
    schedule = settings.schedule_for(model)
    jitter = int(schedule.jitter) or None
    if schedule.cron is not None:
        return cron.trigger(schedule.cron, jitter=jitter, where=f"model {model.name!r}")
    assert schedule.interval is not None  # validated: exactly one of interval/cron
    # Aligned to a fixed epoch, so that every replica computes the same fire times: sharded
    # replicas then race for the same (model, slot) lease instead of running out of phase.
    return IntervalTrigger(seconds=schedule.interval, jitter=jitter, timezone=dt.UTC, start_date=EPOCH)


def slot_of(settings: Settings, model: ModelConfig, at: float) -> int:
    """The schedule slot a run starting at ``at`` (unix seconds) belongs to: the last fire time's index.

    APScheduler never fires early and its jitter only delays, so flooring tolerates a job that
    starts up to a whole interval late (queued behind other checks) without taking the next slot.
    """
    period = settings.schedule_for(model).interval or 60.0
    return math.floor((at - EPOCH.timestamp()) / period)


def build(
    settings: Settings,
    job: Callable[[str], None],
    *,
    on_missed: Callable[[str], None] | None = None,
    on_skipped: Callable[[str], None] | None = None,
    first_run_within: float = 10.0,
) -> BackgroundScheduler:
    """A started-later scheduler with one job per configured model.

    First runs are spread over ``first_run_within`` seconds so that a restart with many
    models does not start every check in the same instant.
    """
    scheduler = BackgroundScheduler(
        executors={"default": ThreadPoolExecutor(max_workers=settings.daemon.workers)},
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        timezone=dt.UTC,
    )
    install_jobs(scheduler, settings, job, first_run_within=first_run_within)

    def listener(event: JobEvent) -> None:
        if not event.job_id.startswith(JOB_PREFIX):
            return
        model = event.job_id.removeprefix(JOB_PREFIX)
        if event.code == EVENT_JOB_MISSED and on_missed:
            on_missed(model)
        elif event.code == EVENT_JOB_MAX_INSTANCES and on_skipped:
            on_skipped(model)

    scheduler.add_listener(listener, EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES)
    return scheduler


def install_jobs(
    scheduler: BackgroundScheduler, settings: Settings, job: Callable[[str], None], *, first_run_within: float = 10.0
) -> None:
    """Replace every check job with the ones ``settings`` describe (used at start and on reload).

    The new jobs are built and their first fire times computed before any old job is removed, so
    a schedule APScheduler cannot compute (an overflowing interval or jitter) raises ``ConfigError``
    with the old jobs still in place; should adding the new set fail half-way, the old set is put back.
    """
    planned = _planned_jobs(settings, first_run_within)
    previous = [existing for existing in scheduler.get_jobs() if existing.id.startswith(JOB_PREFIX)]
    for existing in previous:
        existing.remove()
    try:
        for model, trigger, first in planned:
            scheduler.add_job(
                job,
                trigger,
                args=[model],
                id=job_id(model),
                name=f"check {model}",
                replace_existing=True,
                **first,
            )
    except Exception:
        for existing in scheduler.get_jobs():
            if existing.id.startswith(JOB_PREFIX):
                existing.remove()
        for old in previous:
            scheduler.add_job(
                old.func, old.trigger, args=old.args, id=old.id, name=old.name, next_run_time=old.next_run_time
            )
        raise


def _planned_jobs(settings: Settings, first_run_within: float) -> list[tuple[str, BaseTrigger, dict[str, Any]]]:
    """(model, trigger, first-run keywords) per model, each trigger proven able to compute its next fire."""
    now = dt.datetime.now(dt.UTC)
    sharded = settings.daemon.mode == "sharded"
    planned: list[tuple[str, BaseTrigger, dict[str, Any]]] = []
    for model in settings.models:
        try:
            trigger = trigger_for(settings, model)
            trigger.get_next_fire_time(None, now)
            delay = random.uniform(0, first_run_within) if first_run_within > 0 else 0.0
            # Sharded replicas keep the aligned fire times (no early first run) so their slots agree.
            first: dict[str, Any] = {} if sharded else {"next_run_time": now + dt.timedelta(seconds=delay)}
        except (OverflowError, ValueError) as exc:
            raise ConfigError(f"model {model.name!r}: its schedule cannot be computed: {exc}") from None
        planned.append((model.name, trigger, first))
    return planned
