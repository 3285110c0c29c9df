"""End to end with a real Prometheus: `onnxmon serve` is scraped, the alert rules are evaluated,
and every PromQL expression of the dashboard and of the rules returns data once faults are injected.

Three models run every 3 s (timeout 2 s): ``drift`` (a deep MLP), ``broken`` and ``resaved`` (classifiers).
A real ``prometheus`` scrapes the daemon every second and evaluates an *unmodified* copy of
``deploy/prometheus/alerts.yaml`` every second. No rule needs shortening: the alert the test waits
for (``OnnxmonOutputOutOfTolerance``) has no ``for:`` and counts the model's last 4 runs in the
store, whatever the interval. The alerts with ``for: 5m`` are checked as ``pending``.

Faults injected after every model passed once:

- ``drift`` is swapped for its fp16 variant (``convert_float_to_float16(keep_io_types=True)``):
  verdict ``fail``, the output leaves its tolerance, ``OnnxmonOutputOutOfTolerance`` fires;
- ``broken``'s model file is overwritten with bytes that are not ONNX: verdict ``error``
  (``model_error``), ``OnnxmonRunErrors`` fires;
- ``resaved`` is re-saved with only its ``doc_string`` changed: verdict ``fail`` (``model_changed``)
  with every output within tolerance, ``OnnxmonCheckFailing`` fires (and not for ``drift``, whose
  fail pages as ``OnnxmonOutputOutOfTolerance``);
- the config file is broken and the daemon gets SIGHUP: ``onnxmon_config_last_reload_successful``
  turns 0, ``OnnxmonConfigReloadFailed`` is pending.

Expressions that return data only while their condition holds are listed explicitly below:
either the injected faults make the condition hold (``HOLDS_NOW``: queried as written), or no fault
here can make it hold (``CONDITION_LESS``: queried with each comparison turned into ``op bool``,
which keeps every series and proves both sides of the comparison match). A test fails when an
expression with a comparison is in neither table, so no expression is skipped silently.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from onnxconverter_common import float16

from monitor import capture
from monitor.config.plan import plan_for
from tests import modelzoo
from tests.conftest import need_binary
from tests.serving import Served, free_port
from tests.test_dashboard import RULES, PromQLExpr, promql_expressions
from tests.workspace import Workspace

pytestmark = [pytest.mark.slow, pytest.mark.prometheus]

JOB = "onnxmon"  # the job every rule of deploy/prometheus/alerts.yaml selects
INTERVAL_S = 3
DRIFT, BROKEN, RESAVED = "drift", "broken", "resaved"

# Expressions with a condition that the injected faults make true: queried as written.
HOLDS_NOW: dict[str, str] = {
    "panel:Time since last success [A]": "every model passed before the faults (last success > 0)",
    "panel:Failing runs by reason [A]": "drift fails (model_changed), broken errors (model_error)",
    "alert:OnnxmonOutputOutOfTolerance": "drift's output fails every run since the fp16 swap",
    "alert:OnnxmonRunErrors": "broken ends in model_error every run since its file was overwritten",
    "alert:OnnxmonCheckFailing": "resaved fails as model_changed, within tolerance, every run since its re-save",
    "alert:OnnxmonConfigReloadFailed": "the SIGHUP reload of the broken config failed",
}
# Expressions whose condition no fault here can make true: queried with `op` -> `op bool`.
CONDITION_LESS: dict[str, str] = {
    "annotation:Environment changes": "the stack does not change here (tests/test_upgrade_alerts.py changes it)",
    "annotation:Baseline promotions": "no baseline is promoted during the test",
    "alert:OnnxmonChecksStale": "a stale model needs > 2 intervals without any run",
    "alert:OnnxmonProviderFallback": "CPU only: the requested provider is always the effective one",
    "alert:OnnxmonEnvironmentChanged": "the stack does not change here (tests/test_upgrade_alerts.py changes it)",
    "alert:OnnxmonNondeterministic": "repeats: 1 never measures nondeterminism",
    "alert:OnnxmonNumericDriftWarning": "no model here sets tolerance.numeric: warn (broken decides logits)",
    "alert:OnnxmonNodeComputesDifferently": "one daemon is no fleet (tests/test_fleet_e2e.py fires it)",
    "alert:OnnxmonDown": "the daemon is up and scraped (its `absent()` side needs no target at all)",
}
# Expressions on series one daemon never has: the fleet's, set by a node's vote among others
# (tests/test_fleet_e2e.py queries each of them on a real Prometheus scraping a voting node).
ELSEWHERE: dict[str, str] = {
    "panel:Computes like its fleet [A]": "tests/test_fleet_e2e.py",
    "panel:Comparison group [A]": "tests/test_fleet_e2e.py",
    "alert:OnnxmonNodeComputesDifferently": "tests/test_fleet_e2e.py",
}
_COMPARISON = re.compile(r" (==|!=|>=|<=|>|<) (?!bool\b)")


def key(expr: PromQLExpr) -> str:
    return f"{expr.kind}:{expr.name}"


def is_conditional(expr: str) -> bool:
    """True when ``expr`` filters with a comparison, so it may return nothing while healthy."""
    return bool(_COMPARISON.search(expr))


def condition_less(expr: str) -> str:
    """``expr`` with every comparison ``a op b`` written ``a op bool b``: 0/1 values, no series dropped.

    The operand of an ``unless`` keeps its filter: written with ``bool`` it would match every series
    and leave nothing.
    """
    kept, unless, rest = expr.partition(" unless ")
    return _COMPARISON.sub(lambda m: f" {m.group(1)} bool ", kept) + unless + rest


# --------------------------------------------------------------------------- the real Prometheus


class Prometheus:
    """A real ``prometheus`` scraping one onnxmon target every second with ``rule_files``."""

    def __init__(self, binary: str, root: Path, target_port: int) -> None:
        self.port = free_port()
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        shutil.copy(RULES, root / "alerts.yaml")  # the unmodified rule file
        self._write_config(target_port)
        self.log = (root / "prometheus.log").open("w")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
            ],
            cwd=root,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until(lambda: self._get("/-/ready") is not None, "prometheus to be ready", self.process)

    def _write_config(self, target_port: int) -> None:
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": ["alerts.yaml"],
            "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}],
        }
        (self.root / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")

    def retarget(self, target_port: int) -> None:
        """Scrape only the target on ``target_port`` from now on (a new pod replaced the old one)."""
        self._write_config(target_port)
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200

    def _get(self, path: str) -> Any:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
                body = response.read().decode()
        except OSError:
            return None
        return json.loads(body) if path.startswith("/api/") else body

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr`` now (``/api/v1/query``); fails on a PromQL error."""
        answer = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert answer is not None and answer["status"] == "success", f"{expr!r}: {answer}"
        assert answer["data"]["resultType"] == "vector", expr
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def value(self, expr: str) -> float | None:
        """The single value of ``expr``, None while it has no data."""
        result = self.query(expr)
        assert len(result) <= 1, f"{expr!r} has {len(result)} series"
        return float(result[0]["value"][1]) if result else None

    def alerts(self) -> list[dict[str, Any]]:
        answer = self._get("/api/v1/alerts")
        assert answer is not None and answer["status"] == "success"
        found: list[dict[str, Any]] = answer["data"]["alerts"]
        return found

    def alert_state(self, name: str, **labels: str) -> str | None:
        found = self.alert(name, **labels)
        return str(found["state"]) if found is not None else None

    def alert(self, name: str, **labels: str) -> dict[str, Any] | None:
        for alert in self.alerts():
            if alert["labels"]["alertname"] == name and labels.items() <= alert["labels"].items():
                return dict(alert)
        return None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log.close()


def wait_until(condition: Callable[[], bool], what: str, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"process exited ({process.returncode}) while waiting for {what}")
        if condition():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def replace_atomically(path: Path, content: bytes) -> None:
    """Swap a model file in one rename, so a check never reads it half written."""
    staged = path.with_suffix(".staged")
    staged.write_bytes(content)
    os.replace(staged, path)


# --------------------------------------------------------------------------- the scenario


class Scenario:
    """A daemon and a Prometheus scraping it; faults are injected after every model passed."""

    def __init__(self, ws: Workspace, prometheus_binary: str) -> None:
        self.ws = ws
        timeout, interval = f"{INTERVAL_S - 1}s", f"{INTERVAL_S}s"
        self.healthy_drift_model = modelzoo.deep_mlp(layers=8)
        ws.add_model(DRIFT, self.healthy_drift_model, count=2, timeout=timeout, schedule={"interval": interval})
        ws.add_model(
            BROKEN,
            modelzoo.classifier(),
            count=2,
            timeout=timeout,
            schedule={"interval": interval},
            decisions={"logits": {"kind": "argmax"}},  # the decision series exist (numeric: warn is nobody's)
        )
        self.resaved_model = modelzoo.classifier(seed=3)
        ws.add_model(RESAVED, self.resaved_model, count=2, timeout=timeout, schedule={"interval": interval})
        ws.extra["daemon"] = {"startup_spread": 0}
        settings = ws.settings()
        for model in (DRIFT, BROKEN, RESAVED):
            capture.capture_baseline(plan_for(settings, model))
        self.daemon = Served(ws, free_port())
        self.prometheus = Prometheus(prometheus_binary, ws.root / "prometheus", self.daemon.port)
        self.faults_injected = False

    def wait(self, condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
        wait_until(condition, what, self.prometheus.process, timeout)
        assert self.daemon.process.poll() is None, f"the daemon exited while waiting for {what}"

    def value(self, expr: str) -> float | None:
        return self.prometheus.value(expr)

    def passed_once(self) -> None:
        """Wait until every model's first run passed, as Prometheus sees them."""
        self.wait(
            lambda: len(self.prometheus.query(f'onnxmon_last_run_success{{job="{JOB}"}} == 1')) == 3,
            "every model's first passing run in Prometheus",
        )

    def with_faults(self) -> None:
        """Inject the four faults once (after the first passing runs) and wait until their alerts fire."""
        if not self.faults_injected:
            self.passed_once()
            fp16 = float16.convert_float_to_float16(self.healthy_drift_model, keep_io_types=True)
            replace_atomically(self.ws.root / "models" / f"{DRIFT}.onnx", fp16.SerializeToString())
            replace_atomically(self.ws.root / "models" / f"{BROKEN}.onnx", b"this is not an ONNX model")
            self.resaved_model.doc_string = "re-saved: only the description changed"
            replace_atomically(self.ws.root / "models" / f"{RESAVED}.onnx", self.resaved_model.SerializeToString())
            self.ws.config_file.write_text(self.ws.config_file.read_text() + "\nmodels: [this is: not: valid\n")
            self.daemon.process.send_signal(signal.SIGHUP)
            self.faults_injected = True
        for alert, labels in (
            ("OnnxmonOutputOutOfTolerance", {"model": DRIFT}),
            ("OnnxmonRunErrors", {"model": BROKEN}),
            ("OnnxmonCheckFailing", {"model": RESAVED}),
        ):
            self.wait(partial(self.alert_is, alert, "firing", **labels), f"{alert} to fire for {labels}")

    def alert_is(self, name: str, state: str, **labels: str) -> bool:
        return self.prometheus.alert_state(name, **labels) == state

    def stop(self) -> int:
        self.prometheus.stop()
        return self.daemon.stop()


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    binary = need_binary("prometheus", "prometheus")
    ws = Workspace(tmp_path_factory.mktemp("e2e"))
    running = Scenario(ws, binary)
    try:
        yield running
    finally:
        assert running.stop() == 0, "the daemon did not exit 0 on SIGTERM"


# The tests below run in file order on one scenario: healthy first, then the faults.


def test_before_the_faults_both_models_pass_with_zero_deviation(scenario: Scenario) -> None:
    assert not scenario.faults_injected, "this test must run before the fault tests (file order)"
    scenario.passed_once()
    assert scenario.prometheus.value(f'up{{job="{JOB}"}}') == 1
    assert scenario.value(f'onnxmon_output_max_abs_error{{job="{JOB}", model="{DRIFT}", output="y"}}') == 0
    assert scenario.value(f'onnxmon_output_out_of_tolerance_total{{job="{JOB}", model="{DRIFT}", output="y"}}') == 0
    assert scenario.value(f'onnxmon_config_last_reload_successful{{job="{JOB}"}}') == 1
    assert scenario.prometheus.alert_state("OnnxmonOutputOutOfTolerance") is None
    # the dashboard's log panel draws that exact 0 at its floor instead of dropping it
    floor = scenario.value(
        f'clamp_min(onnxmon_output_max_abs_error{{job="{JOB}", model="{DRIFT}", output="y"}}, 1e-12)'
    )
    assert floor == 1e-12


def test_fp16_conversion_moves_the_drift_series_and_fires_the_out_of_tolerance_alert(scenario: Scenario) -> None:
    scenario.with_faults()
    drift = f'job="{JOB}", model="{DRIFT}"'
    alert = scenario.prometheus.alert("OnnxmonOutputOutOfTolerance", model=DRIFT)
    assert alert is not None and alert["state"] == "firing"
    assert "output" not in alert["labels"], "one alert per model"
    # the page says why: the last run's reason and attribution (the fp16 file is another model file)
    notes = alert["annotations"]
    assert (notes["reason"], notes["attribution"]) == ("model_changed", "model_changed"), notes
    assert notes["error_over_tolerance"] not in ("none", "<1", "unknown"), notes
    assert "output(s) y broke their tolerance" in notes["description"], notes["description"]
    assert (scenario.value(f'onnxmon_output_max_abs_error{{{drift}, output="y"}}') or 0) > 0
    assert (scenario.value(f'onnxmon_output_rms_error{{{drift}, output="y"}}') or 0) > 0
    assert (scenario.value(f'onnxmon_output_mismatch_ratio{{{drift}, output="y"}}') or 0) > 0
    assert scenario.value(f"onnxmon_last_run_success{{{drift}}}") == 0
    assert scenario.value(f'onnxmon_last_run_verdict{{{drift}, verdict="fail"}}') == 1
    assert (scenario.value(f'onnxmon_output_out_of_tolerance_total{{{drift}, output="y"}}') or 0) >= 2
    assert (scenario.value(f'onnxmon_run_failures_total{{{drift}, reason="model_changed"}}') or 0) >= 2


def test_error_ratio_shows_the_drift_past_the_tolerance_line(scenario: Scenario) -> None:
    scenario.with_faults()
    ratio = scenario.value(f'onnxmon_output_error_over_tolerance{{job="{JOB}", model="{DRIFT}", output="y"}}')
    assert ratio is not None and ratio > 1


def test_a_broken_model_file_fires_run_errors_and_a_broken_config_leaves_reload_failed_pending(
    scenario: Scenario,
) -> None:
    scenario.with_faults()
    errors = scenario.prometheus.alert("OnnxmonRunErrors", model=BROKEN)
    assert errors is not None and errors["state"] == "firing"
    assert errors["annotations"]["reason"] == "model_error", errors["annotations"]
    broken = f'job="{JOB}", model="{BROKEN}"'
    assert scenario.value(f'onnxmon_last_run_verdict{{{broken}, verdict="error"}}') == 1
    assert (scenario.value(f'onnxmon_run_failures_total{{{broken}, reason="model_error"}}') or 0) >= 2
    assert scenario.value(f'onnxmon_config_last_reload_successful{{job="{JOB}"}}') == 0
    assert scenario.prometheus.alert_state("OnnxmonConfigReloadFailed") == "pending", "it has `for: 5m`"


def test_a_model_resaved_within_tolerance_fails_as_model_changed_and_pages_once(scenario: Scenario) -> None:
    scenario.with_faults()
    resaved = f'job="{JOB}", model="{RESAVED}"'
    assert scenario.prometheus.alert_state("OnnxmonCheckFailing", model=RESAVED) == "firing"
    assert scenario.value(f'onnxmon_last_run_verdict{{{resaved}, verdict="fail"}}') == 1
    assert (scenario.value(f'onnxmon_run_failures_total{{{resaved}, reason="model_changed"}}') or 0) >= 2
    assert (scenario.value(f"onnxmon_recent_failing_runs{{{resaved}}}") or 0) >= 2
    for output in ("logits", "prob"):
        assert scenario.value(f'onnxmon_output_recent_failing_runs{{{resaved}, output="{output}"}}') == 0
    assert scenario.prometheus.alert_state("OnnxmonOutputOutOfTolerance", model=RESAVED) is None
    # drift's runs fail with its output out of tolerance: one page, OnnxmonOutputOutOfTolerance
    assert (scenario.value(f'onnxmon_recent_failing_runs{{job="{JOB}", model="{DRIFT}"}}') or 0) >= 2
    assert scenario.prometheus.alert_state("OnnxmonCheckFailing", model=DRIFT) is None


def test_every_conditional_expression_is_listed_with_how_it_is_checked() -> None:
    expressions = {key(e): e.expr for e in promql_expressions(substituted=True)}
    conditional = {name for name, expr in expressions.items() if is_conditional(expr)}
    assert conditional == set(HOLDS_NOW) | set(CONDITION_LESS), "list each conditional expression in one table"
    assert not set(HOLDS_NOW) & set(CONDITION_LESS)
    for name in CONDITION_LESS:
        assert condition_less(expressions[name]) != expressions[name]


@pytest.mark.parametrize("expr", [e for e in promql_expressions(substituted=True) if key(e) not in ELSEWHERE], ids=key)
def test_every_dashboard_and_rule_expression_returns_data(scenario: Scenario, expr: PromQLExpr) -> None:
    scenario.with_faults()
    query = condition_less(expr.expr) if key(expr) in CONDITION_LESS else expr.expr
    result = scenario.prometheus.query(query)
    assert result, f"{key(expr)} returned no data: {query}"
    models = {series["metric"]["model"] for series in result if "model" in series["metric"]}
    if expr.kind != "alert" and models:  # a dashboard row or a recording rule shows every configured model
        assert models == {DRIFT, BROKEN, RESAVED}, f"{key(expr)} shows models {sorted(models)}"
