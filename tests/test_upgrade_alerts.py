"""An upgrade that arrives as a restart, watched by a real Prometheus evaluating the shipped rules.

In Kubernetes an upgrade *is* a restart: a new image, a new pod, a new scrape target, and its
first checks finish before its first scrape (a 15-60 s scrape interval). Here, on one SQLite store
and one workspace:

1. the pod before the upgrade: ``onnxmon serve`` on this environment's ONNX Runtime, which
   captured the baseline, checks once (pass) and is stopped;
2. the upgrade: ``onnxmon serve`` of the ``scripts/ort-venv`` environment (another ONNX Runtime
   release) on another port, a new target. Its first check fails (``tests/modelzoo.layernorm_gelu``
   moves by a few ULP between the releases; the tolerance is bitwise). Prometheus is pointed at it
   only after that check was recorded: ``OnnxmonEnvironmentChanged`` must fire for the new target,
   ``OnnxmonOutputOutOfTolerance`` must not (1 failing run of the last 4);
3. the pod restarts once more on the same stack (a new target again) and checks once: the 2nd
   failing run, which Prometheus again never saw happen. The store counts both, so
   ``OnnxmonOutputOutOfTolerance`` pages for the new target at its first sample.

Every schedule is 1 h: each pod runs exactly the one check it makes at start-up.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from monitor.results import Verdict
from monitor.store import Store
from tests import modelzoo
from tests.conftest import need_binary
from tests.serving import Served, free_port
from tests.stacks import Stack, child_env, current_stack, older_stack
from tests.test_prometheus_e2e import JOB, Prometheus, wait_until
from tests.workspace import Workspace

pytestmark = [pytest.mark.slow, pytest.mark.prometheus]

MODEL = "ln"
ENV_ALERT, DRIFT_ALERT = "OnnxmonEnvironmentChanged", "OnnxmonOutputOutOfTolerance"


@dataclass
class Fleet:
    """One workspace and store that pods of either stack run on, one at a time, and a Prometheus."""

    ws: Workspace
    current: Stack
    older: Stack
    prometheus_binary: str
    prometheus: Prometheus | None = None
    pods: int = 0

    def runs(self) -> list[Verdict]:
        """The model's recorded verdicts, oldest first."""
        with Store(f"sqlite:///{self.ws.root / 'onnxmon.db'}") as store:
            return [run.verdict for run in reversed(store.runs(MODEL))]

    def pod(self, stack: Stack) -> Served:
        """A new pod on ``stack`` (a new target), returned once its start-up check is recorded."""
        before = len(self.runs())
        self.pods += 1
        served = Served(
            self.ws, free_port(), onnxmon=stack.onnxmon, base_env=child_env(), log_name=f"pod-{self.pods}.log"
        )
        served.wait_until(lambda: len(self.runs()) > before, f"the pod on {stack.ort_version} to record a check", 120)
        return served

    def scrape_only(self, served: Served) -> Prometheus:
        """Point Prometheus at ``served`` alone (started on first use); wait for its first scrape's gauges."""
        if self.prometheus is None:
            self.prometheus = Prometheus(self.prometheus_binary, self.ws.root / "prometheus", served.port)
        else:
            self.prometheus.retarget(served.port)
        prometheus = self.prometheus
        runs = f'onnxmon_recent_runs{{job="{JOB}", instance="127.0.0.1:{served.port}", model="{MODEL}"}}'
        wait_until(lambda: prometheus.value(runs) is not None, "the new target's first scrape", prometheus.process)
        return prometheus

    def alert(self, name: str) -> str | None:
        assert self.prometheus is not None
        return self.prometheus.alert_state(name, model=MODEL)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    binary = need_binary("prometheus", "prometheus")
    current, older = current_stack(), older_stack()
    root: Path = tmp_path_factory.mktemp("fleet")
    ws = Workspace(root)
    ws.add_model(
        MODEL,
        modelzoo.layernorm_gelu(),
        count=4,
        tolerance={"default": {"atol": 0.0, "rtol": 0.0}},
        session={"graph_optimization_level": "all", "intra_op_num_threads": 1},
        schedule={"interval": "1h"},
        timeout="60s",
    )
    ws.extra["daemon"] = {"startup_spread": 0}
    ws.write()
    subprocess.run(
        [str(current.onnxmon), "baseline", "capture", MODEL, "--quiet", "-c", str(ws.config_file)],
        cwd=root,
        env=child_env(),
        check=True,
        capture_output=True,
        timeout=300,
    )
    running = Fleet(ws, current, older, binary)
    try:
        yield running
    finally:
        if running.prometheus is not None:
            running.prometheus.stop()


def test_an_upgrade_by_restart_fires_the_environment_alert_and_pages_at_the_second_failing_run(fleet: Fleet) -> None:
    assert fleet.current.ort_version != fleet.older.ort_version
    assert fleet.pod(fleet.current).stop() == 0  # the pod before the upgrade, never scraped here
    assert fleet.runs() == [Verdict.PASS]

    upgraded = fleet.pod(fleet.older)  # the upgrade: a new pod whose first check failed before any scrape
    try:
        assert fleet.runs() == [Verdict.PASS, Verdict.FAIL]
        prometheus = fleet.scrape_only(upgraded)
        wait_until(lambda: fleet.alert(ENV_ALERT) == "firing", f"{ENV_ALERT} for the new target", prometheus.process)
        labels = {"job": JOB, "instance": f"127.0.0.1:{upgraded.port}", "model": MODEL}
        assert prometheus.value(f"onnxmon_environment_changes_total{_selector(labels)}") == 1
        increase = prometheus.value(f"increase(onnxmon_environment_changes_total{_selector(labels)}[1h])")
        assert not increase, "the counter was already 1 at the first sample: a rule on its increase() stays silent"
        # one failing run of the last 4: no page
        assert prometheus.value(f"onnxmon_output_recent_failing_runs{_selector(labels | {'output': 'y'})}") == 1
        assert fleet.alert(DRIFT_ALERT) is None
    finally:
        assert upgraded.stop() == 0

    restarted = fleet.pod(fleet.older)  # restarted again: its start-up check is the 2nd failing run
    try:
        assert fleet.runs() == [Verdict.PASS, Verdict.FAIL, Verdict.FAIL]
        prometheus = fleet.scrape_only(restarted)
        wait_until(
            lambda: fleet.alert(DRIFT_ALERT) == "firing", f"{DRIFT_ALERT} for the restarted target", prometheus.process
        )
        labels = {"job": JOB, "instance": f"127.0.0.1:{restarted.port}", "model": MODEL, "output": "y"}
        assert prometheus.value(f"onnxmon_output_recent_failing_runs{_selector(labels)}") == 2
        assert prometheus.value(f"onnxmon_output_out_of_tolerance_total{_selector(labels)}") == 1, (
            "this process saw one failing run: a rule on the counter would count 1, not 2"
        )
        assert fleet.alert(ENV_ALERT) == "firing", "the change is still under an hour old"
    finally:
        assert restarted.stop() == 0


def _selector(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
