"""Security properties: a read-only API without the token, constant-time token checks, no secret
in any output (API, metrics, logs, CLI, the daemon's stderr), a non-root container, a locked and
complete dependency list.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import subprocess
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from monitor import capture
from monitor.api import app, gate
from monitor.api.app import create_app
from monitor.cli import main
from monitor.config.plan import plan_for
from monitor.config.settings import Settings
from monitor.daemon.root import Daemon
from monitor.store import Store, incidents
from tests import modelzoo
from tests.serving import Served, free_port
from tests.test_metrics import RealDaemon, Scenario
from tests.workspace import Workspace

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "tok-7f3a9c1e5b2d4c6a8e0f"
DB_PASSWORD = "s3cr3t-pw-91d4"
UNREACHABLE_DB = f"postgresql+psycopg://onnxmon:{DB_PASSWORD}@127.0.0.1:1/history"
SECRETS = (TOKEN, DB_PASSWORD)
MUTATING = {("POST", "/api/v1/models/{name}/check"), ("POST", "/api/v1/baselines/{baseline_id}/promote")} | {
    ("POST", "/-/reload"),
    ("POST", "/api/v1/runs/{run_id}/incidents"),
    ("POST", "/runs/{run_id}/incidents"),  # the run page's form: the token is a form field
    ("POST", "/api/v1/benchsets/{benchset}/samples"),  # real traffic, staged (docs/serving.md)
    ("POST", "/api/v1/benchsets/{benchset}/promote"),
}


def with_api(settings: Settings, **fields: object) -> Settings:
    return settings.model_copy(update={"api": settings.api.model_copy(update=fields)})


def routes(app: Any) -> set[tuple[str, str]]:
    return {(method, r.path) for r in app.routes if isinstance(r, APIRoute) for method in r.methods or ()}


def concrete(path: str, scenario: Scenario) -> str:
    """``path`` with its parameters set to things that exist in the scenario."""
    fingerprint = str(scenario.passing.environment["fingerprint"])
    values = {"name": "clf", "run_id": "1", "incident_id": "1", "baseline_id": scenario.baseline_id}
    values["benchset"] = "clf-bench"
    values["fingerprint"] = fingerprint
    path = re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: values[m.group(1)], path)
    return path + (f"?a={fingerprint[:12]}&b={scenario.baseline_id}" if path.endswith("/diff") else "")


def assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"secret {secret[:4]}… appears in {where}"


def app_over(scenario: Scenario, store: Store, **api_fields: object) -> TestClient:
    handle = RealDaemon(
        with_api(scenario.settings, **api_fields), store, startup_env=dict(scenario.passing.environment)
    )
    handle.dispatch(scenario.passing)
    incidents.record_incident(store, 1, cause="tf32", text="seen before", fix=None, by="test", signature={})
    return TestClient(create_app(handle), raise_server_exceptions=False)


# --- a read-only API without the token ---------------------------------------------------------------


def test_the_only_mutating_routes_are_the_three_guarded_ones(scenario: Scenario, store: Store) -> None:
    app = app_over(scenario, store).app
    assert {(m, p) for m, p in routes(app) if m not in ("GET", "HEAD")} == MUTATING


@pytest.mark.slow
@pytest.mark.parametrize(
    ("api_fields", "headers", "status"),
    [
        ({}, {}, 403),  # no token configured: writes are disabled
        ({}, {"Authorization": f"Bearer {TOKEN}"}, 403),  # ... whatever the client sends
        ({"token": TOKEN}, {}, 401),
        ({"token": TOKEN}, {"Authorization": "Bearer "}, 401),
        ({"token": TOKEN}, {"Authorization": f"Basic {TOKEN}"}, 401),
        ({"token": TOKEN}, {"Authorization": f"Bearer {TOKEN[:-1]}"}, 401),  # shorter
        ({"token": TOKEN}, {"Authorization": f"Bearer {TOKEN}0"}, 401),  # longer
        ({"token": TOKEN}, {"Authorization": f"Bearer {TOKEN[:-1]}X"}, 401),  # differs in the last char
        ({"token": TOKEN}, {"Authorization": f"Bearer {TOKEN.upper()}"}, 401),
    ],
)
def test_every_mutating_route_refuses_a_missing_or_wrong_token(
    scenario: Scenario, store: Store, api_fields: dict[str, str], headers: dict[str, str], status: int
) -> None:
    client = app_over(scenario, store, **api_fields)
    for method, path in sorted(MUTATING):
        response = client.request(method, concrete(path, scenario), headers=headers)
        assert response.status_code == status, (path, response.text)
        assert_no_secret(response.text + str(response.headers), f"{path} response")


def test_every_read_route_works_without_a_token(scenario: Scenario, store: Store) -> None:
    client = app_over(scenario, store, token=TOKEN)
    reads = sorted(p for m, p in routes(client.app) if m == "GET" and not p.startswith(("/docs", "/redoc")))
    assert len(reads) >= 10, reads
    for path in reads:
        response = client.get(concrete(path, scenario))
        assert response.status_code == 200, (path, response.status_code, response.text[:300])


def test_a_token_file_is_read_at_each_request_so_rotation_works(
    scenario: Scenario, store: Store, tmp_path: Path
) -> None:
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    client = app_over(scenario, store, token_file=secret)
    promote = "/api/v1/baselines/no-such-baseline/promote"  # authorized: 404; refused: 401
    assert client.post(promote, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 404
    secret.write_text("rotated-token-0001\n")
    assert client.post(promote, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 401
    assert client.post(promote, headers={"Authorization": "Bearer rotated-token-0001"}).status_code == 404


def test_a_token_file_that_is_a_fifo_disables_writes_instead_of_hanging_the_request(
    scenario: Scenario, store: Store, tmp_path: Path
) -> None:
    # Opening a FIFO nobody writes to blocks forever: each mutating request would hang a worker thread.
    secret = tmp_path / "token"
    os.mkfifo(secret)
    client = app_over(scenario, store, token_file=secret)
    answered: list[int] = []
    promote = "/api/v1/baselines/no-such-baseline/promote"
    request = threading.Thread(
        target=lambda: answered.append(client.post(promote, headers={"Authorization": f"Bearer {TOKEN}"}).status_code),
        daemon=True,
    )
    request.start()
    request.join(30)
    if request.is_alive():  # unblock the reader so the thread ends, then fail
        os.close(os.open(secret, os.O_WRONLY | os.O_NONBLOCK))
        request.join(10)
        pytest.fail("a request hung reading api.token_file, a FIFO")
    assert answered == [403]


def test_tokens_are_compared_in_constant_time() -> None:
    for checker in (app._write_routes, gate.refusal):  # the route's dependency and the gate before the body
        source = inspect.getsource(checker)
        assert "hmac.compare_digest(" in source
        comparisons = [
            line for line in source.splitlines() if re.search(r"(given|expected|credentials)\S*\s*[!=]=", line)
        ]
        assert comparisons == [], f"token compared with == : {comparisons}"


# --- no secret in any output -------------------------------------------------------------------------


@pytest.fixture
def secret_workspace(tmp_path: Path) -> Workspace:
    """A real model with a baseline, configured with a token and an unreachable PostgreSQL with a password."""
    ws = Workspace(tmp_path)
    ws.add_model("clf", modelzoo.classifier(), count=2, timeout="20s", schedule={"interval": "1h"})
    ws.extra["daemon"] = {"startup_spread": 0}
    capture.capture_baseline(plan_for(ws.settings(), "clf"))
    ws.extra["store"] = {"url": UNREACHABLE_DB, "baselines_dir": "baselines", "benchsets_dir": "benchsets"}
    ws.extra["api"] = {"token": TOKEN}
    ws.write()
    return ws


@pytest.mark.database
@pytest.mark.process
def test_checks_logs_metrics_and_every_api_answer_hold_no_secret(
    secret_workspace: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = secret_workspace.settings()
    assert settings.store.url == UNREACHABLE_DB and settings.api.token == TOKEN
    daemon = Daemon(settings, store=Store(settings.store.url))
    try:
        result = daemon.run_now("clf")  # a real isolated check; the database sink cannot write
        assert_no_secret(json.dumps(result.to_dict(), default=str), "the check result")
        assert_no_secret(repr(settings) + str(settings), "repr(settings)")
        client = TestClient(create_app(daemon), raise_server_exceptions=False)
        for path in sorted(p for m, p in routes(client.app) if m == "GET"):
            response = client.get(re.sub(r"\{\w+(?::\w+)?\}", "clf", path))
            assert_no_secret(response.text + str(response.headers), f"GET {path}")
        for method, path in sorted(MUTATING):
            response = client.request(
                method, re.sub(r"\{\w+(?::\w+)?\}", "clf", path), headers={"Authorization": "Bearer x"}
            )
            assert_no_secret(response.text, f"{method} {path}")
    finally:
        daemon.stop()
    assert "127.0.0.1" in caplog.text or caplog.records, "the unreachable store should have been logged"
    assert_no_secret(caplog.text, "the log")


@pytest.mark.database
@pytest.mark.process
def test_onnxmon_serve_stderr_holds_no_secret(secret_workspace: Workspace) -> None:
    served = Served(secret_workspace, free_port())
    try:
        served.wait_until(lambda: "onnxmon_runs_total" in served.get("/metrics")[1], "a first run", timeout=90)
        time.sleep(1.0)
        for path in ("/metrics", "/readyz", "/api/v1/models", "/api/v1/events", "/api/v1/models/clf/runs"):
            assert_no_secret(served.get(path)[1], f"GET {path}")
    finally:
        assert served.stop() == 0
    output = (secret_workspace.root / "serve.log").read_text()
    assert output.strip(), "the daemon logged nothing about an unreachable store"
    assert_no_secret(output, "onnxmon serve's stderr")


def test_config_validate_prints_no_secret(secret_workspace: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "validate", "-c", str(secret_workspace.config_file)]) == 0
    captured = capsys.readouterr()
    assert_no_secret(captured.out + captured.err, "onnxmon config validate")


def test_config_show_masks_the_token_and_the_database_password(
    secret_workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "show", "-c", str(secret_workspace.config_file)]) == 0
    captured = capsys.readouterr()
    shown = json.loads(captured.out)
    assert shown["store"]["url"].startswith("postgresql+psycopg://onnxmon:")
    assert_no_secret(captured.out + captured.err, "onnxmon config show")


# --- the container -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.cpu"])
def test_the_image_user_is_the_uid_the_chart_runs_as(dockerfile: str) -> None:
    """The chart's runAsNonRoot/readOnlyRootFilesystem are tested in test_helm; this ties the uid to the image."""
    users = re.findall(r"^USER\s+(\S+)", (ROOT / "deploy" / dockerfile).read_text(encoding="utf-8"), re.MULTILINE)
    values = yaml.safe_load((ROOT / "helm" / "onnxmon" / "values.yaml").read_text(encoding="utf-8"))
    pod = values["podSecurityContext"]
    assert users[-1] == f"{pod['runAsUser']}:{pod['runAsGroup']}", users
    assert pod["runAsUser"] != 0 and pod["fsGroup"] == pod["runAsGroup"]


# --- dependencies ------------------------------------------------------------------------------------


def normalized(requirement: str) -> str:
    """The PEP 503 name of a requirement string (``psycopg[binary]>=3.1`` -> ``psycopg``)."""
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert name, requirement
    return re.sub(r"[-_.]+", "-", name.group(1)).lower()


def locked() -> dict[str, str]:
    pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", (ROOT / "requirements.lock").read_text(), re.MULTILINE)
    return {normalized(name): version for name, version in pins}


def test_the_lock_pins_every_runtime_cpu_postgres_and_dev_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    wanted = {normalized(r) for r in project["dependencies"] + extras["cpu"] + extras["postgres"] + extras["dev"]}
    wanted.discard(normalized(project["name"]))  # "onnxmon[cpu]" in dev is the project itself
    missing = sorted(wanted - set(locked()))
    assert missing == [], f"not in requirements.lock (run scripts/lock): {missing}"
    assert "psycopg-binary" in locked(), "the [binary] extra of psycopg must be locked too"


def test_every_locked_package_carries_a_sha256_hash() -> None:
    entries = re.split(r"\n(?=[A-Za-z0-9])", (ROOT / "requirements.lock").read_text().strip())
    unhashed = [e.split("==")[0] for e in entries if "==" in e and "--hash=sha256:" not in e]
    assert unhashed == [], unhashed


@pytest.mark.process
def test_the_lock_script_is_executable_and_compiles_from_pyproject() -> None:
    script = ROOT / "scripts" / "lock"
    assert script.stat().st_mode & 0o111
    text = script.read_text()
    assert "--generate-hashes" in text and "pyproject.toml" in text and "pip-audit" in text
    completed = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr


# --- nothing loads from elsewhere -------------------------------------------------------------------


def test_no_page_loads_swagger_or_anything_else_from_a_cdn(scenario: Scenario, store: Store) -> None:
    """FastAPI's /docs and /redoc fetch their scripts from a CDN: off, like every external asset."""
    client = app_over(scenario, store)
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        assert client.get(path).status_code == 404, path
    assert client.get("/openapi.json").json()["info"]["title"] == "onnxmon"
    pages = sorted(p for m, p in routes(client.app) if m == "GET" and "{" not in p and not p.startswith("/api/"))
    assert "/" in pages
    for path in pages:
        body = client.get(path).text
        assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", body), f"{path} loads from another origin"
