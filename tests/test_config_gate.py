"""Config validation is the one gate: what passes it can be scheduled, allocated and connected to.

Findings of the outside attack (issue 17, item 1): values that passed ``config validate`` and then
killed the reload thread or the scheduler (an interval of 99999999999999 days, a jitter of 1e300),
or made every check crash (a huge memory limit). Each is refused with its field path now, and a
reload that fails for any reason keeps the old jobs and says so in the reload metric.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.cli import main
from monitor.config.schema import Schedule
from monitor.daemon import scheduler
from monitor.daemon.root import Daemon
from monitor.errors import ConfigError
from monitor.store import Store
from tests.serving import two_models
from tests.workspace import Workspace

MODEL = {"name": "m", "path": "m.onnx", "benchset": "b"}
BENCHSET = {"name": "b", "generate": {"model": "m.onnx", "count": 2}}


def config_with(**sections: Any) -> dict[str, Any]:
    return {"benchsets": [BENCHSET], "models": [MODEL]} | sections


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (config_with(defaults={"schedule": {"interval": "99999999999999d"}}), "defaults.schedule.interval"),
        (
            config_with(models=[MODEL | {"schedule": {"interval": "1h", "jitter": 1.0e300}}]),
            "models[0].schedule.jitter",
        ),
        (config_with(daemon={"startup_spread": 1.0e300}), "daemon.startup_spread"),
        (config_with(daemon={"max_backoff": "9999999d"}), "daemon.max_backoff"),
        (config_with(daemon={"memory_limit_mb": 10**12}), "daemon.memory_limit_mb"),
        (config_with(defaults={"repeats": 10**20}), "defaults.repeats"),
        (config_with(defaults={"timeout": 1.0e300}), "defaults.timeout"),
        (config_with(defaults={"tolerance": {"snr_min_db": float("nan")}}), "defaults.tolerance.snr_min_db"),
        (config_with(defaults={"tolerance": {"atol": float("inf")}}), "defaults.tolerance.atol"),
        (config_with(store={"url": "notaurl"}), "store.url"),
        (config_with(store={"retention_passing": "99999999d"}), "store.retention_passing"),
        (
            config_with(benchsets=[BENCHSET | {"generate": {"model": "m.onnx", "seed": -1}}]),
            "benchsets[0].generate.seed",
        ),
        (config_with(benchsets=[BENCHSET | {"generate": {"model": "m.onnx", "dims": {"batch": -4}}}]), "dim 'batch'"),
        (
            config_with(benchsets=[BENCHSET | {"generate": {"model": "m.onnx", "ranges": {"x": [0, float("inf")]}}}]),
            "benchsets[0].generate.ranges",
        ),
    ],
)  # fmt: skip
def test_config_validate_refuses_what_cannot_be_scheduled_or_allocated(
    tmp_path: Path, config: dict[str, Any], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "onnxmon.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    assert main(["config", "validate", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert field in err
    assert "Traceback" not in err


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[Workspace, Daemon]]:
    ws = Workspace(tmp_path)
    two_models(ws)
    settings = ws.settings()
    store = Store(settings.store.url)
    store.upgrade()
    instance = Daemon(settings, store=store, config_path=ws.config_file)
    instance.start()
    yield ws, instance
    instance.stop()
    store.close()


def job_ids(daemon: Daemon) -> set[str]:
    return {job.id for job in daemon._scheduler.get_jobs() if job.id.startswith(scheduler.JOB_PREFIX)}


def reload_metric(daemon: Daemon) -> float | None:
    return daemon.registry.get_sample_value("onnxmon_config_last_reload_successful")


@pytest.mark.process
@pytest.mark.server
def test_a_reload_to_an_unschedulable_config_keeps_the_old_jobs_and_reports_the_failure(
    daemon: tuple[Workspace, Daemon],
) -> None:
    ws, instance = daemon
    before = job_ids(instance)
    assert before == {"check:clf", "check:spin"}
    ws.set("clf", schedule={"interval": "99999999999999d"})
    ws.write()
    assert instance.reload() is False
    assert job_ids(instance) == before
    assert reload_metric(instance) == 0.0
    ws.set("clf", schedule={"interval": "1h"})
    ws.write()
    assert instance.reload() is True
    assert reload_metric(instance) == 1.0


@pytest.mark.process
def test_jobs_whose_trigger_cannot_compute_a_fire_time_never_replace_the_running_ones(
    daemon: tuple[Workspace, Daemon],
) -> None:
    """Even past validation (a schedule built without it), the swap is all or nothing."""
    _, instance = daemon
    settings = instance.settings
    before = {job.id: job.trigger for job in instance._scheduler.get_jobs()}
    broken = Schedule.model_construct(interval=1.0e18, cron=None, jitter=0.0)
    model = settings.models[0].model_copy(update={"schedule": broken})
    hostile = settings.model_copy(update={"models": [model, *settings.models[1:]]})
    with pytest.raises(ConfigError, match="cannot be computed"):
        scheduler.install_jobs(instance._scheduler, hostile, lambda name: None)
    assert {job.id: job.trigger for job in instance._scheduler.get_jobs()} == before
    assert all(job.next_run_time is not None for job in instance._scheduler.get_jobs())
    assert min(job.next_run_time for job in instance._scheduler.get_jobs()) > dt.datetime(2020, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://u:hunter2@db/x", "postgresql+psycopg://u:***@db/x"),
        ("postgresql+psycopg://u@db/x?password=hunter2&sslmode=require", "postgresql+psycopg://u@db/x?password=***&sslmode=require"),
        ("postgresql+psycopg://db/x?sslpassword=hunter2&sslkey=/etc/key.pem", "postgresql+psycopg://db/x?sslpassword=***&sslkey=/etc/key.pem"),
    ],
)  # fmt: skip
def test_config_show_and_store_messages_mask_passwords_wherever_the_url_carries_them(
    tmp_path: Path, url: str, shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "onnxmon.yaml"
    path.write_text(yaml.safe_dump(config_with(store={"url": url})), encoding="utf-8")
    assert main(["config", "show", "-c", str(path)]) == 0
    out = capsys.readouterr().out
    assert shown in out and "hunter2" not in out
    store = Store(url)  # the engine connects lazily: nothing is dialled here
    try:
        assert "hunter2" not in store.display_url and "***" in store.display_url
    finally:
        store.close()


@pytest.mark.process
def test_a_reload_that_changes_the_database_is_refused_not_reported_as_applied(
    daemon: tuple[Workspace, Daemon],
) -> None:
    ws, instance = daemon
    before = instance.settings.store.url
    ws.extra["store"] = {"url": f"sqlite:///{ws.root / 'other.db'}", "baselines_dir": "baselines"}
    ws.write()
    assert instance.reload() is False
    assert instance.settings.store.url == before
    assert reload_metric(instance) == 0.0
