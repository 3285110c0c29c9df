"""The daemon's logs as a log pipeline reads them: a real ``onnxmon serve``, its stderr parsed.

``--log-format json`` is one strict JSON object per line with a check's fields at the top level
(and so is ``logging.format: json`` in the config, or ``ONNXMON_LOGGING__FORMAT=json``: a pod whose
arguments are fixed; a flag given wins);
the access log is off unless asked for; Alembic's INFO lines do not appear at start; an unknown
level or format is a usage error (exit 2) before anything starts.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from monitor import capture
from monitor.config.plan import plan_for
from tests import modelzoo
from tests.serving import BIN, Served, free_port
from tests.workspace import Workspace


def reject(token: str) -> Any:
    raise ValueError(f"non-standard JSON token {token}")


@pytest.fixture
def ws(tmp_path: Any) -> Workspace:
    ws = Workspace(tmp_path)
    ws.add_model("clf", modelzoo.classifier(), schedule={"interval": "1h"})
    ws.extra["daemon"] = {"startup_spread": 0}
    ws.write()
    capture.capture_baseline(plan_for(ws.settings(), "clf"))
    return ws


def serve(ws: Workspace, *extra: str, env: dict[str, str] | None = None) -> tuple[Served, list[str]]:
    served = Served(ws, free_port(), *extra, env=env)
    try:
        served.get("/healthz")
        served.wait_until(lambda: '"clf"' in served.log_path.read_text(), "the first check's log line")
    finally:
        code = served.stop()
    assert code == 0, served.log_path.read_text()
    return served, [line for line in served.log_path.read_text().splitlines() if line.strip()]


@pytest.mark.process
def test_json_logs_are_one_strict_object_per_line_with_the_check_fields_on_top(ws: Workspace) -> None:
    _, lines = serve(ws, "--log-format", "json", "--access-log")
    records = [json.loads(line, parse_constant=reject) for line in lines]  # every line, no text in between
    checks = [r for r in records if r.get("event") == "check"]
    assert checks and checks[0]["model"] == "clf" and checks[0]["verdict"] == "pass"
    assert all({"time", "level", "logger"} <= r.keys() and r["time"].endswith("Z") for r in records)
    access = [r for r in records if r["logger"] == "uvicorn.access"]
    assert any("/healthz" in r["message"] for r in access), "--access-log: one line per request"
    assert not [r for r in records if r["logger"].startswith("alembic")], "Alembic's INFO is quiet"


@pytest.mark.process
def test_text_logs_have_no_access_log_and_no_alembic_noise_by_default(ws: Workspace) -> None:
    _, lines = serve(ws)
    text = "\n".join(lines)
    assert "/healthz" not in text, "the access log is off by default"
    assert "Context impl" not in text and "Will assume" not in text and "alembic" not in text
    assert any('"event": "check"' in line and " INFO onnxmon." in line for line in lines)


@pytest.mark.process
@pytest.mark.parametrize("argv", [("--log-level", "verbose"), ("--log-format", "xml")])
def test_an_unknown_log_level_or_format_is_a_usage_error(ws: Workspace, argv: tuple[str, ...]) -> None:
    done = subprocess.run(
        [str(BIN / "onnxmon"), "serve", "-c", str(ws.config_file), *argv], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and argv[1] in done.stderr and "expected one of" in done.stderr


def json_records(lines: list[str]) -> list[dict[str, Any]]:
    records = [json.loads(line, parse_constant=reject) for line in lines]
    assert any(r.get("event") == "check" and r["model"] == "clf" for r in records)
    return records


@pytest.mark.process
def test_the_config_file_can_ask_for_json_logs_and_a_level(ws: Workspace) -> None:
    ws.extra["logging"] = {"format": "json", "level": "WARNING"}
    ws.write()
    _, lines = serve(ws, "--log-level", "info")  # the flag wins over logging.level
    assert all(r["level"] in ("info", "warning", "error", "critical") for r in json_records(lines))


@pytest.mark.process
def test_the_environment_can_ask_for_json_logs_without_touching_the_arguments(ws: Workspace) -> None:
    _, lines = serve(ws, env={"ONNXMON_LOGGING__FORMAT": "json"})
    json_records(lines)


@pytest.mark.process
def test_a_log_format_flag_wins_over_the_config(ws: Workspace) -> None:
    ws.extra["logging"] = {"format": "json"}
    ws.write()
    _, lines = serve(ws, "--log-format", "text")
    assert any('"event": "check"' in line and " INFO onnxmon." in line for line in lines)
    assert not any(line.startswith("{") for line in lines)


@pytest.mark.process
def test_an_unknown_logging_format_in_the_config_names_its_key(ws: Workspace) -> None:
    ws.extra["logging"] = {"format": "xml"}
    ws.write()
    done = subprocess.run(
        [str(BIN / "onnxmon"), "serve", "-c", str(ws.config_file)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "logging.format" in done.stderr, done.stderr


def test_the_config_level_and_format_apply_where_no_flag_is_given() -> None:
    import logging

    from monitor.cli import logs
    from monitor.config.serve_schema import LoggingConfig

    root = logging.getLogger()
    kept, level = list(root.handlers), root.level
    try:
        handler = logs.configure_from(LoggingConfig(format="json", level="warning"), None, None)
        assert isinstance(handler.formatter, logs.JsonFormatter) and root.level == logging.WARNING
        handler = logs.configure_from(LoggingConfig(format="json", level="warning"), "debug", "text")
        assert not isinstance(handler.formatter, logs.JsonFormatter) and root.level == logging.DEBUG
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in kept:
            root.addHandler(handler)
        root.setLevel(level)
