"""The status page in a real headless Chromium, served by a real ``onnxmon serve`` with a real history.

The history is made the way production makes it: baselines captured with the CLI, the daemon's
own startup runs, a baseline promoted through the API, a restart with ``NVIDIA_TF32_OVERRIDE=0``
(a stable environment field, so a new fingerprint), and a drift (a weight of the model file
changed) that the daemon localizes because the model has ``localize_on_fail``. Each page must
render its key content with no browser console error; screenshots go to ``tmp_path/screenshots``
or ``$ONNXMON_SCREENSHOTS_DIR``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import modelzoo
from tests.conftest import need_binary, unavailable
from tests.serving import free_port
from tests.workspace import Workspace

BIN = Path(sys.executable).parent
TOKEN = "browser-test-token-5d1e"
CHROME_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1360,900",
)


class Daemon:
    """``onnxmon serve`` in a child process (its log next to the config), talked to over HTTP."""

    def __init__(self, ws: Workspace, port: int, env: dict[str, str] | None = None) -> None:
        self.port = port
        self.log_path = ws.root / f"serve-{port}.log"
        self.log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [str(BIN / "onnxmon"), "serve", "-c", str(ws.config_file), "--port", str(port)],
            cwd=ws.root,
            env={**os.environ, **(env or {})},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.wait_until(lambda: self.call("GET", "/healthz")[0] == 200, "the daemon to answer /healthz")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def call(self, method: str, path: str, *, timeout: float = 120) -> tuple[int, Any]:
        request = urllib.request.Request(self.base + path, method=method)
        if method == "POST":
            request.add_header("Authorization", f"Bearer {TOKEN}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError:
            return 0, None

    def runs(self, model: str) -> list[dict[str, Any]]:
        status, body = self.call("GET", f"/api/v1/models/{model}/runs")
        return body if status == 200 else []

    def wait_until(self, condition: Any, what: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"daemon exited while waiting for {what}:\n{self.log_path.read_text()}")
            if condition():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}:\n{self.log_path.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            assert self.process.wait(60) == 0
        finally:
            self.log.close()


def onnxmon(ws: Workspace, *args: str) -> str:
    done = subprocess.run(
        [str(BIN / "onnxmon"), *args, "-c", str(ws.config_file)], cwd=ws.root, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture
def served_history(tmp_path: Path) -> Iterator[tuple[Daemon, dict[str, Any]]]:
    """A daemon whose history has a promotion, an environment change and a localized drift."""
    ws = Workspace(tmp_path / "ws")
    mlp = modelzoo.deep_mlp(layers=6)
    hourly: dict[str, Any] = {"schedule": {"interval": "1h"}, "timeout": "60s"}
    ws.add_model("clf", modelzoo.classifier(), count=2, **hourly)
    ws.add_model("mlp", mlp, count=2, localize_on_fail=True, **hourly)
    ws.extra["daemon"] = {"startup_spread": 0}
    ws.extra["api"] = {"token": TOKEN}
    ws.write()
    onnxmon(ws, "baseline", "capture", "clf", "--quiet")
    onnxmon(ws, "baseline", "capture", "mlp", "--intermediates", "--samples", "1", "--quiet")

    first = Daemon(ws, free_port())
    try:  # the startup runs (both pass), then a new clf baseline promoted through the API and checked
        first.wait_until(lambda: first.runs("clf") and first.runs("mlp"), "the startup runs")
        onnxmon(ws, "baseline", "capture", "clf", "--note", "re-captured", "--quiet")
        status, listed = first.call("GET", "/api/v1/models/clf/baselines")
        newest = next(b["baseline_id"] for b in reversed(listed) if not b["active"])
        assert first.call("POST", f"/api/v1/baselines/{newest}/promote?by=browser-test")[0] == 200
        assert first.call("POST", "/api/v1/models/clf/check")[1]["verdict"] == "pass"
    finally:
        first.stop()

    second = Daemon(ws, free_port(), env={"NVIDIA_TF32_OVERRIDE": "0"})
    try:
        second.wait_until(lambda: len(second.runs("clf")) == 3 and len(second.runs("mlp")) == 2, "the restart runs")
        ws.replace_model("mlp", modelzoo.perturb_initializer(mlp, "w2", 1.0, index=5))
        status, checked = second.call("POST", "/api/v1/models/mlp/check")
        assert status == 200 and checked["verdict"] == "fail", checked
        localization = checked["result"]["details"].get("localization", {})
        for answer in ("first_changed", "first_out_of_tolerance"):  # one FusedGemm for matmul_2, add_2, tanh_2
            node = localization.get(answer) or {}
            assert node.get("name") == "tanh_2" and "matmul_2" in node.get("fused_from", []), localization
        facts = {
            "drift_run": second.runs("mlp")[0]["id"],
            "promoted": newest,
            "env_before": first_fingerprint(second.runs("clf")),
            "env_after": second.runs("clf")[0]["environment_fingerprint"],
        }
        yield second, facts
    finally:
        second.stop()


def first_fingerprint(runs: list[dict[str, Any]]) -> str:
    return str(runs[-1]["environment_fingerprint"])


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    chromium = need_binary("chromium", "chromium")
    driver_path = need_binary("chromium", "chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        unavailable("chromium", f"selenium is not installed ({exc})")
        raise
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="onnxmon-chromium-", dir=tmp_path)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("ONNXMON_SCREENSHOTS_DIR") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"screenshots: {folder}")
    return folder


def visit(driver: Any, url: str, shot: Path) -> str:
    """Load ``url``, fail on any console message of level WARNING or worse, save a full-page screenshot."""
    driver.set_window_size(1360, 900)
    driver.get(url)
    problems = [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]
    assert not problems, f"console errors on {url}: {problems}"
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1360, min(max(int(height), 600), 6000))
    driver.save_screenshot(str(shot))
    text: str = driver.find_element("tag name", "body").text
    return text


@pytest.mark.process
def test_status_pages_render_in_chromium_without_console_errors(
    served_history: tuple[Daemon, dict[str, Any]], browser: Any, screenshots: Path
) -> None:
    daemon, facts = served_history
    base = daemon.base

    overview = visit(browser, base + "/", screenshots / "overview.png")
    assert overview.index("mlp") < overview.index("clf"), "the failing model is listed first"
    assert "FAIL" in overview and "PASS" in overview and "differs" in overview
    assert facts["promoted"] in overview
    assert len(browser.find_elements("css selector", "svg.spark")) == 2

    model = visit(browser, base + "/models/clf", screenshots / "model-clf.png")
    assert "Baselines" in model and "browser-test" in model and facts["promoted"] in model
    markers = browser.find_elements("css selector", "svg.chart g title")
    labels = [m.get_attribute("textContent") for m in markers]
    assert any(label.startswith("environment: " + facts["env_before"]) for label in labels), labels
    assert any(label.startswith("baseline promoted: ") for label in labels), labels
    assert len(browser.find_elements("css selector", "svg.chart a")) == 3, "one linked point per clf run"

    visit(browser, base + "/models/mlp", screenshots / "model-mlp.png")
    run = visit(browser, f"{base}/runs/{facts['drift_run']}", screenshots / "run-drift.png")
    assert "First changed node: tanh_2 (Tanh, #8)" in run  # ORT's FusedGemm, mapped back to the model
    assert "First node out of tolerance: tanh_2 (Tanh, #8)" in run
    assert "which replaced matmul_2, add_2, tanh_2" in run
    assert "What changed in the model file" in run, "the static diff against the baseline's manifest"
    assert "NVIDIA_TF32_OVERRIDE" in run, "the env diff against the baseline's environment"
    assert browser.find_elements("css selector", "div.plot svg circle"), "the per-node plot"

    environment = visit(browser, f"{base}/environments/{facts['env_after']}", screenshots / "environment.png")
    assert "env.NVIDIA_TF32_OVERRIDE" in environment and "stable" in environment
    diff = visit(
        browser,
        f"{base}/environments/diff?a={facts['env_before']}&b={facts['env_after']}",
        screenshots / "environment-diff.png",
    )
    assert "NVIDIA_TF32_OVERRIDE none → 0" in diff
    assert sorted(p.name for p in screenshots.iterdir()) == [
        "environment-diff.png",
        "environment.png",
        "model-clf.png",
        "model-mlp.png",
        "overview.png",
        "run-drift.png",
    ]
