"""Back-off that helps: a model whose runs cannot run waits whole intervals (a cron model its cron's),
its skipped ticks are counted apart from overlaps, and the wait ends as soon as something was fixed.

A real daemon (real store, real isolated checks) with its clock injected: the model ``spin`` has its
file deleted, so each check ends in ``model_error`` (a run that could not run).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.daemon.root import Daemon
from monitor.files import baselines
from monitor.results import Verdict
from monitor.store import Store
from tests import modelzoo
from tests.serving import two_models
from tests.workspace import Workspace

pytestmark = pytest.mark.process

START = 1_000_000_800.0  # 2001-09-09 01:46:40 UTC plus 800 s: on a 10-minute boundary + 400 s


class Ticks:
    """A daemon whose clock the test moves, and the models its scheduled ticks actually ran."""

    def __init__(self, ws: Workspace) -> None:
        self.now = START
        settings = ws.settings()
        self.store = Store(settings.store.url)
        self.store.upgrade()
        self.daemon = Daemon(settings, store=self.store, clock=lambda: self.now)
        self.ran: list[str] = []
        original = self.daemon.run_plan
        self.daemon.run_plan = lambda plan: self.ran.append(plan.name) or original(plan)  # type: ignore[method-assign]

    def tick(self, model: str = "spin") -> bool:
        """One scheduled tick of ``model``; True when it ran a check."""
        before = len(self.ran)
        self.daemon.scheduled_check(model)
        return len(self.ran) > before

    def counter(self, name: str, model: str = "spin") -> float:
        text = generate_latest(self.daemon.registry).decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels.get("model") == model:
                    return sample.value
        raise AssertionError(f"{name}{{model={model!r}}} not exported")


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


def broken(ws: Workspace, **schedule: str) -> Iterator[Ticks]:
    two_models(ws, interval="10m")
    if schedule:
        ws.set("spin", schedule=schedule)
    (ws.root / "models" / "spin.onnx").unlink()
    ticks = Ticks(ws)
    try:
        assert ticks.tick() and ticks.tick(), "the first two failures run"
        assert not ticks.tick(), "after the second failure in a row the model waits"
        yield ticks
    finally:
        ticks.daemon.stop()
        ticks.store.close()


def test_a_cron_model_backs_off_by_its_cron_gap_not_a_guessed_minute(ws: Workspace) -> None:
    for ticks in broken(ws, cron="*/10 * * * *"):
        # 2 failures: 2 x the cron's gap (600 s) = 1200 s; a guessed 60 s would have let it run at 121 s
        ticks.now += 121
        assert not ticks.tick()
        ticks.now += 1200 - 121 - 2
        assert not ticks.tick()
        ticks.now += 3
        assert ticks.tick(), "it runs again once 2 of its cron gaps passed"


def test_back_off_skips_are_counted_apart_from_overlaps(ws: Workspace) -> None:
    for ticks in broken(ws):
        assert not ticks.tick()
        assert ticks.counter("onnxmon_scheduler_backed_off_runs_total") == 2
        assert ticks.counter("onnxmon_scheduler_skipped_runs_total") == 0, "no run was still going"


def test_restoring_the_model_file_ends_the_back_off_at_the_next_tick(ws: Workspace) -> None:
    for ticks in broken(ws):
        ws.replace_model("spin", modelzoo.hang(iterations=1))
        assert ticks.tick(), "the file changed: checked at once, not after the back-off"
        assert ticks.store.latest_per_model()[0].verdict in (Verdict.PASS, Verdict.FAIL)
        assert ticks.tick(), "a run that could run forgets the back-off"


def test_a_new_active_baseline_ends_the_back_off(ws: Workspace) -> None:
    for ticks in broken(ws):
        active = ws.root / "baselines" / "spin" / baselines.ACTIVE_FILE
        active.write_text(active.read_text(encoding="utf-8"), encoding="utf-8")  # re-promoted: ACTIVE rewritten
        assert ticks.tick()


def test_a_config_change_of_the_model_ends_the_back_off(ws: Workspace) -> None:
    for ticks in broken(ws):
        ws.set("spin", timeout="4s")
        ws.write()
        assert ticks.daemon.reload()
        assert ticks.tick()


def test_an_unchanged_model_stays_backed_off_and_a_check_asked_for_runs_and_resets_it(ws: Workspace) -> None:
    for ticks in broken(ws):
        ws.write()  # the same config written again: nothing about the model changed
        assert ticks.daemon.reload()
        assert not ticks.tick()
        ws.replace_model("spin", modelzoo.hang(iterations=1))
        forced = ticks.daemon.run_now("spin")  # what POST /api/v1/models/spin/check does
        assert forced.verdict is not Verdict.ERROR
        assert ticks.daemon.backoff.failures("spin") == 0
