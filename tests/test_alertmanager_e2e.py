"""Every failing verdict pages once, saying why: daemon → Prometheus → Alertmanager → a webhook, all real.

``onnxmon serve`` checks five models every ``INTERVAL_S``; a real Prometheus evaluates the shipped rules
(``deploy/prometheus/alerts.yaml``) beside kube-prometheus-stack's ``InfoInhibitor`` rule; a real
Alertmanager (Debian's ``prometheus-alertmanager``) routes them as kube-prometheus-stack's default
config does (grouped by namespace, its three inhibit rules, InfoInhibitor included) with onnxmon's
route and inhibition (``deploy/alertmanager/onnxmon.yaml``) merged in, every wait shortened to a
second; a webhook receiver here (``http.server``) records what arrives. The faults, all real:

* ``drift``: a weight moved 1 % (the output leaves its tolerance): ``OnnxmonOutputOutOfTolerance``;
* ``swapped``: the file re-saved with another ``doc_string``, every output within tolerance:
  ``OnnxmonCheckFailing`` (``model_changed``);
* ``fallback``: CUDA asked for on a machine without it, so ONNX Runtime falls back to the CPU:
  ``OnnxmonCheckFailing`` (``provider_fallback``), never ``OnnxmonProviderFallback`` too;
* ``broken``: the file overwritten with garbage: ``OnnxmonRunErrors``; then restored: checked again
  within one interval (its back-off ends when the file changes) and the alert resolves;
* ``healthy``: nothing: no page.

The daemon runs with ``CUBLAS_WORKSPACE_CONFIG`` set, which the baselines' environment lacked: an
environment change, which must arrive inside the drift's notification (its ``environment_changed``
annotation), since the InfoInhibitor silences an info alert on its own.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.results import Verdict
from monitor.store import Store
from tests import modelzoo
from tests.conftest import need_binary
from tests.serving import Served, free_port
from tests.test_prometheus_e2e import Prometheus, replace_atomically, wait_until
from tests.workspace import Workspace

pytestmark = [pytest.mark.slow, pytest.mark.prometheus]

ROOT = Path(__file__).resolve().parent.parent
ONNXMON_AM = ROOT / "deploy" / "alertmanager" / "onnxmon.yaml"
INTERVAL_S = 3
ENV_CHANGE = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
EXPECTED = {
    "drift": ("OnnxmonOutputOutOfTolerance", "model_changed"),
    "swapped": ("OnnxmonCheckFailing", "model_changed"),
    "fallback": ("OnnxmonCheckFailing", "provider_fallback"),
    "broken": ("OnnxmonRunErrors", "model_error"),
}
# kube-prometheus-stack's InfoInhibitor rule (kube-prometheus, general.rules)
INFO_INHIBITOR_RULE = {
    "groups": [
        {
            "name": "general.rules",
            "rules": [
                {
                    "alert": "InfoInhibitor",
                    "expr": 'ALERTS{severity = "info"} == 1 unless on (namespace) '
                    'ALERTS{alertname != "InfoInhibitor", severity =~ "warning|critical", alertstate="firing"} == 1',
                    "labels": {"severity": "none"},
                }
            ],
        }
    ]
}


def alertmanager_config(webhook: str) -> dict[str, Any]:
    """kube-prometheus-stack's default Alertmanager config, a webhook for its "null", onnxmon's merged in."""
    ours = yaml.safe_load(ONNXMON_AM.read_text(encoding="utf-8"))
    route = {**ours["route"]["routes"][0], "receiver": "webhook"}
    route.update(group_wait="1s", group_interval="1s", repeat_interval="12h")
    return {
        "route": {
            "receiver": "webhook",
            "group_by": ["namespace"],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "12h",
            "routes": [
                {"receiver": "null", "matchers": ['alertname = "Watchdog"']},
                {"receiver": "null", "matchers": ['alertname = "InfoInhibitor"']},
                route,
            ],
        },
        "inhibit_rules": [
            {
                "source_matchers": ["severity = critical"],
                "target_matchers": ["severity =~ warning|info"],
                "equal": ["namespace", "alertname"],
            },
            {
                "source_matchers": ["severity = warning"],
                "target_matchers": ["severity = info"],
                "equal": ["namespace", "alertname"],
            },
            {
                "source_matchers": ["alertname = InfoInhibitor"],
                "target_matchers": ["severity = info"],
                "equal": ["namespace"],
            },
            *ours["inhibit_rules"],
        ],
        "receivers": [
            {"name": "null"},
            {"name": "webhook", "webhook_configs": [{"url": webhook, "send_resolved": True}]},
        ],
    }


class Webhook:
    """An Alertmanager webhook receiver: every notification's alerts, in arrival order."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        received = self.received

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, status: str = "firing") -> list[dict[str, Any]]:
        """Each alert of each notification with ``status`` (one entry per notification it came in)."""
        return [a for n in list(self.received) for a in n["alerts"] if a["status"] == status]

    def arrived(self, alertname: str, model: str, status: str = "firing") -> list[dict[str, Any]]:
        return [a for a in self.alerts(status) if a["labels"].get("alertname") == alertname
                and a["labels"].get("model") == model]  # fmt: skip


class Alertmanager:
    def __init__(self, binary: str, root: Path, webhook: str) -> None:
        root.mkdir(parents=True, exist_ok=True)
        (root / "alertmanager.yml").write_text(yaml.safe_dump(alertmanager_config(webhook)), encoding="utf-8")
        self.port = free_port()
        self.log = (root / "alertmanager.log").open("w")
        self.process = subprocess.Popen(
            [binary, f"--config.file={root / 'alertmanager.yml'}", f"--storage.path={root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address="],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)
        self.log.close()


class RoutedPrometheus(Prometheus):
    """The e2e test's Prometheus, with kube-prometheus-stack's InfoInhibitor rule and an Alertmanager."""

    def __init__(self, binary: str, root: Path, target_port: int, alertmanager_port: int) -> None:
        self.alertmanager_port = alertmanager_port
        super().__init__(binary, root, target_port)

    def _write_config(self, target_port: int) -> None:
        super()._write_config(target_port)
        config = yaml.safe_load((self.root / "prometheus.yml").read_text(encoding="utf-8"))
        (self.root / "kps.yaml").write_text(yaml.safe_dump(INFO_INHIBITOR_RULE), encoding="utf-8")
        config["rule_files"].append("kps.yaml")
        targets = [f"127.0.0.1:{self.alertmanager_port}"]
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": targets}]}]}
        (self.root / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workspace, Served, Webhook]]:
    prometheus_binary = need_binary("prometheus", "prometheus")
    alertmanager_binary = need_binary("alertmanager", "prometheus-alertmanager")
    ws = Workspace(tmp_path_factory.mktemp("routed"))
    timing = {"timeout": f"{INTERVAL_S - 1}s", "schedule": {"interval": f"{INTERVAL_S}s"}}
    models = {name: modelzoo.classifier(seed=i) for i, name in enumerate(("drift", "swapped", "fallback", "broken"))}
    models["healthy"] = modelzoo.classifier(seed=9)
    for name, model in models.items():
        ws.add_model(name, model, count=2, tolerance={"outputs": {"logits": {"atol": 1e-4, "rtol": 0.0}}}, **timing)
    ws.extra["daemon"] = {"startup_spread": 0}
    ws.write()
    for name in models:  # captured as a user does, in a process of its own: this one may have mapped torch's CUDA
        onnxmon = str(Path(sys.executable).parent / "onnxmon")
        command = [onnxmon, "baseline", "capture", name, "--config", str(ws.config_file)]
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)
    # the faults, before the daemon's first check
    ws.replace_model("drift", modelzoo.perturb_initializer(models["drift"], "w2", 1e-2))
    models["swapped"].doc_string = "re-saved: only the description changed"
    ws.replace_model("swapped", models["swapped"])
    ws.set("fallback", providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    ws.write()
    replace_atomically(ws.root / "models" / "broken.onnx", b"this is not an ONNX model")
    webhook = Webhook()
    alertmanager = Alertmanager(alertmanager_binary, ws.root / "alertmanager", webhook.url)
    daemon = Served(ws, free_port(), env=ENV_CHANGE)
    prometheus = RoutedPrometheus(prometheus_binary, ws.root / "prometheus", daemon.port, alertmanager.port)
    try:
        paged = lambda: all(webhook.arrived(EXPECTED[m][0], m) for m in EXPECTED)  # noqa: E731
        wait_until(paged, "every page at the webhook", prometheus.process, timeout=90)
        yield ws, daemon, webhook
    finally:
        prometheus.stop()
        alertmanager.stop()
        daemon.stop()
        webhook.server.shutdown()


def test_every_failing_verdict_arrives_once_per_model_with_its_reason_and_likely_cause(
    routed: tuple[Workspace, Served, Webhook],
) -> None:
    _, _, webhook = routed
    time.sleep(3 * INTERVAL_S)  # more runs, more evaluations: still one page each
    for model, (alertname, reason) in EXPECTED.items():
        pages = [a for a in webhook.alerts() if a["labels"].get("model") == model]
        assert {a["labels"]["alertname"] for a in pages} == {alertname}, (model, pages)
        (page,) = webhook.arrived(alertname, model)  # one notification, not one per run or per output
        notes = page["annotations"]
        assert notes["reason"] == reason, (model, notes)
        # the daemon runs without daemon.diagnose_on_fail: a fail says so, an error names no cause
        assert notes["likely_cause"] == ("none" if model == "broken" else "undiagnosed"), notes
        assert reason in notes["summary"] and f"reason {reason}" in notes["description"], notes
    assert not [a for a in webhook.alerts() if a["labels"].get("model") == "healthy"]
    assert not [a for a in webhook.alerts() if a["labels"]["alertname"] == "OnnxmonProviderFallback"]


def test_the_environment_change_arrives_inside_the_drift_notification(
    routed: tuple[Workspace, Served, Webhook],
) -> None:
    _, _, webhook = routed
    (page,) = webhook.arrived("OnnxmonOutputOutOfTolerance", "drift")
    assert "env.CUBLAS_WORKSPACE_CONFIG" in page["annotations"]["environment_changed"], page["annotations"]
    assert "env.CUBLAS_WORKSPACE_CONFIG" in page["annotations"]["description"]
    assert "output(s) logits" in page["annotations"]["description"]


def test_a_fixed_model_is_checked_again_within_one_interval_and_its_alert_resolves(
    routed: tuple[Workspace, Served, Webhook],
) -> None:
    ws, daemon, webhook = routed
    settings = ws.settings()
    with Store(settings.store.url) as store:
        fixed_at = time.time()
        ws.replace_model("broken", modelzoo.classifier(seed=3))  # the file the baseline describes, back

        def checked_again() -> bool:
            runs = store.runs("broken", limit=1)
            return bool(runs) and runs[0].finished_at.timestamp() > fixed_at and runs[0].verdict is Verdict.PASS

        daemon.wait_until(checked_again, "a passing run of the fixed model", timeout=4 * INTERVAL_S)
        resumed = store.runs("broken", limit=1)[0].finished_at.timestamp() - fixed_at
    assert resumed < INTERVAL_S + 2, f"checked again {resumed:.1f} s after the fix (back-off not reset?)"
    daemon.wait_until(lambda: webhook.arrived("OnnxmonRunErrors", "broken", "resolved"), "the resolved page", 60)
